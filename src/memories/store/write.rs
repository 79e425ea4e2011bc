//! Writing a memory in one statement with its chunks: a new one under its key or a generated
//! key (`POST`), or under a given key idempotently (`PUT`: unchanged, updated or replaced).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{Prepared, check_key, hex};
use crate::access::Target;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::memories::model::{PreviousVersion, StoreStatus, StoredMemory};
use crate::memories::placeholder;

/// A fresh key: `cmd_` for command output, else `mem_`, and 12 hex digits.
fn generate_key(memory_type: &str) -> String {
    let prefix = if memory_type == "command_output" {
        "cmd_"
    } else {
        "mem_"
    };
    // Hashing a UUIDv7 (time + counter + random) spreads its entropy over the kept digits.
    let digest = Sha256::digest(Uuid::now_v7().as_bytes());
    format!("{prefix}{}", hex(&digest[..6]))
}

/// What a write returns of the memory row.
struct Written {
    version: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The chunks of a prepared memory as column arrays, bound to the `unnest(...)` of the inserts.
struct ChunkColumns<'a> {
    byte_starts: Vec<i64>,
    byte_lens: Vec<i32>,
    line_starts: Vec<i64>,
    line_ends: Vec<i64>,
    texts: Vec<&'a str>,
    /// Whether the memory only asks, and whether it ends with a question (stored with it for
    /// the search's lifts, see [`crate::search::asking::memory_asks`]).
    asks: bool,
    ends_asking: bool,
}

impl<'a> ChunkColumns<'a> {
    fn of(p: &'a Prepared) -> Self {
        let n = p.chunks.len();
        let mut columns = ChunkColumns {
            byte_starts: Vec::with_capacity(n),
            byte_lens: Vec::with_capacity(n),
            line_starts: Vec::with_capacity(n),
            line_ends: Vec::with_capacity(n),
            texts: Vec::with_capacity(n),
            asks: false,
            ends_asking: false,
        };
        for chunk in &p.chunks {
            columns.byte_starts.push(chunk.byte_start as i64);
            columns
                .byte_lens
                .push(i32::try_from(chunk.byte_len).unwrap_or(i32::MAX));
            columns.line_starts.push(chunk.line_start as i64);
            columns.line_ends.push(chunk.line_end as i64);
            columns.texts.push(chunk.text(&p.content));
        }
        (columns.asks, columns.ends_asking) = crate::search::asking::memory_asks(&columns.texts);
        columns
    }
}

/// Inserts the memory row and all its chunks in one statement, `mnemo_write_memory`'s (which
/// also queues the chunks for the embedder when the server has one). `None` when the key exists.
async fn insert(target: &mut Target<'_>, p: &Prepared, key: &str) -> ApiResult<Option<Written>> {
    let columns = ChunkColumns::of(p);
    let chunk_count = i32::try_from(p.chunks.len()).unwrap_or(i32::MAX);
    let id = Uuid::now_v7();
    // The call with its arguments; `$sql` names the function's last two, the tenant and user.
    macro_rules! write_memory {
        ($queue:expr, $sql:literal $(, $scope:expr)*) => {
            sqlx::query_as!(
                Written,
                $sql,
                id,
                key,
                p.agent_id,
                p.thread_id,
                p.memory_type,
                p.summary,
                p.metadata,
                p.size_bytes,
                p.line_count,
                p.token_count,
                p.sha256,
                chunk_count,
                &columns.byte_starts,
                &columns.byte_lens,
                &columns.line_starts,
                &columns.line_ends,
                &columns.texts as &[&str],
                columns.asks,
                columns.ends_asking,
                $queue
                $(, $scope)*
            )
        };
    }
    let written = match target {
        // Its own transaction, acting as the caller.
        Target::Call(caller) => caller
            .write_call(|tenant, user| {
                write_memory!(
                    caller.queues_embeddings(),
                    r#"SELECT version AS "version!", created_at AS "created_at!",
                              updated_at AS "updated_at!"
                       FROM mnemo_write_memory($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                           $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)"#,
                    tenant,
                    user
                )
            })
            .await?
            .into_iter()
            .next(),
        // In the caller's transaction, whose scope the function sets again, to the same user.
        Target::Tx(conn) => {
            write_memory!(
                conn.queues_embeddings(),
                r#"SELECT version AS "version!", created_at AS "created_at!",
                          updated_at AS "updated_at!"
                   FROM mnemo_write_memory($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                       $13, $14, $15, $16, $17, $18, $19, $20, current_setting('mnemo.tenant'),
                       current_setting('mnemo.user'))"#
            )
            .fetch_optional(&mut **conn)
            .await?
        }
    };
    Ok(written)
}

fn stored(
    p: &Prepared,
    key: String,
    written: Written,
    status: StoreStatus,
    previous: Option<PreviousVersion>,
) -> StoredMemory {
    StoredMemory {
        placeholder: placeholder::placeholder(&key, &p.summary),
        memory_key: key,
        summary: p.summary.clone(),
        memory_type: p.memory_type.clone(),
        agent_id: p.agent_id.clone(),
        thread_id: p.thread_id.clone(),
        size_bytes: p.size_bytes,
        line_count: p.line_count,
        token_count: p.token_count,
        content_sha256: p.sha256.clone(),
        version: written.version,
        status,
        previous,
        created_at: written.created_at,
        updated_at: written.updated_at,
    }
}

/// Stores a new memory (`POST`): under its key (409 when the key exists) or a generated one.
pub async fn create(mut target: Target<'_>, p: &Prepared) -> ApiResult<StoredMemory> {
    if let Some(key) = &p.key {
        return match insert(&mut target, p, key).await? {
            Some(written) => Ok(stored(p, key.clone(), written, StoreStatus::Created, None)),
            None => Err(ApiError::conflict(format!(
                "memory key `{key}` already exists; PUT /api/memories/{key} replaces it"
            ))
            .with("memory_key", key.as_str())),
        };
    }
    // A generated key colliding is very unlikely; try a few before giving up.
    for _ in 0..4 {
        let key = generate_key(&p.memory_type);
        if let Some(written) = insert(&mut target, p, &key).await? {
            return Ok(stored(p, key, written, StoreStatus::Created, None));
        }
    }
    Err(ApiError::Internal(anyhow::anyhow!(
        "could not generate a free memory key"
    )))
}

/// The memory row a `PUT` finds under its key.
struct Existing {
    id: Uuid,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    content_metadata: Value,
    content_sha256: String,
    size_bytes: i64,
    version: i32,
    is_active: bool,
}

/// Stores under `key` idempotently (`PUT`): new key → created; same content and description →
/// unchanged (nothing written); same content, other fields → updated; other content → the new
/// version replaces the old one. A soft-deleted memory becomes active again unless unchanged.
pub async fn upsert(conn: &mut Scoped, key: &str, p: &Prepared) -> ApiResult<StoredMemory> {
    check_key("key", key)?;
    // Two rounds: a concurrent PUT may insert the key between our look-up and our insert.
    for _ in 0..2 {
        let existing = sqlx::query_as!(
            Existing,
            "SELECT id, summary, memory_type, agent_id, thread_id, content_metadata,
                    content_sha256, size_bytes, version, is_active
             FROM agent_memories
             WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND user_id = (SELECT current_setting('mnemo.user')) AND memory_key = $1
             FOR UPDATE",
            key
        )
        .fetch_optional(&mut *conn)
        .await?;
        let Some(old) = existing else {
            if let Some(written) = insert(&mut Target::Tx(conn), p, key).await? {
                return Ok(stored(
                    p,
                    key.to_owned(),
                    written,
                    StoreStatus::Created,
                    None,
                ));
            }
            continue;
        };
        let same_fields = old.summary == p.summary
            && old.memory_type == p.memory_type
            && old.agent_id == p.agent_id
            && old.thread_id == p.thread_id
            && old.content_metadata == p.metadata;
        if old.content_sha256 == p.sha256 {
            if same_fields && old.is_active {
                let written = sqlx::query_as!(
                    Written,
                    "SELECT version, created_at, updated_at FROM agent_memories
                     WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
                       AND user_id = (SELECT current_setting('mnemo.user')) AND id = $1",
                    old.id
                )
                .fetch_one(&mut *conn)
                .await?;
                return Ok(stored(
                    p,
                    key.to_owned(),
                    written,
                    StoreStatus::Unchanged,
                    None,
                ));
            }
            let written = sqlx::query_as!(
                Written,
                "UPDATE agent_memories
                 SET summary = $2, memory_type = $3, agent_id = $4, thread_id = $5,
                     content_metadata = $6, is_active = true, version = version + 1,
                     updated_at = now()
                 WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
                   AND user_id = (SELECT current_setting('mnemo.user')) AND id = $1
                 RETURNING version, created_at, updated_at",
                old.id,
                p.summary,
                p.memory_type,
                p.agent_id,
                p.thread_id,
                p.metadata
            )
            .fetch_one(&mut *conn)
            .await?;
            return Ok(stored(
                p,
                key.to_owned(),
                written,
                StoreStatus::Updated,
                None,
            ));
        }
        let written = replace(conn, old.id, p).await?;
        let previous = PreviousVersion {
            version: old.version,
            size_bytes: old.size_bytes,
            content_sha256: old.content_sha256,
        };
        return Ok(stored(
            p,
            key.to_owned(),
            written,
            StoreStatus::Replaced,
            Some(previous),
        ));
    }
    Err(ApiError::conflict(format!(
        "memory key `{key}` is being written concurrently; retry"
    )))
}

/// Swaps the content of memory `id` for `p`'s: old chunks out, row updated, new chunks in.
async fn replace(conn: &mut Scoped, id: Uuid, p: &Prepared) -> ApiResult<Written> {
    let queue = conn.queues_embeddings();
    sqlx::query!(
        "DELETE FROM agent_memory_chunks
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND memory_id = $1",
        id
    )
    .execute(&mut *conn)
    .await?;
    let columns = ChunkColumns::of(p);
    let written = sqlx::query_as!(
        Written,
        r#"WITH m AS (
             UPDATE agent_memories
             SET summary = $2, memory_type = $3, agent_id = $4, thread_id = $5,
                 content_metadata = $6, size_bytes = $7, line_count = $8, token_count = $9,
                 content_sha256 = $10, chunk_count = $11, is_active = true,
                 asks = $18, ends_asking = $19,
                 version = version + 1, updated_at = now()
             WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND user_id = (SELECT current_setting('mnemo.user')) AND id = $1
             RETURNING tenant_id, user_id, id, version, created_at, updated_at
         ), c AS (
             INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
                 line_start, line_end, content)
             SELECT m.tenant_id, m.user_id, m.id, u.byte_start, u.byte_len, u.line_start,
                 u.line_end, u.content
             FROM m, unnest($12::int8[], $13::int4[], $14::int8[], $15::int8[], $16::text[])
                 AS u(byte_start, byte_len, line_start, line_end, content)
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
             SELECT m.tenant_id, m.user_id, 'memory', m.id FROM m WHERE $17
         )
         SELECT version, created_at, updated_at FROM m"#,
        id,
        p.summary,
        p.memory_type,
        p.agent_id,
        p.thread_id,
        p.metadata,
        p.size_bytes,
        p.line_count,
        p.token_count,
        p.sha256,
        i32::try_from(p.chunks.len()).unwrap_or(i32::MAX),
        &columns.byte_starts,
        &columns.byte_lens,
        &columns.line_starts,
        &columns.line_ends,
        &columns.texts as &[&str],
        queue,
        columns.asks,
        columns.ends_asking
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::memories::chunks;
    #[test]
    fn generated_keys_are_valid_and_distinct() {
        let a = generate_key("command_output");
        let b = generate_key("text");
        assert!(a.starts_with("cmd_") && b.starts_with("mem_"));
        assert!(chunks::valid_key(&a) && chunks::valid_key(&b));
        assert_ne!(generate_key("x"), generate_key("x"));
    }
}

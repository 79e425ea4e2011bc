//! Detail memories in an account export: each memory's row as a record, its content as raw text,
//! and both written back as they were (same id, key, version, times) by an import.
//!
//! What can be derived from the content (chunks, line and token counts) is not carried: an import
//! measures the content again. The size and SHA-256 are carried and must match the content.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::chunks::{self, CHUNK_BYTES};
use super::store::{check_key, check_metadata, hex, short_text};
use super::tokens;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// One memory of an export, without its content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
#[serde(deny_unknown_fields)]
pub struct MemoryRecord {
    pub id: Uuid,
    pub key: String,
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    pub memory_type: String,
    pub summary: String,
    pub metadata: Value,
    pub version: i32,
    pub is_active: bool,
    pub size_bytes: i64,
    pub content_sha256: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The caller's memories after `after` in id order, at most `limit`.
pub async fn page(
    conn: &mut Scoped,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<MemoryRecord>, sqlx::Error> {
    sqlx::query_as!(
        MemoryRecord,
        "SELECT id, memory_key AS key, agent_id, thread_id, memory_type, summary,
                content_metadata AS metadata, version, is_active, size_bytes,
                content_sha256, created_at, updated_at
         FROM agent_memories
         WHERE tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')
           AND ($1::uuid IS NULL OR id > $1)
         ORDER BY id LIMIT $2",
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The whole content of memory `id` (its chunks in order).
pub async fn content(conn: &mut Scoped, id: Uuid) -> Result<String, sqlx::Error> {
    let pieces = sqlx::query_scalar!(
        "SELECT content FROM agent_memory_chunks
         WHERE tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')
           AND memory_id = $1
         ORDER BY byte_start",
        id
    )
    .fetch_all(conn)
    .await?;
    Ok(pieces.concat())
}

/// Checks a record and its content before anything is written: the fields a store accepts, a
/// content within `max_bytes` (413 past it), the size and SHA-256 the record names.
pub fn check(record: &MemoryRecord, content: &str, max_bytes: usize) -> ApiResult<()> {
    check_key("key", &record.key)?;
    short_text("memory_type", Some(record.memory_type.clone()), 64)?;
    short_text("agent_id", record.agent_id.clone(), 256)?;
    short_text("thread_id", record.thread_id.clone(), 256)?;
    if record.summary.is_empty() || record.summary.chars().count() > 4000 {
        return Err(ApiError::invalid(
            "summary",
            "`summary` must be 1 to 4000 characters",
        ));
    }
    match &record.metadata {
        Value::Object(map) => check_metadata("metadata", map)?,
        _ => {
            return Err(ApiError::invalid(
                "metadata",
                "`metadata` must be a JSON object",
            ));
        }
    }
    if record.version < 1 {
        return Err(ApiError::invalid("version", "`version` must be at least 1"));
    }
    if content.is_empty() {
        return Err(ApiError::invalid(
            "content",
            "the content must not be empty",
        ));
    }
    if content.len() > max_bytes {
        return Err(ApiError::too_large(format!(
            "the content is {} bytes; the limit is {max_bytes} bytes (MNEMO_MEMORY_MAX_BYTES)",
            content.len()
        ))
        .with("limit_bytes", max_bytes));
    }
    if i64::try_from(content.len()).ok() != Some(record.size_bytes) {
        return Err(ApiError::invalid(
            "size_bytes",
            format!(
                "`size_bytes` is {} but the content has {} bytes",
                record.size_bytes,
                content.len()
            ),
        ));
    }
    let sha = hex(&Sha256::digest(content.as_bytes()));
    if !sha.eq_ignore_ascii_case(&record.content_sha256) {
        return Err(ApiError::invalid(
            "content_sha256",
            "`content_sha256` does not match the content",
        ));
    }
    Ok(())
}

/// Writes a checked memory back with its id, key, version and times; its chunks are cut and
/// counted again (off the executor), and queued for the embedder when the transaction queues
/// embeddings.
pub async fn restore(
    conn: &mut Scoped,
    record: &MemoryRecord,
    content: String,
) -> Result<(), sqlx::Error> {
    let embed = conn.queues_embeddings();
    let (content, pieces, tokens) = tokio::task::spawn_blocking(move || {
        let pieces = chunks::split(&content, CHUNK_BYTES);
        let texts: Vec<&str> = pieces.iter().map(|c| c.text(&content)).collect();
        let tokens = tokens::count_pieces(&texts);
        (content, pieces, tokens)
    })
    .await
    .map_err(|e| sqlx::Error::Protocol(format!("measuring a memory failed: {e}")))?;
    let line_count = pieces.last().map_or(0, |c| c.line_end);
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let byte_starts: Vec<i64> = pieces.iter().map(|c| to_i64(c.byte_start as u64)).collect();
    let byte_lens: Vec<i32> = pieces
        .iter()
        .map(|c| i32::try_from(c.byte_len).unwrap_or(i32::MAX))
        .collect();
    let line_starts: Vec<i64> = pieces.iter().map(|c| to_i64(c.line_start)).collect();
    let line_ends: Vec<i64> = pieces.iter().map(|c| to_i64(c.line_end)).collect();
    let texts: Vec<&str> = pieces.iter().map(|c| c.text(&content)).collect();
    let (asks, ends_asking) = crate::search::asking::memory_asks(&texts);
    let metadata = match &record.metadata {
        Value::Object(_) => record.metadata.clone(),
        _ => Value::Object(Map::new()),
    };
    sqlx::query!(
        "WITH m AS (
             INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, thread_id,
                 memory_type, summary, content_metadata, size_bytes, line_count, token_count,
                 content_sha256, chunk_count, version, is_active, created_at, updated_at, asks,
                 ends_asking)
             VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3,
                 $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                 $23, $24)
             RETURNING tenant_id, user_id, id
         ), c AS (
             INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
                 line_start, line_end, content)
             SELECT m.tenant_id, m.user_id, m.id, u.byte_start, u.byte_len, u.line_start,
                 u.line_end, u.content
             FROM m, unnest($17::int8[], $18::int4[], $19::int8[], $20::int8[], $21::text[])
                 AS u(byte_start, byte_len, line_start, line_end, content)
         )
         INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
         SELECT m.tenant_id, m.user_id, 'memory', m.id FROM m WHERE $22",
        record.id,
        record.key,
        record.agent_id,
        record.thread_id,
        record.memory_type,
        record.summary,
        metadata,
        record.size_bytes,
        to_i64(line_count),
        to_i64(tokens),
        record.content_sha256.to_ascii_lowercase(),
        i32::try_from(pieces.len()).unwrap_or(i32::MAX),
        record.version,
        record.is_active,
        record.created_at,
        record.updated_at,
        &byte_starts,
        &byte_lens,
        &line_starts,
        &line_ends,
        &texts as &[&str],
        embed,
        asks,
        ends_asking
    )
    .execute(conn)
    .await?;
    Ok(())
}

//! Detail memory in PostgreSQL, as plain functions over a connection (no axum types), so the REST
//! handlers and the agent tools of other domains run the same code inside their own
//! [`crate::db::Scoped`] transaction. This module writes, lists and deletes; it re-exports the
//! readers ([`retrieve_memory`], [`grep_memory`]), [`search_memory`] and the capture flow, so every
//! agent tool is reachable here:
//!
//! - `store_memory`: [`store_memory`] (or [`prepare`] off the transaction, then [`create`] /
//!   [`upsert`]);
//! - `retrieve_memory`: [`retrieve_memory`] with a [`PageRequest`] (see [`page_request`]);
//! - `search_memory`: [`search_memory`];
//! - capture: [`capture_output`] (or [`prepare_capture`] then [`finish_capture`]).
//!
//! Every query names the scope (`tenant_id`/`user_id` = the transaction's settings) explicitly so
//! the planner can use the scope-leading indexes; row-level security enforces it regardless.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::chunks::{self, CHUNK_BYTES, Chunk};
use super::model::{ListQuery, MemoryInfo, MemoryList, PreviousVersion, StoreStatus, StoredMemory};
use super::placeholder::{self, SUMMARY_MAX_CHARS};
use super::tokens;
use crate::config::Config;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

pub use super::capture::{PreparedCapture, capture_output, finish_capture, prepare_capture};
pub use super::paging::Request as PageRequest;
pub use super::read::{
    DEFAULT_PAGE_LINES, MAX_PAGE_LINES, grep_memory, page_request, retrieve_memory,
};
pub use super::search::search_memory;

/// Limits every entry point applies; built from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest content, in bytes (`MNEMO_MEMORY_MAX_BYTES`).
    pub max_content_bytes: usize,
    /// Default byte page (`MNEMO_MEMORY_PAGE_BYTES`).
    pub page_bytes: u64,
    /// Largest page (`MNEMO_MEMORY_MAX_PAGE_BYTES`).
    pub max_page_bytes: u64,
    /// Default capture threshold in tokens (`MNEMO_MEMORY_CAPTURE_THRESHOLD_TOKENS`).
    pub capture_threshold_tokens: u64,
}

impl Limits {
    pub fn from_config(config: &Config) -> Self {
        Limits {
            max_content_bytes: config.memory_max_bytes,
            page_bytes: config.memories.page_bytes,
            max_page_bytes: config.memories.max_page_bytes,
            capture_threshold_tokens: config.memories.capture_threshold_tokens,
        }
    }
}

/// Largest metadata object, serialized.
const MAX_METADATA_BYTES: usize = 64 * 1024;
/// Longest caller description, in characters (the summary keeps at most 240).
const MAX_DESCRIPTION_CHARS: usize = 4000;

/// A memory to store.
#[derive(Debug, Clone, Default)]
pub struct NewMemory {
    pub content: String,
    /// Readable key; generated when `None`.
    pub key: Option<String>,
    /// Becomes the summary; `None`: a deterministic summary of the content.
    pub description: Option<String>,
    /// Default `text`.
    pub memory_type: Option<String>,
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    pub metadata: Map<String, Value>,
    /// The command that produced the content, for the deterministic summary.
    pub command: Option<String>,
}

/// A memory validated and measured (hash, lines, tokens, chunks, summary), ready to write.
/// Preparing is CPU work and happens before any transaction is opened.
#[derive(Debug, Clone)]
pub struct Prepared {
    content: String,
    key: Option<String>,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    metadata: Value,
    size_bytes: i64,
    line_count: i64,
    token_count: i64,
    sha256: String,
    chunks: Vec<Chunk>,
}

impl Prepared {
    pub fn token_count(&self) -> i64 {
        self.token_count
    }

    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    pub fn into_content(self) -> String {
        self.content
    }
}

fn too_large(size: usize, limit: usize) -> ApiError {
    ApiError::too_large(format!(
        "content is {size} bytes; the limit is {limit} bytes (MNEMO_MEMORY_MAX_BYTES)"
    ))
    .with("limit_bytes", limit)
}

/// A short free-text field: trimmed, 1 to `max` characters, no control characters.
pub(super) fn short_text(
    field: &str,
    value: Option<String>,
    max: usize,
) -> ApiResult<Option<String>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let value = value.trim().to_owned();
    if value.is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not be empty when given"),
        ));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` is longer than {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not contain control characters"),
        ));
    }
    Ok(Some(value))
}

/// Keys that name routes under `/api/memories/` (or that URL resolution removes from a path) and
/// so could never be read back.
const RESERVED_KEYS: &[&str] = &["search", "capture", ".", ".."];

pub(super) fn check_key(field: &str, key: &str) -> ApiResult<()> {
    if RESERVED_KEYS.contains(&key) {
        return Err(ApiError::invalid(
            field,
            format!("`{key}` is reserved (it names a route); choose another key"),
        ));
    }
    if chunks::valid_key(key) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "a memory key is 1 to 128 characters of A-Z, a-z, 0-9, `.`, `_`, `:` and `-`",
        ))
    }
}

pub(super) fn check_metadata(field: &str, metadata: &Map<String, Value>) -> ApiResult<()> {
    let size = serde_json::to_vec(metadata).map(|v| v.len()).unwrap_or(0);
    if size > MAX_METADATA_BYTES {
        return Err(ApiError::invalid(
            field,
            format!(
                "`{field}` is {size} bytes serialized; at most {MAX_METADATA_BYTES} are accepted"
            ),
        ));
    }
    Ok(())
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// Validates `new` and measures it off the async executor (hashing and tokenizing 32 MiB takes a
/// while). Empty content is 422, content over `limits.max_content_bytes` 413 naming the limit.
pub async fn prepare(new: NewMemory, limits: &Limits) -> ApiResult<Prepared> {
    if new.content.is_empty() {
        return Err(ApiError::invalid("content", "`content` must not be empty"));
    }
    if new.content.len() > limits.max_content_bytes {
        return Err(too_large(new.content.len(), limits.max_content_bytes));
    }
    if let Some(key) = &new.key {
        check_key("key", key)?;
    }
    let description = short_text("description", new.description, MAX_DESCRIPTION_CHARS)?;
    let memory_type =
        short_text("memory_type", new.memory_type, 64)?.unwrap_or_else(|| "text".into());
    let agent_id = short_text("agent_id", new.agent_id, 256)?;
    let thread_id = short_text("thread_id", new.thread_id, 256)?;
    check_metadata("metadata", &new.metadata)?;
    let content = new.content;
    let key = new.key;
    let command = new.command;
    let metadata = Value::Object(new.metadata);
    tokio::task::spawn_blocking(move || {
        let chunks = chunks::split(&content, CHUNK_BYTES);
        let pieces: Vec<&str> = chunks.iter().map(|c| c.text(&content)).collect();
        let token_count = tokens::count_pieces(&pieces);
        let line_count = chunks.last().map_or(0, |c| c.line_end);
        let size_bytes = content.len() as u64;
        let sha256 = hex(&Sha256::digest(content.as_bytes()));
        // A description that cleans down to nothing (only escape sequences) gets the
        // deterministic summary instead, so a placeholder always says something.
        let summary = description
            .map(|d| placeholder::clean(&d, SUMMARY_MAX_CHARS))
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| {
                placeholder::summarize(
                    command.as_deref(),
                    &placeholder::scan(&content),
                    size_bytes,
                    line_count,
                )
            });
        Prepared {
            content,
            key,
            summary,
            memory_type,
            agent_id,
            thread_id,
            metadata,
            size_bytes: i64::try_from(size_bytes).unwrap_or(i64::MAX),
            line_count: i64::try_from(line_count).unwrap_or(i64::MAX),
            token_count: i64::try_from(token_count).unwrap_or(i64::MAX),
            sha256,
            chunks,
        }
    })
    .await
    .map_err(|err| ApiError::Internal(anyhow::anyhow!("preparing a memory failed: {err}")))
}

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
        columns
    }
}

/// Inserts the memory row and all its chunks in one statement. `None` when the key exists.
async fn insert(conn: &mut Scoped, p: &Prepared, key: &str) -> ApiResult<Option<Written>> {
    // The chunks are queued for embedding in the same statement that writes them.
    let queue = conn.queues_embeddings();
    let columns = ChunkColumns::of(p);
    let written = sqlx::query_as!(
        Written,
        r#"WITH m AS (
             INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, thread_id,
                 memory_type, summary, content_metadata, size_bytes, line_count, token_count,
                 content_sha256, chunk_count)
             VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3,
                 $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (tenant_id, user_id, memory_key) DO NOTHING
             RETURNING tenant_id, user_id, id, version, created_at, updated_at
         ), c AS (
             INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
                 line_start, line_end, content)
             SELECT m.tenant_id, m.user_id, m.id, u.byte_start, u.byte_len, u.line_start,
                 u.line_end, u.content
             FROM m, unnest($13::int8[], $14::int4[], $15::int8[], $16::int8[], $17::text[])
                 AS u(byte_start, byte_len, line_start, line_end, content)
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
             SELECT m.tenant_id, m.user_id, 'memory', m.id FROM m WHERE $18
         )
         SELECT version, created_at, updated_at FROM m"#,
        Uuid::now_v7(),
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
        i32::try_from(p.chunks.len()).unwrap_or(i32::MAX),
        &columns.byte_starts,
        &columns.byte_lens,
        &columns.line_starts,
        &columns.line_ends,
        &columns.texts as &[&str],
        queue
    )
    .fetch_optional(&mut *conn)
    .await?;
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
pub async fn create(conn: &mut Scoped, p: &Prepared) -> ApiResult<StoredMemory> {
    if let Some(key) = &p.key {
        return match insert(conn, p, key).await? {
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
        if let Some(written) = insert(conn, p, &key).await? {
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
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_key = $1
             FOR UPDATE",
            key
        )
        .fetch_optional(&mut *conn)
        .await?;
        let Some(old) = existing else {
            if let Some(written) = insert(conn, p, key).await? {
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
                     WHERE tenant_id = current_setting('mnemo.tenant')
                       AND user_id = current_setting('mnemo.user') AND id = $1",
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
                 WHERE tenant_id = current_setting('mnemo.tenant')
                   AND user_id = current_setting('mnemo.user') AND id = $1
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
                 version = version + 1, updated_at = now()
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND id = $1
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
        queue
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(written)
}

/// Agent tool `store_memory`: prepares and stores `new` in the caller's transaction. With a key it
/// behaves like `PUT` (idempotent), without one like `POST` (generated key).
pub async fn store_memory(
    conn: &mut Scoped,
    new: NewMemory,
    limits: &Limits,
) -> ApiResult<StoredMemory> {
    let prepared = prepare(new, limits).await?;
    match prepared.key.clone() {
        Some(key) => upsert(conn, &key, &prepared).await,
        None => create(conn, &prepared).await,
    }
}

pub(super) fn not_found(key: &str) -> ApiError {
    ApiError::not_found(format!("no memory with key `{key}`"))
}

pub(super) fn inactive(key: &str) -> ApiError {
    ApiError::not_found(format!(
        "memory `{key}` was deleted (inactive); pass include_inactive=true to read it"
    ))
    .with("is_active", false)
}

/// A memory row without its content, as a list shows it.
#[derive(sqlx::FromRow)]
struct InfoRow {
    id: Uuid,
    memory_key: String,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    content_metadata: Value,
    size_bytes: i64,
    line_count: i64,
    token_count: i64,
    content_sha256: String,
    version: i32,
    is_active: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<InfoRow> for MemoryInfo {
    fn from(r: InfoRow) -> Self {
        MemoryInfo {
            placeholder: placeholder::placeholder(&r.memory_key, &r.summary),
            memory_key: r.memory_key,
            summary: r.summary,
            memory_type: r.memory_type,
            agent_id: r.agent_id,
            thread_id: r.thread_id,
            metadata: r.content_metadata,
            size_bytes: r.size_bytes,
            line_count: r.line_count,
            token_count: r.token_count,
            content_sha256: r.content_sha256,
            version: r.version,
            is_active: r.is_active,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn metadata_filter(field: &str, raw: Option<&str>) -> ApiResult<Option<Value>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => Ok(Some(value)),
        _ => Err(ApiError::invalid(
            field,
            format!("`{field}` must be a JSON object, such as {{\"exit_code\":1}}"),
        )),
    }
}

/// `GET /api/memories`: newest first, without content, filtered, cursor-paginated.
pub async fn list_memories(conn: &mut Scoped, query: &ListQuery) -> ApiResult<MemoryList> {
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > 200 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 200"));
    }
    let cursor = crate::pagination::position::<Uuid>(query.cursor.as_deref())?;
    let metadata = metadata_filter("metadata", query.metadata.as_deref())?;
    let rows = sqlx::query_as!(
        InfoRow,
        "SELECT id, memory_key, summary, memory_type, agent_id, thread_id, content_metadata,
                size_bytes, line_count, token_count, content_sha256, version, is_active,
                created_at, updated_at
         FROM agent_memories
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user')
           AND ($1 OR is_active)
           AND ($2::text IS NULL OR agent_id = $2)
           AND ($3::text IS NULL OR thread_id = $3)
           AND ($4::text IS NULL OR memory_type = $4)
           AND ($5::timestamptz IS NULL OR created_at >= $5)
           AND ($6::timestamptz IS NULL OR created_at < $6)
           AND ($7::jsonb IS NULL OR content_metadata @> $7)
           AND ($8::uuid IS NULL OR id < $8)
         ORDER BY id DESC
         LIMIT $9",
        query.include_inactive.unwrap_or(false),
        query.agent_id.as_deref(),
        query.thread_id.as_deref(),
        query.memory_type.as_deref(),
        query.created_after,
        query.created_before,
        metadata,
        cursor,
        i64::from(limit) + 1
    )
    .fetch_all(&mut *conn)
    .await?;
    let (rows, more) = crate::pagination::split(rows, i64::from(limit));
    let next_cursor = crate::pagination::next(more, rows.last().map(|r| r.id));
    Ok(MemoryList {
        items: rows.into_iter().map(MemoryInfo::from).collect(),
        next_cursor,
    })
}

/// `DELETE /api/memories/{key}`: soft (inactive, hidden from list and search) or hard (the row and
/// its chunks removed). 404 when there is no such key.
pub async fn delete_memory(conn: &mut Scoped, key: &str, hard: bool) -> ApiResult<()> {
    let done = if hard {
        sqlx::query!(
            "DELETE FROM agent_memories
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_key = $1",
            key
        )
        .execute(&mut *conn)
        .await?
    } else {
        sqlx::query!(
            "UPDATE agent_memories SET is_active = false, updated_at = now()
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_key = $1",
            key
        )
        .execute(&mut *conn)
        .await?
    };
    if done.rows_affected() == 0 {
        return Err(not_found(key));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_valid_and_distinct() {
        let a = generate_key("command_output");
        let b = generate_key("text");
        assert!(a.starts_with("cmd_") && b.starts_with("mem_"));
        assert!(chunks::valid_key(&a) && chunks::valid_key(&b));
        assert_ne!(generate_key("x"), generate_key("x"));
    }
}

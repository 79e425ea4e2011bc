//! Detail memory in PostgreSQL, as plain functions over a connection (no axum types), so the REST
//! handlers and the agent tools of other domains (`store_memory`, `retrieve_memory`,
//! `search_memory`) run the same code inside their own [`crate::db::Scoped`] transaction.
//!
//! Every query names the scope (`tenant_id`/`user_id` = the transaction's settings) explicitly so
//! the planner can use the scope-leading indexes; row-level security enforces it regardless.

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use uuid::Uuid;

use super::chunks::{self, CHUNK_BYTES, Chunk};
use super::grep::{self, Grep, Lines};
use super::model::{
    CaptureInput, CaptureResult, ContentTotals, GrepLine, GrepMatch, GrepQuery, GrepResult,
    ListQuery, MemoryInfo, MemoryList, MemoryPage, NextPage, PageQuery, PageRange, PreviousVersion,
    SearchFilters, SearchHit, SearchRequest, SearchResults, StoreStatus, StoredMemory,
};
use super::paging::{self, Request, Totals, Window};
use super::placeholder::{self, SUMMARY_MAX_CHARS};
use super::tokens;
use crate::config::Config;
use crate::error::{ApiError, ApiResult};

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

/// Default number of lines of a line page without `line_count`.
pub const DEFAULT_PAGE_LINES: u64 = 100;
/// Largest `line_count` of a line page.
pub const MAX_PAGE_LINES: u64 = 100_000;
/// Offsets and line numbers above this are refused as absurd (and keep SQL arithmetic in range).
const MAX_POSITION: u64 = 1 << 50;
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
fn short_text(field: &str, value: Option<String>, max: usize) -> ApiResult<Option<String>> {
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

/// Keys that name routes under `/api/memories/` and so could never be read back.
const RESERVED_KEYS: &[&str] = &["search", "capture"];

fn check_key(field: &str, key: &str) -> ApiResult<()> {
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

fn check_metadata(field: &str, metadata: &Map<String, Value>) -> ApiResult<()> {
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

fn hex(bytes: &[u8]) -> String {
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

#[derive(sqlx::FromRow)]
struct Written {
    version: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// Inserts the memory row and all its chunks in one statement. `None` when the key exists.
async fn insert(conn: &mut PgConnection, p: &Prepared, key: &str) -> ApiResult<Option<Written>> {
    let mut byte_starts = Vec::with_capacity(p.chunks.len());
    let mut byte_lens = Vec::with_capacity(p.chunks.len());
    let mut line_starts = Vec::with_capacity(p.chunks.len());
    let mut line_ends = Vec::with_capacity(p.chunks.len());
    let mut texts = Vec::with_capacity(p.chunks.len());
    for chunk in &p.chunks {
        byte_starts.push(chunk.byte_start as i64);
        byte_lens.push(i32::try_from(chunk.byte_len).unwrap_or(i32::MAX));
        line_starts.push(chunk.line_start as i64);
        line_ends.push(chunk.line_end as i64);
        texts.push(chunk.text(&p.content));
    }
    let written = sqlx::query_as::<_, Written>(
        "WITH m AS (
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
         )
         SELECT version, created_at, updated_at FROM m",
    )
    .bind(Uuid::now_v7())
    .bind(key)
    .bind(&p.agent_id)
    .bind(&p.thread_id)
    .bind(&p.memory_type)
    .bind(&p.summary)
    .bind(&p.metadata)
    .bind(p.size_bytes)
    .bind(p.line_count)
    .bind(p.token_count)
    .bind(&p.sha256)
    .bind(i32::try_from(p.chunks.len()).unwrap_or(i32::MAX))
    .bind(&byte_starts)
    .bind(&byte_lens)
    .bind(&line_starts)
    .bind(&line_ends)
    .bind(&texts)
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
pub async fn create(conn: &mut PgConnection, p: &Prepared) -> ApiResult<StoredMemory> {
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

#[derive(sqlx::FromRow)]
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
pub async fn upsert(conn: &mut PgConnection, key: &str, p: &Prepared) -> ApiResult<StoredMemory> {
    check_key("key", key)?;
    // Two rounds: a concurrent PUT may insert the key between our look-up and our insert.
    for _ in 0..2 {
        let existing = sqlx::query_as::<_, Existing>(
            "SELECT id, summary, memory_type, agent_id, thread_id, content_metadata,
                    content_sha256, size_bytes, version, is_active
             FROM agent_memories
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_key = $1
             FOR UPDATE",
        )
        .bind(key)
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
                let written = sqlx::query_as::<_, Written>(
                    "SELECT version, created_at, updated_at FROM agent_memories
                     WHERE tenant_id = current_setting('mnemo.tenant')
                       AND user_id = current_setting('mnemo.user') AND id = $1",
                )
                .bind(old.id)
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
            let written = sqlx::query_as::<_, Written>(
                "UPDATE agent_memories
                 SET summary = $2, memory_type = $3, agent_id = $4, thread_id = $5,
                     content_metadata = $6, is_active = true, version = version + 1,
                     updated_at = now()
                 WHERE tenant_id = current_setting('mnemo.tenant')
                   AND user_id = current_setting('mnemo.user') AND id = $1
                 RETURNING version, created_at, updated_at",
            )
            .bind(old.id)
            .bind(&p.summary)
            .bind(&p.memory_type)
            .bind(&p.agent_id)
            .bind(&p.thread_id)
            .bind(&p.metadata)
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
async fn replace(conn: &mut PgConnection, id: Uuid, p: &Prepared) -> ApiResult<Written> {
    sqlx::query(
        "DELETE FROM agent_memory_chunks
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND memory_id = $1",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?;
    let mut byte_starts = Vec::with_capacity(p.chunks.len());
    let mut byte_lens = Vec::with_capacity(p.chunks.len());
    let mut line_starts = Vec::with_capacity(p.chunks.len());
    let mut line_ends = Vec::with_capacity(p.chunks.len());
    let mut texts = Vec::with_capacity(p.chunks.len());
    for chunk in &p.chunks {
        byte_starts.push(chunk.byte_start as i64);
        byte_lens.push(i32::try_from(chunk.byte_len).unwrap_or(i32::MAX));
        line_starts.push(chunk.line_start as i64);
        line_ends.push(chunk.line_end as i64);
        texts.push(chunk.text(&p.content));
    }
    let written = sqlx::query_as::<_, Written>(
        "WITH m AS (
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
         )
         SELECT version, created_at, updated_at FROM m",
    )
    .bind(id)
    .bind(&p.summary)
    .bind(&p.memory_type)
    .bind(&p.agent_id)
    .bind(&p.thread_id)
    .bind(&p.metadata)
    .bind(p.size_bytes)
    .bind(p.line_count)
    .bind(p.token_count)
    .bind(&p.sha256)
    .bind(i32::try_from(p.chunks.len()).unwrap_or(i32::MAX))
    .bind(&byte_starts)
    .bind(&byte_lens)
    .bind(&line_starts)
    .bind(&line_ends)
    .bind(&texts)
    .fetch_one(&mut *conn)
    .await?;
    Ok(written)
}

/// Agent tool `store_memory`: prepares and stores `new` in the caller's transaction. With a key it
/// behaves like `PUT` (idempotent), without one like `POST` (generated key).
pub async fn store_memory(
    conn: &mut PgConnection,
    new: NewMemory,
    limits: &Limits,
) -> ApiResult<StoredMemory> {
    let prepared = prepare(new, limits).await?;
    match prepared.key.clone() {
        Some(key) => upsert(conn, &key, &prepared).await,
        None => create(conn, &prepared).await,
    }
}

fn not_found(key: &str) -> ApiError {
    ApiError::not_found(format!("no memory with key `{key}`"))
}

fn inactive(key: &str) -> ApiError {
    ApiError::not_found(format!(
        "memory `{key}` was deleted (inactive); pass include_inactive=true to read it"
    ))
    .with("is_active", false)
}

/// Turns page parameters into a page request, refusing mixed, zero, negative or absurd values.
pub fn page_request(query: &PageQuery, limits: &Limits) -> ApiResult<Request> {
    let bytes = query.offset.is_some() || query.limit.is_some();
    let lines = query.line_start.is_some() || query.line_count.is_some();
    if bytes && lines {
        let field = if query.line_start.is_some() {
            "line_start"
        } else {
            "line_count"
        };
        return Err(ApiError::invalid(
            field,
            "page either by bytes (`offset`, `limit`) or by lines (`line_start`, `line_count`), not both",
        ));
    }
    if lines {
        let start = query.line_start.unwrap_or(1);
        let count = query.line_count.unwrap_or(DEFAULT_PAGE_LINES);
        if start == 0 || start > MAX_POSITION {
            return Err(ApiError::invalid(
                "line_start",
                format!("`line_start` is 1-based and at most {MAX_POSITION}"),
            ));
        }
        if count == 0 || count > MAX_PAGE_LINES {
            return Err(ApiError::invalid(
                "line_count",
                format!("`line_count` must be 1 to {MAX_PAGE_LINES}"),
            ));
        }
        return Ok(Request::Lines { start, count });
    }
    let offset = query.offset.unwrap_or(0);
    let limit = query.limit.unwrap_or(limits.page_bytes);
    if offset > MAX_POSITION {
        return Err(ApiError::invalid(
            "offset",
            format!("`offset` must be at most {MAX_POSITION}"),
        ));
    }
    if limit == 0 || limit > limits.max_page_bytes {
        return Err(ApiError::invalid(
            "limit",
            format!("`limit` must be 1 to {} bytes", limits.max_page_bytes),
        ));
    }
    Ok(Request::Bytes { offset, limit })
}

#[derive(sqlx::FromRow)]
struct PageRow {
    summary: String,
    is_active: bool,
    size_bytes: i64,
    line_count: i64,
    token_count: i64,
    chunk_byte_start: Option<i64>,
    chunk_line_start: Option<i64>,
    chunk_content: Option<String>,
}

fn next_page(request: Option<Request>) -> Option<NextPage> {
    request.map(|r| match r {
        Request::Bytes { offset, limit } => NextPage {
            offset: Some(offset),
            limit: Some(limit),
            line_start: None,
            line_count: None,
        },
        Request::Lines { start, count } => NextPage {
            offset: None,
            limit: None,
            line_start: Some(start),
            line_count: Some(count),
        },
    })
}

/// Agent tool `retrieve_memory`: one page of memory `key`, reading only the chunks the page
/// overlaps (one statement). A range past the end is an empty slice with the totals.
pub async fn retrieve_memory(
    conn: &mut PgConnection,
    key: &str,
    request: Request,
    include_inactive: bool,
    limits: &Limits,
) -> ApiResult<MemoryPage> {
    const SELECT: &str = "SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
               c.byte_start AS chunk_byte_start, c.line_start AS chunk_line_start,
               c.content AS chunk_content
        FROM agent_memories m";
    const WHERE: &str = "WHERE m.tenant_id = current_setting('mnemo.tenant')
          AND m.user_id = current_setting('mnemo.user') AND m.memory_key = $1
        ORDER BY c.byte_start";
    let rows = match request {
        Request::Bytes { offset, limit } => {
            // A chunk overlapping [offset, offset+limit) starts after offset - CHUNK_BYTES: that
            // bound keeps the scan to the few index entries around the page.
            let sql = format!(
                "{SELECT}
                 LEFT JOIN LATERAL (
                     SELECT byte_start, line_start, content FROM agent_memory_chunks c
                     WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
                       AND c.memory_id = m.id AND (m.is_active OR $4)
                       AND c.byte_start > $2 - {CHUNK_BYTES} AND c.byte_start < $2 + $3
                       AND c.byte_start + c.byte_len > $2
                 ) c ON true
                 {WHERE}"
            );
            sqlx::query_as::<_, PageRow>(&sql)
                .bind(key)
                .bind(offset as i64)
                .bind(limit as i64)
                .bind(include_inactive)
                .fetch_all(&mut *conn)
                .await?
        }
        Request::Lines { start, count } => {
            // `f`: the first chunk holding line `start`; then the chunks from there up to the
            // page's last line or the byte cap past that chunk, whichever comes first.
            let sql = format!(
                "{SELECT}
                 LEFT JOIN LATERAL (
                     SELECT byte_start AS first FROM agent_memory_chunks f
                     WHERE f.tenant_id = m.tenant_id AND f.user_id = m.user_id
                       AND f.memory_id = m.id AND f.line_end >= $2
                     ORDER BY f.line_end, f.byte_start LIMIT 1
                 ) f ON true
                 LEFT JOIN LATERAL (
                     SELECT byte_start, line_start, content FROM agent_memory_chunks c
                     WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
                       AND c.memory_id = m.id AND (m.is_active OR $4)
                       AND c.byte_start >= f.first AND c.byte_start < f.first + $5
                       AND c.line_end >= $2 AND c.line_start <= $2 + $3 - 1
                 ) c ON true
                 {WHERE}"
            );
            sqlx::query_as::<_, PageRow>(&sql)
                .bind(key)
                .bind(start as i64)
                .bind(count as i64)
                .bind(include_inactive)
                .bind((limits.max_page_bytes + CHUNK_BYTES as u64) as i64)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let Some(first) = rows.first() else {
        return Err(not_found(key));
    };
    if !first.is_active && !include_inactive {
        return Err(inactive(key));
    }
    let totals = Totals {
        size_bytes: first.size_bytes as u64,
        line_count: first.line_count as u64,
    };
    let window_start = first.chunk_byte_start.unwrap_or(0) as u64;
    let window_line = first.chunk_line_start.unwrap_or(1) as u64;
    let text: String = rows
        .iter()
        .filter_map(|r| r.chunk_content.as_deref())
        .collect();
    let window = Window {
        text: &text,
        byte_start: window_start,
        line_start: window_line,
    };
    let (page, unit) = match request {
        Request::Bytes { offset, limit } => {
            (paging::bytes(&window, totals, offset, limit), "bytes")
        }
        Request::Lines { start, count } => (
            paging::lines(
                &window,
                totals,
                start,
                count,
                limits.max_page_bytes,
                limits.page_bytes,
            ),
            "lines",
        ),
    };
    Ok(MemoryPage {
        memory_key: key.to_owned(),
        placeholder: placeholder::placeholder(key, &first.summary),
        summary: first.summary.clone(),
        is_active: first.is_active,
        content: page.text.to_owned(),
        range: PageRange {
            unit: unit.into(),
            offset: page.byte_start,
            end: page.byte_end,
            length: page.byte_end - page.byte_start,
            line_start: page.lines.map(|l| l.0),
            line_end: page.lines.map(|l| l.1),
        },
        totals: ContentTotals {
            size_bytes: first.size_bytes,
            line_count: first.line_count,
            token_count: first.token_count,
        },
        next: next_page(page.next),
        capped: page.capped,
        line_split: page.line_split,
    })
}

#[derive(sqlx::FromRow)]
struct Head {
    id: Uuid,
    summary: String,
    is_active: bool,
    line_count: i64,
}

/// `GET /api/memories/{key}/grep`: streams the chunks in order through the matcher, so memory use
/// stays at one chunk plus the answer whatever the content size.
pub async fn grep_memory(
    conn: &mut PgConnection,
    key: &str,
    query: &GrepQuery,
) -> ApiResult<GrepResult> {
    let pattern = query
        .pattern
        .as_deref()
        .ok_or_else(|| ApiError::invalid("pattern", "`pattern` is required"))?;
    let regex = grep::compile(pattern, query.ignore_case.unwrap_or(false))
        .map_err(|detail| ApiError::invalid("pattern", detail))?;
    let context = query.context.unwrap_or(2);
    if context > 20 {
        return Err(ApiError::invalid("context", "`context` must be 0 to 20"));
    }
    let max_matches = query.max_matches.unwrap_or(50);
    if max_matches == 0 || max_matches > 1000 {
        return Err(ApiError::invalid(
            "max_matches",
            "`max_matches` must be 1 to 1000",
        ));
    }
    let head = sqlx::query_as::<_, Head>(
        "SELECT id, summary, is_active, line_count FROM agent_memories
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND memory_key = $1",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| not_found(key))?;
    if !head.is_active && !query.include_inactive.unwrap_or(false) {
        return Err(inactive(key));
    }
    let mut matcher = Grep::new(&regex, context as usize, max_matches as usize);
    let mut lines = Lines::default();
    {
        let mut stream = sqlx::query_scalar::<_, String>(
            "SELECT content FROM agent_memory_chunks
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_id = $1
             ORDER BY byte_start",
        )
        .bind(head.id)
        .fetch(&mut *conn);
        while let Some(piece) = stream.try_next().await? {
            lines.push(&piece, |n, l| matcher.line(n, l));
        }
    }
    lines.finish(|n, l| matcher.line(n, l));
    let outcome = matcher.finish();
    let line = |l: grep::Line| GrepLine {
        line_number: l.number,
        line: l.text,
        truncated: l.truncated,
    };
    Ok(GrepResult {
        placeholder: placeholder::placeholder(key, &head.summary),
        memory_key: key.to_owned(),
        pattern: pattern.to_owned(),
        matches: outcome
            .matches
            .into_iter()
            .map(|m| GrepMatch {
                line_number: m.line.number,
                line: m.line.text,
                truncated: m.line.truncated,
                before: m.before.into_iter().map(line).collect(),
                after: m.after.into_iter().map(line).collect(),
            })
            .collect(),
        total_matches: outcome.total_matches,
        truncated: outcome.truncated,
        line_count: head.line_count,
    })
}

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

fn encode_cursor(id: Uuid) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

fn decode_cursor(cursor: &str) -> ApiResult<Uuid> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| Uuid::from_slice(&bytes).ok())
        .ok_or_else(|| ApiError::invalid("cursor", "`cursor` is not a cursor this API handed out"))
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
pub async fn list_memories(conn: &mut PgConnection, query: &ListQuery) -> ApiResult<MemoryList> {
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > 200 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 200"));
    }
    let cursor = query.cursor.as_deref().map(decode_cursor).transpose()?;
    let metadata = metadata_filter("metadata", query.metadata.as_deref())?;
    let mut rows = sqlx::query_as::<_, InfoRow>(
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
    )
    .bind(query.include_inactive.unwrap_or(false))
    .bind(&query.agent_id)
    .bind(&query.thread_id)
    .bind(&query.memory_type)
    .bind(query.created_after)
    .bind(query.created_before)
    .bind(metadata)
    .bind(cursor)
    .bind(i64::from(limit) + 1)
    .fetch_all(&mut *conn)
    .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = if more {
        rows.last().map(|r| encode_cursor(r.id))
    } else {
        None
    };
    Ok(MemoryList {
        items: rows.into_iter().map(MemoryInfo::from).collect(),
        next_cursor,
    })
}

#[derive(sqlx::FromRow)]
struct HitRow {
    memory_key: String,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    matched: String,
    score: f32,
    byte_start: Option<i64>,
    byte_len: Option<i32>,
    line_start: Option<i64>,
    line_end: Option<i64>,
    snippet: String,
    chunk: Option<String>,
}

/// Highlight markers of snippets.
const START_SEL: &str = "**";
const STOP_SEL: &str = "**";

/// Words `ts_headline` highlighted in `snippet`.
fn highlighted(snippet: &str) -> Vec<&str> {
    snippet
        .split(START_SEL)
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty())
        .collect()
}

/// Line number of the first line of `chunk` (starting at `line_start`) holding one of `words`.
fn first_line_with(chunk: &str, line_start: i64, words: &[&str]) -> Option<i64> {
    if words.is_empty() {
        return None;
    }
    let lowered: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    chunk
        .split('\n')
        .position(|line| {
            let line = line.to_lowercase();
            lowered.iter().any(|w| line.contains(w.as_str()))
        })
        .map(|i| line_start + i as i64)
}

/// Agent tool `search_memory`: full-text search (`websearch_to_tsquery`, English; slashes read as
/// spaces so path and URL segments are words) over summaries
/// and content chunks, best first. A content hit names the chunk's line and byte range and the
/// first line in it holding a matched word.
pub async fn search_memory(
    conn: &mut PgConnection,
    request: &SearchRequest,
) -> ApiResult<SearchResults> {
    let query = request.query.trim();
    if query.is_empty() {
        return Err(ApiError::invalid("query", "`query` must not be empty"));
    }
    if query.chars().count() > 1000 {
        return Err(ApiError::invalid(
            "query",
            "`query` is longer than 1000 characters",
        ));
    }
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 100"));
    }
    let default_filters = SearchFilters::default();
    let filters = request.filters.as_ref().unwrap_or(&default_filters);
    if let Some(metadata) = &filters.metadata {
        check_metadata("filters.metadata", metadata)?;
    }
    let metadata = filters.metadata.clone().map(Value::Object);
    let options = format!(
        "StartSel=\"{START_SEL}\", StopSel=\"{STOP_SEL}\", MaxWords=35, MinWords=12, \
         MaxFragments=2, FragmentDelimiter=\" … \""
    );
    let mut rows = sqlx::query_as::<_, HitRow>(
        "WITH mem AS (
             SELECT id, memory_key, summary, summary_tsv, memory_type, agent_id, thread_id
             FROM agent_memories
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user')
               AND ($2 OR is_active)
               AND ($3::text IS NULL OR agent_id = $3)
               AND ($4::text IS NULL OR thread_id = $4)
               AND ($5::text IS NULL OR memory_type = $5)
               AND ($6::timestamptz IS NULL OR created_at >= $6)
               AND ($7::timestamptz IS NULL OR created_at < $7)
               AND ($8::jsonb IS NULL OR content_metadata @> $8)
         ), hits AS (
             SELECT c.memory_id, 'content' AS matched, c.byte_start, c.byte_len,
                    ts_rank_cd(c.tsv, mnemo_memory_query($1)) AS score
             FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.tsv @@ mnemo_memory_query($1)
               AND c.memory_id IN (SELECT id FROM mem)
             UNION ALL
             SELECT mem.id, 'summary', NULL, NULL,
                    ts_rank_cd(mem.summary_tsv, mnemo_memory_query($1))
             FROM mem
             WHERE mem.summary_tsv @@ mnemo_memory_query($1)
         ), top AS (
             SELECT * FROM hits ORDER BY score DESC, memory_id DESC, byte_start NULLS FIRST
             LIMIT $9
         )
         SELECT mem.memory_key, mem.summary, mem.memory_type, mem.agent_id, mem.thread_id,
                top.matched, top.score, top.byte_start, top.byte_len,
                c.line_start, c.line_end, c.content AS chunk,
                CASE WHEN top.matched = 'content'
                     THEN ts_headline('english', mnemo_memory_search_text(c.content),
                                      mnemo_memory_query($1), $10)
                     ELSE ts_headline('english', mnemo_memory_search_text(mem.summary),
                                      mnemo_memory_query($1), $10)
                END AS snippet
         FROM top
         JOIN mem ON mem.id = top.memory_id
         LEFT JOIN agent_memory_chunks c
                ON c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.memory_id = top.memory_id AND c.byte_start = top.byte_start
         ORDER BY top.score DESC, top.memory_id DESC, top.byte_start NULLS FIRST",
    )
    .bind(query)
    .bind(filters.include_inactive)
    .bind(&filters.agent_id)
    .bind(&filters.thread_id)
    .bind(&filters.memory_type)
    .bind(filters.created_after)
    .bind(filters.created_before)
    .bind(metadata)
    .bind(i64::from(limit) + 1)
    .bind(&options)
    .fetch_all(&mut *conn)
    .await?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let hits = rows
        .into_iter()
        .map(|r| {
            let match_line = match (&r.chunk, r.line_start) {
                (Some(chunk), Some(line_start)) => {
                    first_line_with(chunk, line_start, &highlighted(&r.snippet))
                }
                _ => None,
            };
            let retrieve = match (r.line_start, r.line_end) {
                (Some(start), Some(end)) => Some(NextPage {
                    offset: None,
                    limit: None,
                    line_start: Some(start as u64),
                    line_count: Some((end - start + 1) as u64),
                }),
                _ => None,
            };
            SearchHit {
                placeholder: placeholder::placeholder(&r.memory_key, &r.summary),
                memory_key: r.memory_key,
                summary: r.summary,
                memory_type: r.memory_type,
                agent_id: r.agent_id,
                thread_id: r.thread_id,
                matched: r.matched,
                snippet: r.snippet,
                score: r.score,
                line_start: r.line_start,
                line_end: r.line_end,
                byte_start: r.byte_start,
                byte_end: r.byte_start.zip(r.byte_len).map(|(s, l)| s + i64::from(l)),
                match_line,
                retrieve,
            }
        })
        .collect();
    Ok(SearchResults { hits, has_more })
}

/// `DELETE /api/memories/{key}`: soft (inactive, hidden from list and search) or hard (the row and
/// its chunks removed). 404 when there is no such key.
pub async fn delete_memory(conn: &mut PgConnection, key: &str, hard: bool) -> ApiResult<()> {
    let sql = if hard {
        "DELETE FROM agent_memories
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND memory_key = $1"
    } else {
        "UPDATE agent_memories SET is_active = false, updated_at = now()
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND memory_key = $1"
    };
    let done = sqlx::query(sql).bind(key).execute(&mut *conn).await?;
    if done.rows_affected() == 0 {
        return Err(not_found(key));
    }
    Ok(())
}

/// A capture measured and decided: inline (under the threshold) or to be stored.
#[derive(Debug)]
pub struct PreparedCapture {
    prepared: Prepared,
    threshold: u64,
    command: Option<String>,
    exit_code: Option<i64>,
}

impl PreparedCapture {
    /// Whether the output is over the threshold and must be stored.
    pub fn needs_store(&self) -> bool {
        self.prepared.token_count as u64 > self.threshold
    }
}

/// First half of a capture: validates and measures the output (no database).
pub async fn prepare_capture(input: CaptureInput, limits: &Limits) -> ApiResult<PreparedCapture> {
    let threshold = input
        .threshold_tokens
        .unwrap_or(limits.capture_threshold_tokens);
    if threshold == 0 || threshold > 10_000_000 {
        return Err(ApiError::invalid(
            "threshold_tokens",
            "`threshold_tokens` must be 1 to 10000000",
        ));
    }
    let command = short_text("command", input.command, 4000)?;
    let mut metadata = input.metadata.unwrap_or_default();
    if let Some(command) = &command {
        metadata.insert("command".into(), Value::String(command.clone()));
    }
    if let Some(code) = input.exit_code {
        metadata.insert("exit_code".into(), Value::from(code));
    }
    if let Some(ms) = input.duration_ms {
        metadata.insert("duration_ms".into(), Value::from(ms));
    }
    let new = NewMemory {
        content: input.content,
        key: input.key,
        description: None,
        memory_type: Some(input.memory_type.unwrap_or_else(|| "command_output".into())),
        agent_id: input.agent_id,
        thread_id: input.thread_id,
        metadata,
        command: command.clone(),
    };
    Ok(PreparedCapture {
        prepared: prepare(new, limits).await?,
        threshold,
        command,
        exit_code: input.exit_code,
    })
}

/// Second half of a capture: under the threshold the content comes back inline and nothing is
/// written (`conn` may then be `None`); over it the output is stored and the context line holds
/// its placeholder.
pub async fn finish_capture(
    conn: Option<&mut PgConnection>,
    capture: PreparedCapture,
) -> ApiResult<CaptureResult> {
    let token_count = capture.prepared.token_count;
    if !capture.needs_store() {
        return Ok(CaptureResult {
            stored: false,
            token_count,
            threshold_tokens: capture.threshold,
            context: capture.prepared.into_content(),
            memory: None,
        });
    }
    let conn = conn.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "capture over the threshold needs a connection"
        ))
    })?;
    let memory = match capture.prepared.key.clone() {
        Some(key) => upsert(conn, &key, &capture.prepared).await?,
        None => create(conn, &capture.prepared).await?,
    };
    let context = placeholder::context_line(
        capture.command.as_deref(),
        capture.exit_code,
        &memory.placeholder,
    );
    Ok(CaptureResult {
        stored: true,
        token_count,
        threshold_tokens: capture.threshold,
        context,
        memory: Some(memory),
    })
}

/// Agent tool for the capture flow in one call, in the caller's transaction.
pub async fn capture_output(
    conn: &mut PgConnection,
    input: CaptureInput,
    limits: &Limits,
) -> ApiResult<CaptureResult> {
    let capture = prepare_capture(input, limits).await?;
    finish_capture(Some(conn), capture).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlighted_words_and_their_line() {
        let snippet = "x **ERROR** y … **error** z";
        assert_eq!(highlighted(snippet), vec!["ERROR", "error"]);
        let chunk = "tail of line 9\nok\nsomething ERROR here\n";
        assert_eq!(first_line_with(chunk, 9, &highlighted(snippet)), Some(11));
        assert_eq!(first_line_with(chunk, 9, &[]), None);
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_422() {
        let id = Uuid::now_v7();
        assert_eq!(decode_cursor(&encode_cursor(id)).ok(), Some(id));
        assert!(decode_cursor("not a cursor").is_err());
    }

    #[test]
    fn generated_keys_are_valid_and_distinct() {
        let a = generate_key("command_output");
        let b = generate_key("text");
        assert!(a.starts_with("cmd_") && b.starts_with("mem_"));
        assert!(chunks::valid_key(&a) && chunks::valid_key(&b));
        assert_ne!(generate_key("x"), generate_key("x"));
    }

    #[test]
    fn page_requests_are_validated() {
        let limits = Limits {
            max_content_bytes: 100,
            page_bytes: 8,
            max_page_bytes: 64,
            capture_threshold_tokens: 5,
        };
        let q = |offset, limit, line_start, line_count| PageQuery {
            offset,
            limit,
            line_start,
            line_count,
            include_inactive: None,
        };
        assert_eq!(
            page_request(&q(None, None, None, None), &limits).ok(),
            Some(Request::Bytes {
                offset: 0,
                limit: 8
            })
        );
        assert_eq!(
            page_request(&q(None, None, Some(3), None), &limits).ok(),
            Some(Request::Lines {
                start: 3,
                count: DEFAULT_PAGE_LINES
            })
        );
        assert!(page_request(&q(Some(0), None, Some(1), None), &limits).is_err());
        assert!(page_request(&q(None, Some(0), None, None), &limits).is_err());
        assert!(page_request(&q(None, Some(65), None, None), &limits).is_err());
        assert!(page_request(&q(None, None, Some(0), None), &limits).is_err());
        assert!(page_request(&q(None, None, None, Some(0)), &limits).is_err());
        assert!(page_request(&q(Some(u64::MAX), None, None, None), &limits).is_err());
    }
}

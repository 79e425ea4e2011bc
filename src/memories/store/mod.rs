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

mod listing;
mod write;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::chunks::{self, CHUNK_BYTES, Chunk};
use super::model::StoredMemory;
use super::placeholder::{self, SUMMARY_MAX_CHARS};
use super::tokens;
use crate::access::Target;
use crate::config::Config;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

pub use super::capture::{PreparedCapture, capture_output, finish_capture, prepare_capture};
pub use super::paging::Request as PageRequest;
pub use super::read::{
    DEFAULT_PAGE_LINES, MAX_PAGE_LINES, grep_memory, page_request, retrieve_memory,
};
pub use super::search::search_memory;

pub use listing::{delete_memory, list_memories};
pub use write::{create, upsert};

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
    let size = new.content.len();
    let checked = Checked {
        content: new.content,
        key: new.key,
        description,
        memory_type,
        agent_id,
        thread_id,
        command: new.command,
        metadata: Value::Object(new.metadata),
    };
    // Small content is measured in place: handing it to a blocking thread cost more than the
    // work (a thread woken per store, and the tokenizer's regex caches taken and given back
    // across threads, were a third of the server's CPU per 1 KB store).
    if size <= INLINE_BYTES {
        return Ok(checked.measure());
    }
    tokio::task::spawn_blocking(move || checked.measure())
        .await
        .map_err(|err| ApiError::Internal(anyhow::anyhow!("preparing a memory failed: {err}")))
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
        None => create(Target::Tx(conn), &prepared).await,
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

/// Content up to this size is measured on the request's own thread (see [`prepare`]): its
/// tokens counted in about a tenth of a millisecond.
const INLINE_BYTES: usize = 4 * 1024;

/// A new memory's fields, checked, before it is measured.
struct Checked {
    content: String,
    key: Option<String>,
    description: Option<String>,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    command: Option<String>,
    metadata: Value,
}

impl Checked {
    /// Cuts the content into chunks, counts its lines and tokens, hashes it and writes its
    /// summary.
    fn measure(self) -> Prepared {
        let Checked {
            content,
            key,
            description,
            memory_type,
            agent_id,
            thread_id,
            command,
            metadata,
        } = self;
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
    }
}

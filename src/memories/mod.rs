//! Detail memory: large tool outputs stored once, referenced by `[MemoryRef: <key> - <description>]`
//! placeholders, retrieved in pages, grepped and searched.
//!
//! Handlers here are thin: parse, open a [`Scoped`](crate::db::Scoped) transaction, call [`store`], map the result.
//! Other domains (the chat endpoint's agent tools) call [`store::store_memory`],
//! [`store::retrieve_memory`], [`store::search_memory`] (and [`store::capture_output`]) directly
//! with their own transaction.

mod capture;
mod chunks;
mod grep;
pub mod model;
mod paging;
pub mod placeholder;
mod read;
mod search;
pub mod store;
mod tokens;
pub mod transfer;

use axum::extract::{FromRequest, Request, State};
use axum::http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use clap::Args;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::{Reader, Target, Writer};
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{Json, Path, Query, parse_json, too_large};
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;
use model::{
    CaptureInput, CaptureResult, DeleteQuery, GrepQuery, GrepResult, ListQuery, MemoryInput,
    MemoryList, MemoryPage, PageQuery, SearchRequest, SearchResults, StoreStatus, StoredMemory,
};
use store::{Limits, NewMemory};

pub(crate) use search::CHUNKS_CORPUS;
pub use store::PageRequest;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults. The content limit itself is `MNEMO_MEMORY_MAX_BYTES`
/// ([`crate::config::Config::memory_max_bytes`]).
#[derive(Debug, Clone, Args)]
pub struct MemoriesConfig {
    /// Bytes of a memory page when the request names no range.
    #[arg(
        long = "memory-page-bytes",
        env = "MNEMO_MEMORY_PAGE_BYTES",
        default_value_t = 8192
    )]
    pub page_bytes: u64,
    /// Largest page one read returns, in bytes (`limit` above it is 422; line pages stop there).
    #[arg(
        long = "memory-max-page-bytes",
        env = "MNEMO_MEMORY_MAX_PAGE_BYTES",
        default_value_t = 1024 * 1024
    )]
    pub max_page_bytes: u64,
    /// Outputs above this many cl100k tokens are stored by capture; smaller ones come back inline.
    #[arg(
        long = "memory-capture-threshold-tokens",
        env = "MNEMO_MEMORY_CAPTURE_THRESHOLD_TOKENS",
        default_value_t = 500
    )]
    pub capture_threshold_tokens: u64,
}

impl Default for MemoriesConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl MemoriesConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        if !(16..=1 << 30).contains(&self.max_page_bytes) {
            return Err("MNEMO_MEMORY_MAX_PAGE_BYTES must be 16 to 1073741824".into());
        }
        if self.page_bytes == 0 || self.page_bytes > self.max_page_bytes {
            return Err("MNEMO_MEMORY_PAGE_BYTES must be 1 to MNEMO_MEMORY_MAX_PAGE_BYTES".into());
        }
        if !(1..=10_000_000).contains(&self.capture_threshold_tokens) {
            return Err("MNEMO_MEMORY_CAPTURE_THRESHOLD_TOKENS must be 1 to 10000000".into());
        }
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_memory, list_memories))
        .routes(routes!(get_memory, put_memory, delete_memory))
        .routes(routes!(grep_memory))
        .routes(routes!(search_memories))
        .routes(routes!(capture))
}

/// Body limit of the routes that take content: the largest content, escaped in the worst common
/// case (every byte a two-byte JSON escape), plus 1 MiB for the other fields.
pub fn upload_body_limit(max_content_bytes: usize) -> usize {
    max_content_bytes
        .saturating_mul(2)
        .saturating_add(1024 * 1024)
}

/// JSON body of the content-carrying routes, limited by [`upload_body_limit`] of the configured
/// content limit (the router is built before the configuration is known, so the limit is read
/// here rather than set as a route layer). Errors as [`crate::extract::Json`].
pub struct UploadJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for UploadJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = upload_body_limit(state.config.memory_max_bytes);
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if content_type != "application/json" {
            return Err(ApiError::status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a JSON body with `Content-Type: application/json`",
            ));
        }
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large(Some(limit)));
        }
        let body = Limited::new(req.into_body(), limit)
            .collect()
            .await
            .map_err(|err| {
                if err.downcast_ref::<LengthLimitError>().is_some() {
                    too_large(Some(limit))
                } else {
                    ApiError::bad_request(format!("cannot read the request body: {err}"))
                }
            })?
            .to_bytes();
        parse_json(&body).map(UploadJson)
    }
}

fn new_memory(input: MemoryInput) -> NewMemory {
    NewMemory {
        content: input.content,
        key: input.key,
        description: input.description,
        memory_type: input.memory_type,
        agent_id: input.agent_id,
        thread_id: input.thread_id,
        metadata: input.metadata.unwrap_or_default(),
        command: None,
    }
}

/// Store a memory under a generated key (or the `key` given).
///
/// Returns the placeholder to keep in the agent's context. A `key` that exists is 409 (PUT
/// replaces). Content is at most `MNEMO_MEMORY_MAX_BYTES` (413 naming the limit); empty is 422.
#[utoipa::path(post, path = "/api/memories", tag = "memories",
    params(Idempotency),
    request_body = MemoryInput,
    responses(
        (status = 201, description = "Stored", body = StoredMemory),
        (status = 409, description = "The key exists", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Content or body over the limit (`limit_bytes`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field (`field` names it)", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create_memory(
    State(state): State<AppState>,
    caller: Writer,
    idem: Idempotency,
    UploadJson(input): UploadJson<MemoryInput>,
) -> ApiResult<Response> {
    let limits = Limits::from_config(&state.config);
    let prepared = store::prepare(new_memory(input), &limits).await?;
    if !idem.is_active() {
        // Nothing else to write with it: one call, its own transaction.
        let stored = store::create(Target::Call(&caller), &prepared).await?;
        return Ok((StatusCode::CREATED, axum::Json(stored)).into_response());
    }
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let stored = store::create(Target::Tx(&mut tx), &prepared).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(stored)))
        .await
}

/// Store a memory under `key`, idempotently.
///
/// New key: 201 `created`. Same content and description again: 200 `unchanged`, nothing written.
/// Same content with other description, type, ids or metadata: 200 `updated`. Different content:
/// 200 `replaced` (the new version replaces the old; `previous` describes it). A soft-deleted
/// memory is reactivated by any change.
#[utoipa::path(put, path = "/api/memories/{key}", tag = "memories",
    params(("key" = String, Path, description = "Memory key: 1 to 128 of `[A-Za-z0-9._:-]`", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$")),
    request_body = MemoryInput,
    responses(
        (status = 200, description = "Unchanged, updated or replaced (`status`)", body = StoredMemory),
        (status = 201, description = "Created", body = StoredMemory),
        (status = 409, description = "Concurrent writes to the key; retry", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Content or body over the limit (`limit_bytes`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field or key", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_memory(
    State(state): State<AppState>,
    caller: Writer,
    Path(key): Path<String>,
    UploadJson(input): UploadJson<MemoryInput>,
) -> ApiResult<(StatusCode, axum::Json<StoredMemory>)> {
    if input.key.as_deref().is_some_and(|k| k != key) {
        return Err(ApiError::invalid(
            "key",
            "`key` in the body must be absent or equal to the key in the path",
        ));
    }
    let limits = Limits::from_config(&state.config);
    let mut new = new_memory(input);
    new.key = Some(key.clone());
    let prepared = store::prepare(new, &limits).await?;
    let mut tx = caller.begin().await?;
    let stored = store::upsert(&mut tx, &key, &prepared).await?;
    tx.commit().await?;
    let status = if stored.status == StoreStatus::Created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(stored)))
}

fn wants_text(headers: &HeaderMap) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .is_some_and(|v| v.contains("text/plain") && !v.contains("application/json"))
}

fn header(value: String) -> Option<HeaderValue> {
    HeaderValue::from_str(&value).ok()
}

/// The raw slice as `text/plain`, its range in headers.
fn raw_page(page: MemoryPage) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let pairs = [
        (
            "x-memory-range",
            header(format!(
                "bytes {}-{}/{}",
                page.range.offset, page.range.end, page.totals.size_bytes
            )),
        ),
        (
            "x-memory-lines",
            page.range
                .line_start
                .zip(page.range.line_end)
                .and_then(|(a, b)| header(format!("{a}-{b}/{}", page.totals.line_count))),
        ),
        (
            "x-memory-next",
            page.next.as_ref().and_then(|n| header(n.query_string())),
        ),
    ];
    for (name, value) in pairs {
        if let Some(value) = value {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    (StatusCode::OK, headers, page.content).into_response()
}

/// Read one page of a memory.
///
/// Either `offset` + `limit` (bytes; never splits a UTF-8 character) or `line_start` +
/// `line_count` (whole lines). Without either: the first `MNEMO_MEMORY_PAGE_BYTES` bytes. `next`
/// holds the parameters of the following page (null at the end). A range past the end is an
/// empty slice with the totals. `Accept: text/plain` returns the raw slice with `X-Memory-Range`
/// (`bytes start-end/size`), `X-Memory-Lines` and `X-Memory-Next` (query string) headers.
#[utoipa::path(get, path = "/api/memories/{key}", tag = "memories",
    params(("key" = String, Path, description = "Memory key: 1 to 128 of `[A-Za-z0-9._:-]`", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$"), PageQuery),
    responses(
        (status = 200, description = "The page", content(
            (MemoryPage = "application/json"),
            (String = "text/plain"),
        )),
        (status = 404, description = "No such memory (or soft-deleted without include_inactive)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad range parameter (`field` names it)", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_memory(
    State(state): State<AppState>,
    caller: Reader,
    Path(key): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let limits = Limits::from_config(&state.config);
    let request = store::page_request(&query, &limits)?;
    let page = store::retrieve_memory(
        &caller,
        &key,
        request,
        query.include_inactive.unwrap_or(false),
        &limits,
    )
    .await?;
    if wants_text(&headers) {
        Ok(raw_page(page))
    } else {
        Ok(axum::Json(page).into_response())
    }
}

/// Grep a memory: matching lines with line numbers and context.
///
/// `pattern` is a Rust `regex` (linear time, no backtracking; compiled size bounded); a bad
/// pattern is 422. All matches are counted; at most `max_matches` are returned (`truncated`).
#[utoipa::path(get, path = "/api/memories/{key}/grep", tag = "memories",
    params(("key" = String, Path, description = "Memory key: 1 to 128 of `[A-Za-z0-9._:-]`", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$"), GrepQuery),
    responses(
        (status = 200, description = "Matches", body = GrepResult),
        (status = 404, description = "No such memory", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad pattern or parameter", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn grep_memory(
    caller: Reader,
    Path(key): Path<String>,
    Query(query): Query<GrepQuery>,
) -> ApiResult<axum::Json<GrepResult>> {
    let mut tx = caller.begin().await?;
    let result = store::grep_memory(&mut tx, &key, &query).await?;
    tx.end_read_only();
    Ok(axum::Json(result))
}

/// List memories (newest first), without content.
#[utoipa::path(get, path = "/api/memories", tag = "memories",
    params(ListQuery),
    responses(
        (status = 200, description = "One page", body = MemoryList),
        (status = 422, description = "Bad filter, limit or cursor", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_memories(
    caller: Reader,
    Query(query): Query<ListQuery>,
) -> ApiResult<axum::Json<MemoryList>> {
    let mut tx = caller.begin().await?;
    let list = store::list_memories(&mut tx, &query).await?;
    tx.end_read_only();
    Ok(axum::Json(list))
}

/// Search memories by words, meaning or both.
///
/// `keyword` ORs the query's words and `"phrases"` (stemmed, English stopwords dropped; `-word`
/// excludes) and ranks summaries and content by how rare the words they hold are (names in the
/// question weigh more); a plain question also finds the memory written just after a match in
/// the same agent and thread (the reply to what was asked); `semantic` ranks by cosine
/// similarity of embeddings (needs an embedder); `hybrid` fuses both scores. Each memory appears
/// once, at its best chunk. Content hits name the chunk's line and byte range, the first line in
/// it holding a matched word, and the page parameters that read it. When the embedder fails,
/// keyword results are served with `degraded: true`.
#[utoipa::path(post, path = "/api/memories/search", tag = "memories",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = SearchResults),
        (status = 422, description = "Empty query or bad field", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_memories(
    State(state): State<AppState>,
    caller: Reader,
    Json(request): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchResults>> {
    // A query is checked before anything is counted or embedded for it.
    crate::search::TextQuery::parse("query", &request.query)?;
    let (mode, vector) = crate::search::prepare(
        &state,
        &caller,
        &[&CHUNKS_CORPUS],
        request.mode,
        &request.query,
    )
    .await?;
    let mut tx = caller.begin().await?;
    let results = store::search_memory(&mut tx, &request, mode, vector.as_ref()).await?;
    tx.end_read_only();
    Ok(axum::Json(results))
}

/// Delete a memory: soft by default (hidden from list and search, readable with
/// `include_inactive=true`), `hard=true` removes it and its content.
#[utoipa::path(delete, path = "/api/memories/{key}", tag = "memories",
    params(("key" = String, Path, description = "Memory key: 1 to 128 of `[A-Za-z0-9._:-]`", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$"), DeleteQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such memory", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad parameter", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete_memory(
    caller: Writer,
    Path(key): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let mut tx = caller.begin().await?;
    store::delete_memory(&mut tx, &key, query.hard.unwrap_or(false)).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Capture a tool output: inline under the threshold, stored above it.
///
/// Counts the output's cl100k tokens. At most `threshold_tokens` (default
/// `MNEMO_MEMORY_CAPTURE_THRESHOLD_TOKENS`): `stored: false` and `context` is the output itself.
/// Above: the output is stored (`memory_type` `command_output`; command, exit code and duration go
/// into the metadata) and `context` is a line holding its placeholder, with a deterministic
/// summary (first meaningful line, size, lines, error and warning lines). No model is called.
#[utoipa::path(post, path = "/api/memories/capture", tag = "memories",
    params(Idempotency),
    request_body = CaptureInput,
    responses(
        (status = 200, description = "Under the threshold: returned inline, nothing stored", body = CaptureResult),
        (status = 201, description = "Over the threshold: stored", body = CaptureResult),
        (status = 413, description = "Content or body over the limit (`limit_bytes`)", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn capture(
    State(state): State<AppState>,
    caller: Writer,
    idem: Idempotency,
    UploadJson(input): UploadJson<CaptureInput>,
) -> ApiResult<Response> {
    let limits = Limits::from_config(&state.config);
    let prepared = store::prepare_capture(input, &limits).await?;
    // Without a key, an output returned inline needs no transaction. With one, it is recorded
    // like any other answer, so the key cannot be reused for another output.
    if !prepared.needs_store() && !idem.is_active() {
        let result = store::finish_capture(None, prepared).await?;
        return Ok((StatusCode::OK, axum::Json(result)).into_response());
    }
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let (status, result) = if prepared.needs_store() {
        let result = store::finish_capture(Some(&mut tx), prepared).await?;
        (StatusCode::CREATED, result)
    } else {
        (StatusCode::OK, store::finish_capture(None, prepared).await?)
    };
    idem.commit(tx, (status, axum::Json(result))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(MemoriesConfig::default().validate(), Ok(()));
        let bad = MemoriesConfig {
            page_bytes: 10,
            max_page_bytes: 8,
            ..MemoriesConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("MNEMO_MEMORY_MAX_PAGE_BYTES")
        );
        let bad = MemoriesConfig {
            page_bytes: 0,
            ..MemoriesConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("MNEMO_MEMORY_PAGE_BYTES")
        );
        let bad = MemoriesConfig {
            capture_threshold_tokens: 0,
            ..MemoriesConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("THRESHOLD"));
        assert_eq!(upload_body_limit(1000), 2000 + 1024 * 1024);
    }
}

//! Conversation memory: batched archival, sendBeacon uploads, sessions and their running
//! summaries, the short-term window and chat context.

pub mod appends;
pub mod batch;
pub mod chat;
pub mod context;
mod demo;
pub mod model;
pub mod search;
pub mod store;
pub mod summary;
pub mod sweeper;
pub mod tools;
pub mod transfer;
pub mod window;

use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use clap::Args;
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::model::{
    ArchiveRequest, ArchiveResponse, BeaconRequest, ChatRequest, ChatResponse, ContextResponse,
    MessagePage, MessageQuery, SessionPage, SessionQuery,
};
use crate::access::{Caller, Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query, parse_json};
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;

/// Largest beacon body: browsers refuse `sendBeacon` payloads much past 64 KiB.
pub const BEACON_MAX_BYTES: usize = 64 * 1024;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args)]
pub struct ConversationsConfig {
    /// Days archived conversation history is kept; unset: forever. Expired messages vanish from
    /// reads at once; a background sweeper deletes them.
    #[arg(long = "history-retention-days", env = "MNEMO_HISTORY_RETENTION_DAYS")]
    pub history_retention_days: Option<u32>,
    /// Seconds between two retention sweeps.
    #[arg(
        long = "history-sweep-interval-secs",
        env = "MNEMO_HISTORY_SWEEP_INTERVAL_SECS",
        default_value_t = 3600
    )]
    pub history_sweep_interval_secs: u64,
    /// Rows a sweep deletes per table and transaction.
    #[arg(
        long = "history-sweep-batch",
        env = "MNEMO_HISTORY_SWEEP_BATCH",
        default_value_t = 5000
    )]
    pub history_sweep_batch: u64,
    /// Messages in the short-term window of a session.
    #[arg(
        long = "chat-window-messages",
        env = "MNEMO_CHAT_WINDOW_MESSAGES",
        default_value_t = 10
    )]
    pub window_messages: usize,
    /// Sessions whose window a replica keeps in memory (0 disables the cache).
    #[arg(
        long = "chat-window-cache-sessions",
        env = "MNEMO_CHAT_WINDOW_CACHE_SESSIONS",
        default_value_t = 10_000
    )]
    pub window_cache_sessions: usize,
    /// Most messages in one archive batch (or one turn's `new_messages`); more is 413.
    #[arg(
        long = "archive-max-messages",
        env = "MNEMO_ARCHIVE_MAX_MESSAGES",
        default_value_t = 500
    )]
    pub archive_max_messages: usize,
    /// Largest archive, context or chat request body in bytes; more is 413.
    #[arg(long = "archive-max-bytes", env = "MNEMO_ARCHIVE_MAX_BYTES", default_value_t = 1024 * 1024)]
    pub archive_max_bytes: usize,
    /// Rounds of tool calls `/api/chat` runs before asking the model for a final answer.
    #[arg(
        long = "chat-max-tool-rounds",
        env = "MNEMO_CHAT_MAX_TOOL_ROUNDS",
        default_value_t = 4
    )]
    pub chat_max_tool_rounds: usize,
    /// Memories recalled into a turn's context: the best hits for the turn's last user message
    /// among the caller's memories and other messages (0 turns recall off).
    #[arg(
        long = "chat-recall-k",
        env = "MNEMO_CHAT_RECALL_K",
        default_value_t = 5
    )]
    pub chat_recall_k: u32,
    /// Refresh a session's running summary in the background every this many archived messages
    /// (0: no summaries).
    #[arg(
        long = "chat-summary-every",
        env = "MNEMO_CHAT_SUMMARY_EVERY",
        default_value_t = 20
    )]
    pub chat_summary_every: u32,
    /// The system prompt that opens every compiled context.
    #[arg(long = "chat-system-prompt", env = "MNEMO_CHAT_SYSTEM_PROMPT", default_value = DEFAULT_SYSTEM_PROMPT)]
    pub system_prompt: String,
}

/// The system prompt used when `MNEMO_CHAT_SYSTEM_PROMPT` is unset.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant with memory. Long-term notes \
about the user follow in their own section; keep them current with manage_long_term_memory. Store \
large material with store_memory and find it again with search_memory and retrieve_memory.";

impl Default for ConversationsConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl ConversationsConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(days) = self.history_retention_days
            && (days == 0 || i32::try_from(days).is_err())
        {
            return Err("MNEMO_HISTORY_RETENTION_DAYS must be a positive number of days".into());
        }
        if self.history_sweep_interval_secs == 0 {
            return Err("MNEMO_HISTORY_SWEEP_INTERVAL_SECS must be at least 1".into());
        }
        if self.chat_recall_k > 20 {
            return Err("MNEMO_CHAT_RECALL_K must be 0 to 20".into());
        }
        if self.history_sweep_batch == 0 {
            return Err("MNEMO_HISTORY_SWEEP_BATCH must be at least 1".into());
        }
        if self.window_messages == 0 || self.window_messages > 1000 {
            return Err("MNEMO_CHAT_WINDOW_MESSAGES must be between 1 and 1000".into());
        }
        if self.archive_max_messages == 0 {
            return Err("MNEMO_ARCHIVE_MAX_MESSAGES must be at least 1".into());
        }
        if self.archive_max_bytes < 1024 {
            return Err("MNEMO_ARCHIVE_MAX_BYTES must be at least 1024".into());
        }
        if self.chat_summary_every > 10_000 {
            return Err("MNEMO_CHAT_SUMMARY_EVERY must be between 0 and 10000".into());
        }
        Ok(())
    }

    fn retention(&self) -> Option<i32> {
        self.history_retention_days
            .and_then(|d| i32::try_from(d).ok())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    let beacon = crate::http::body_limit(
        OpenApiRouter::new().routes(routes!(archive_beacon)),
        BEACON_MAX_BYTES,
    );
    OpenApiRouter::new()
        .routes(routes!(archive_messages))
        .routes(routes!(list_sessions))
        .routes(routes!(session_messages))
        .routes(routes!(get_session, delete_session))
        .routes(routes!(chat_context))
        .routes(routes!(chat))
        .routes(routes!(search_chat))
        .merge(beacon)
        .merge(demo::router())
}

/// A JSON body read within `MNEMO_ARCHIVE_MAX_BYTES` (413 past it; 415 when not JSON).
pub struct LimitedJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for LimitedJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let content_type = mime(req.headers());
        if content_type != "application/json" {
            return Err(ApiError::status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a JSON body with `Content-Type: application/json`",
            ));
        }
        let bytes = crate::extract::read_limited(
            req,
            state.config.conversations.archive_max_bytes,
            "batch",
        )
        .await?;
        parse_json(&bytes).map(LimitedJson)
    }
}

fn mime(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

async fn archive(
    state: &AppState,
    caller: &Caller,
    session_id: Option<&str>,
    agent_id: Option<&str>,
    messages: Option<&[model::IncomingMessage]>,
    idem: &Idempotency,
) -> ApiResult<Response> {
    let session_id = batch::session_or_new(session_id)?;
    let agent = batch::agent(agent_id)?;
    let Some(messages) = messages else {
        return Err(ApiError::invalid(
            "messages_batch",
            "`messages_batch` is required",
        ));
    };
    let batch = batch::validate(
        "messages_batch",
        messages,
        state.config.conversations.archive_max_messages,
    )?;
    if !idem.is_active() {
        let archived = state
            .session_appends
            .archive(state, caller, &session_id, agent, batch)
            .await?;
        return Ok(axum::Json(archive_answer(session_id, &archived)).into_response());
    }
    let before = state
        .window_cache
        .get(&caller.tenant_id, &caller.user_id, &session_id)
        .map(|(v, m)| (Some(v), m));
    let mut tx = match idem.begin(caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let archived = store::archive(&mut tx, &session_id, &agent, &batch).await?;
    let answer = archive_answer(session_id.clone(), &archived);
    let response = idem.commit(tx, axum::Json(answer)).await?;
    chat::remember_archive(state, caller, &session_id, before, &batch, &archived);
    summary::schedule_after(state, caller, &session_id, &archived);
    Ok(response)
}

fn archive_answer(session_id: String, archived: &store::Archived) -> ArchiveResponse {
    ArchiveResponse {
        session_id,
        batch_id: archived.batch_id,
        new: archived.new_count(),
        updated: archived.updated_count(),
        deleted: archived.deleted_count(),
        duplicates: archived.duplicates,
    }
}

/// Archive a batch of chat messages.
///
/// One transaction and one statement: a message (same session, same client `id`) is stored once
/// however often it is sent, so clients may re-send the whole visible conversation. Sent again
/// with other content (an AI reply that was still streaming, an edited message) it is updated in
/// place (`updated`), unless the stored state is newer by `edited_at`; sent again unchanged it is
/// a duplicate; sent with `deleted: true` it is deleted. Without `session_id` the server makes
/// one (a UUIDv7) and returns it. The session is created on first sight; each batch is recorded
/// in `recent_conversation_history`. A bad message refuses the whole batch (422 naming
/// `messages_batch[i].field`); nothing of it is stored.
#[utoipa::path(post, path = "/api/chat/session/archive_messages", tag = "conversations",
    params(Idempotency),
    request_body = ArchiveRequest,
    responses(
        (status = 200, description = "Stored; the session id and counts of new, updated, deleted and duplicate messages", body = ArchiveResponse),
        (status = 413, description = "More messages or bytes than MNEMO_ARCHIVE_MAX_MESSAGES / MNEMO_ARCHIVE_MAX_BYTES", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field, named in `field` (e.g. `messages_batch[3].sender`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn archive_messages(
    State(state): State<AppState>,
    caller: Writer,
    idem: Idempotency,
    LimitedJson(req): LimitedJson<ArchiveRequest>,
) -> ApiResult<Response> {
    archive(
        &state,
        &caller,
        req.session_id.as_deref(),
        req.agent_id.as_deref(),
        req.messages_batch.as_deref(),
        &idem,
    )
    .await
}

/// Archive a batch sent with `navigator.sendBeacon()` (page unload).
///
/// `sendBeacon` cannot set headers, and a cross-origin beacon must be a CORS "simple" request, so
/// this route takes no `Authorization` header: the body (`text/plain` or `application/json`) is the
/// archive JSON plus `access_token`, a bearer token verified exactly like the header. Otherwise it
/// behaves like `/api/chat/session/archive_messages`, and answers the same (browsers drop a
/// beacon's answer; other callers can read the counts and a server-made `session_id`). Bodies
/// over 64 KiB (the browsers' beacon budget) are 413: split larger flushes into several beacons.
#[utoipa::path(post, path = "/api/chat/session/archive_messages/beacon", tag = "conversations",
    request_body(content = BeaconRequest, content_type = "text/plain",
        description = "The archive JSON plus `access_token`, sent as text/plain (or application/json)"),
    responses(
        (status = 200, description = "Stored; as for archive_messages", body = ArchiveResponse),
        (status = 401, description = "Missing or invalid `access_token`", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB, or more messages than MNEMO_ARCHIVE_MAX_MESSAGES", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Neither text/plain nor application/json", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field, named in `field`", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
    security(())
)]
pub async fn archive_beacon(State(state): State<AppState>, req: Request) -> ApiResult<Response> {
    let content_type = mime(req.headers());
    if !matches!(
        content_type.as_str(),
        "text/plain" | "application/json" | ""
    ) {
        return Err(ApiError::status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected a text/plain or application/json body",
        ));
    }
    let bytes = crate::extract::read_limited(req, BEACON_MAX_BYTES, "beacon").await?;
    // Parse the token first so that a bad token is 401 even when the batch is also bad.
    let mut value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    let token = value
        .as_object_mut()
        .and_then(|o| o.remove("access_token"))
        .and_then(|t| t.as_str().map(str::to_owned))
        .ok_or_else(|| ApiError::unauthorized("the beacon body has no `access_token`"))?;
    let caller = Writer::new(state.db.clone(), state.verifier.verify(&token).await?)?;
    let req: ArchiveRequest = parse_json(value.to_string().as_bytes())?;
    archive(
        &state,
        &caller,
        req.session_id.as_deref(),
        req.agent_id.as_deref(),
        req.messages_batch.as_deref(),
        &Idempotency::none(),
    )
    .await
}

/// Position of a list item: its time in microseconds and its key (session or message id).
fn encode_cursor(at: DateTime<Utc>, key: &str) -> String {
    crate::pagination::encode(&(at.timestamp_micros(), key))
}

fn decode_cursor(cursor: Option<&str>) -> ApiResult<Option<(DateTime<Utc>, String)>> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let (micros, key): (i64, String) = crate::pagination::decode(cursor)?;
    let at = DateTime::from_timestamp_micros(micros).ok_or_else(|| {
        ApiError::invalid(
            "cursor",
            "`cursor` is not a `next_cursor` this list returned",
        )
    })?;
    Ok(Some((at, key)))
}

/// List chat sessions, most recently active first.
#[utoipa::path(get, path = "/api/chat/sessions", tag = "conversations",
    params(SessionQuery),
    responses(
        (status = 200, description = "A page of sessions", body = SessionPage),
        (status = 422, description = "Bad `limit` or `cursor`", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    caller: Reader,
    Query(query): Query<SessionQuery>,
) -> ApiResult<axum::Json<SessionPage>> {
    let limit = crate::pagination::size(query.limit, 50, 200)?;
    let after = decode_cursor(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    let mut items = store::sessions(
        &mut tx,
        state.config.conversations.retention(),
        query.agent_id.as_deref(),
        after,
        limit + 1,
    )
    .await?;
    tx.commit().await?;
    let more = items.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = more
        .then(|| items.last())
        .flatten()
        .map(|s| encode_cursor(s.last_activity_at, &s.session_id));
    Ok(axum::Json(SessionPage { items, next_cursor }))
}

/// Messages of a session, oldest first (`order=desc`: newest first).
#[utoipa::path(get, path = "/api/chat/sessions/{session_id}/messages", tag = "conversations",
    params(("session_id" = String, Path, description = "The session"), MessageQuery),
    responses(
        (status = 200, description = "A page of messages", body = MessagePage),
        (status = 404, description = "No such session for this user", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad `order`, `limit` or `cursor`", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn session_messages(
    State(state): State<AppState>,
    caller: Reader,
    Path(session_id): Path<String>,
    Query(query): Query<MessageQuery>,
) -> ApiResult<axum::Json<MessagePage>> {
    let limit = crate::pagination::size(query.limit, 100, 500)?;
    let after = match decode_cursor(query.cursor.as_deref())? {
        Some((at, seq)) => Some((
            at,
            seq.parse::<i64>().map_err(|_| {
                ApiError::invalid("cursor", "`cursor` is not a cursor this list returned")
            })?,
        )),
        None => None,
    };
    let order = query.order.unwrap_or_default();
    let mut tx = caller.begin().await?;
    let retention = state.config.conversations.retention();
    let mut rows = store::messages(&mut tx, retention, &session_id, order, after, limit + 1)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no session `{session_id}`")))?;
    tx.commit().await?;
    let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = more
        .then(|| rows.last())
        .flatten()
        .map(|(m, seq)| encode_cursor(m.timestamp, &seq.to_string()));
    Ok(axum::Json(MessagePage {
        items: rows.into_iter().map(|(m, _)| m).collect(),
        next_cursor,
    }))
}

/// One session, with its running summary.
#[utoipa::path(get, path = "/api/chat/sessions/{session_id}", tag = "conversations",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The session", body = model::Session),
        (status = 404, description = "No such session for this user", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_session(
    State(state): State<AppState>,
    caller: Reader,
    Path(session_id): Path<String>,
) -> ApiResult<axum::Json<model::Session>> {
    let mut tx = caller.begin().await?;
    let session =
        store::session(&mut tx, state.config.conversations.retention(), &session_id).await?;
    tx.end_read_only();
    session
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found(format!("no session `{session_id}`")))
}

/// Delete a session with its messages and batch records.
#[utoipa::path(delete, path = "/api/chat/sessions/{session_id}", tag = "conversations",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such session for this user", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete_session(
    State(state): State<AppState>,
    caller: Writer,
    Path(session_id): Path<String>,
) -> ApiResult<StatusCode> {
    let mut tx = caller.begin().await?;
    let deleted = store::delete_session(&mut tx, &session_id).await?;
    tx.commit().await?;
    state
        .window_cache
        .remove(&caller.tenant_id, &caller.user_id, &session_id);
    if deleted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no session `{session_id}`")))
    }
}

/// Search conversation messages across the caller's sessions.
///
/// By words (`keyword`: the query's words ORed, rare ones weighing most), by meaning
/// (`semantic`, needs an embedder) or both (`hybrid`, the default with an embedder). Each hit
/// names its session, message, sender and time, and the ids of the messages around it (read them
/// with `GET /api/chat/sessions/{session_id}/messages`). When the embedder fails, keyword results
/// are served with `degraded: true`.
#[utoipa::path(post, path = "/api/chat/search", tag = "conversations",
    request_body = search::ChatSearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = search::ChatSearchResults),
        (status = 422, description = "Empty or over-long query, bad mode or filter (`field` names it)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_chat(
    State(state): State<AppState>,
    caller: Reader,
    Json(request): Json<search::ChatSearchRequest>,
) -> ApiResult<axum::Json<search::ChatSearchResults>> {
    search::filters(&request, None)?;
    let (mode, vector) = crate::search::prepare(&state, request.mode, &request.query).await?;
    let mut tx = caller.begin().await?;
    let results = search::search_messages(
        &mut tx,
        &request,
        state.config.conversations.retention(),
        mode,
        vector.as_ref(),
    )
    .await?;
    tx.end_read_only();
    Ok(axum::Json(results))
}

/// Compile a turn's working memory (no model needed).
///
/// Stores `new_messages` in the session (like an archive batch: new, updated or deleted), then
/// returns OpenAI-style `messages`: the system prompt, the long-term notes of (user, agent) in
/// their own system message, the session's running summary (`## Earlier in this conversation`,
/// when the session holds more messages than the window), the short-term window (the session's
/// last `MNEMO_CHAT_WINDOW_MESSAGES` messages), and the new messages. Feed them to any chat model.
/// Without `session_id` the server makes one (a UUIDv7) and returns it.
#[utoipa::path(post, path = "/api/chat/context", tag = "conversations",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The compiled messages", body = ContextResponse),
        (status = 413, description = "Too many messages or bytes", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field, named in `field` (e.g. `new_messages[0].timestamp`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn chat_context(
    State(state): State<AppState>,
    caller: Writer,
    LimitedJson(req): LimitedJson<ChatRequest>,
) -> ApiResult<axum::Json<ContextResponse>> {
    let turn = chat::prepare(&state, &caller, req).await?;
    Ok(axum::Json(ContextResponse {
        session_id: turn.session_id,
        agent_id: turn.agent,
        messages: turn.messages,
        window_messages: turn.window_messages,
        new: turn.new,
        updated: turn.updated,
        deleted: turn.deleted,
        duplicates: turn.duplicates,
        recalled: turn.recalled,
    }))
}

/// Chat with the configured model, with memory.
///
/// Does what `/api/chat/context` does, then calls the OpenAI-compatible model
/// (`MNEMO_LLM_BASE_URL`, `MNEMO_LLM_MODEL`) offering the tools `manage_long_term_memory`,
/// `store_memory`, `retrieve_memory` and `search_memory`, runs the tool calls server-side (at most
/// `MNEMO_CHAT_MAX_TOOL_ROUNDS` rounds), stores the reply and the tool messages in the session and
/// returns them. With `Accept: text/event-stream` the answer streams as server-sent events:
/// `delta` (`{"content": "..."}`), `tool_call`, `tool_result`, then `done` (the JSON response) or
/// `error` (a problem). Without a configured model: 503, use `/api/chat/context`. Without
/// `session_id` the server makes one (a UUIDv7) and returns it.
#[utoipa::path(post, path = "/api/chat", tag = "conversations",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The stored reply (JSON), or a server-sent event stream",
            content((ChatResponse = "application/json"), (String = "text/event-stream"))),
        (status = 413, description = "Too many messages or bytes", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field, named in `field`", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "The model endpoint failed", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No model configured (`fallback` names /api/chat/context)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn chat(
    State(state): State<AppState>,
    caller: Writer,
    headers: HeaderMap,
    LimitedJson(req): LimitedJson<ChatRequest>,
) -> ApiResult<Response> {
    let Some(llm) = state.llm.clone() else {
        return Err(ApiError::unavailable(
            "no model is configured (set MNEMO_LLM_BASE_URL and MNEMO_LLM_MODEL); \
             POST /api/chat/context returns the compiled messages for a model of your own",
        )
        .with("fallback", "/api/chat/context"));
    };
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let turn = chat::prepare(&state, &caller, req).await?;
    if !streaming {
        let response = chat::respond(&state, &caller, &llm, turn, None).await?;
        return Ok(axum::Json(response).into_response());
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    state.jobs.clone().spawn(async move {
        let last = match chat::respond(&state, &caller, &llm, turn, Some(sender.clone())).await {
            Ok(response) => Event::default()
                .event("done")
                .data(serde_json::to_string(&response).unwrap_or_default()),
            Err(err) => {
                let detail = match err {
                    ApiError::Problem(p) => serde_json::to_string(&*p).unwrap_or_default(),
                    ApiError::Internal(e) => {
                        tracing::error!(error = ?e, "chat stream failed");
                        "{\"status\":500,\"detail\":\"internal error\"}".into()
                    }
                };
                Event::default().event("error").data(detail)
            }
        };
        let _ = sender.send(last).await;
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|event| (Ok::<Event, std::convert::Infallible>(event), receiver))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

//! Routes of sessions: list them, page through one's messages, read and delete one, search
//! messages across them.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};

use super::model::{MessagePage, MessageQuery, SessionPage, SessionQuery};
use super::{model, search, store};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::state::AppState;

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

/// The position a message page's cursor holds: the message's time and its sequence number.
fn message_position(cursor: Option<&str>) -> ApiResult<Option<(DateTime<Utc>, i64)>> {
    let Some((at, seq)) = decode_cursor(cursor)? else {
        return Ok(None);
    };
    let seq = seq
        .parse::<i64>()
        .map_err(|_| ApiError::invalid("cursor", "`cursor` is not a cursor this list returned"))?;
    Ok(Some((at, seq)))
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
    let items = store::sessions(
        &mut tx,
        state.config.conversations.retention(),
        query.agent_id.as_deref(),
        after,
        limit + 1,
    )
    .await?;
    tx.end_read_only();
    let (items, more) = crate::pagination::split(items, limit);
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
    let after = message_position(query.cursor.as_deref())?;
    let order = query.order.unwrap_or_default();
    let retention = state.config.conversations.retention();
    let rows = store::messages(&caller, retention, &session_id, order, after, limit + 1)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no session `{session_id}`")))?;
    let (rows, more) = crate::pagination::split(rows, limit);
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
/// By words (`keyword`: the query's words ORed, rare ones weighing most; a plain question also
/// finds the message just after a match, the reply to what was asked), by meaning
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
    let (mode, vector) = crate::search::prepare(
        &state,
        &caller,
        &[&search::MESSAGES_CORPUS],
        request.mode,
        &request.query,
    )
    .await?;
    let mut tx = caller.begin().await?;
    let results = search::search_messages(
        &mut tx,
        &request,
        state.config.conversations.retention(),
        mode,
        vector.as_ref(),
        &[],
    )
    .await?;
    tx.end_read_only();
    Ok(axum::Json(results))
}

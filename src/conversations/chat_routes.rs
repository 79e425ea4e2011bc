//! Routes of a chat turn: the compiled context for a model of the caller's own, and a chat
//! with the configured model (JSON or a server-sent event stream).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;

use super::LimitedJson;
use super::chat::{Turn, prepare, respond};
use super::model::{ChatRequest, ChatResponse, ContextResponse};
use crate::access::Writer;
use crate::error::{ApiError, ApiResult};
use crate::llm::LlmClient;
use crate::state::AppState;

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
    let turn = prepare(&state, &caller, req).await?;
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
    let llm = state.llm.clone().ok_or_else(no_model)?;
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let turn = prepare(&state, &caller, req).await?;
    if !streaming {
        let response = respond(&state, &caller, &llm, turn, None).await?;
        return Ok(axum::Json(response).into_response());
    }
    Ok(Sse::new(reply_events(state, caller, llm, turn))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// 503 for a chat without a configured model, naming the route that works without one.
fn no_model() -> ApiError {
    ApiError::unavailable(
        "no model is configured (set MNEMO_LLM_BASE_URL and MNEMO_LLM_MODEL); \
         POST /api/chat/context returns the compiled messages for a model of your own",
    )
    .with("fallback", "/api/chat/context")
}

/// The reply as server-sent events: the turn runs as a tracked background job that sends
/// `delta`, `tool_call` and `tool_result` events as they happen, then `done` with the JSON
/// response or `error` with a problem.
fn reply_events(
    state: AppState,
    caller: Writer,
    llm: Arc<LlmClient>,
    turn: Turn,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    state.jobs.clone().spawn(async move {
        let last = match respond(&state, &caller, &llm, turn, Some(sender.clone())).await {
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
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|event| (Ok::<Event, Infallible>(event), receiver))
    })
}

//! Routes that archive messages: a batch (JSON, with an `Idempotency-Key`) and a
//! `navigator.sendBeacon` upload on page unload.

use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::model::{ArchiveRequest, ArchiveResponse, BeaconRequest};
use super::{LimitedJson, batch, chat, mime, model, store, summary};
use crate::access::{Caller, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::parse_json;
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;

/// Largest beacon body: browsers refuse `sendBeacon` payloads much past 64 KiB.
pub const BEACON_MAX_BYTES: usize = 64 * 1024;

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
pub async fn archive_beacon(
    State(state): State<AppState>,
    Beacon { caller, request }: Beacon,
) -> ApiResult<Response> {
    archive(
        &state,
        &caller,
        request.session_id.as_deref(),
        request.agent_id.as_deref(),
        request.messages_batch.as_deref(),
        &Idempotency::none(),
    )
    .await
}

/// A beacon's batch and the caller its `access_token` names. The token is checked before the
/// batch, so a bad token is 401 even when the batch is also bad.
pub struct Beacon {
    caller: Writer,
    request: ArchiveRequest,
}

impl FromRequest<AppState> for Beacon {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
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
        let mut value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
        let token = value
            .as_object_mut()
            .and_then(|o| o.remove("access_token"))
            .and_then(|t| t.as_str().map(str::to_owned))
            .ok_or_else(|| ApiError::unauthorized("the beacon body has no `access_token`"))?;
        let caller = Writer::new(state.db.clone(), state.verifier.verify(&token).await?)?;
        let request = parse_json(value.to_string().as_bytes())?;
        Ok(Beacon { caller, request })
    }
}

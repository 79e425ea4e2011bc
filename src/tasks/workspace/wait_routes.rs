//! Routes of a task's waits: create, list, read, resolve.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use uuid::Uuid;

use super::model::*;
use super::waits::WaitStatus;
use super::{store, waits};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;
use crate::tasks::summary;

/// Records a smart-wait job linked to the task, status `watching`; the task metadata's
/// `active_wait_ids`, `last_wait_state` and `last_wait_event_at` follow.
#[utoipa::path(post, path = "/api/tasks/{id}/waits", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewWait,
    responses(
        (status = 201, description = "The wait", body = Wait),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create_wait(
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewWait>,
) -> ApiResult<Response> {
    waits::check_new_wait(
        body.target_type.trim(),
        body.target_id.trim(),
        &body.criteria,
        body.timeout_seconds,
        body.poll_interval,
    )?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let mut metadata = store::lock_metadata(&mut tx, id).await?;
    let wait = store::insert_wait(&mut tx, id, Uuid::now_v7(), &body).await?;
    waits::record_in_metadata(
        &mut metadata,
        &wait.wait_id.to_string(),
        WaitStatus::Watching,
        wait.created_at,
    );
    store::save_metadata(&mut tx, id, metadata).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(wait)))
        .await
}

/// The task's waits, oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/waits", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), PageQuery),
    responses(
        (status = 200, description = "A page of waits", body = WaitPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_waits(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<WaitPage>> {
    let limit = pagination::size(query.limit, 50, 200)?;
    let after = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (items, more) = store::waits_after(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let position = items.last().map(|w| w.wait_id);
    Ok(axum::Json(WaitPage {
        items,
        next_cursor: pagination::next(more, position),
    }))
}

/// One wait.
#[utoipa::path(get, path = "/api/tasks/{id}/waits/{wait_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("wait_id" = Uuid, Path, description = "Wait id"),
    ),
    responses(
        (status = 200, description = "The wait", body = Wait),
        (status = 404, description = "No such task or wait for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_wait(
    caller: Reader,
    Path((id, wait_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<axum::Json<Wait>> {
    let mut tx = caller.begin().await?;
    let wait = store::wait(&mut tx, id, wait_id).await?;
    tx.end_read_only();
    wait.map(axum::Json)
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no wait {wait_id}")))
}

/// Ends a wait: `resolved`, `timeout`, `cancelled` or `error`, once (409 after, also for a wait
/// whose `timeout_seconds` ran out: the wait-timeout job ended it as `timeout`). Posts
/// `[Wait resolved] <criteria> → <result>` to the task's messages (role system, type wait) and
/// updates `active_wait_ids`, `last_wait_state`, `last_wait_event_at` in the task metadata.
#[utoipa::path(patch, path = "/api/tasks/{id}/waits/{wait_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("wait_id" = Uuid, Path, description = "Wait id"),
    ),
    request_body = ResolveWait,
    responses(
        (status = 200, description = "The ended wait, with the seq of the message posted", body = Wait),
        (status = 404, description = "No such task or wait for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The wait already ended (`current_status`; `timed_out_at` when it timed out)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn resolve_wait(
    State(state): State<AppState>,
    caller: Writer,
    Path((id, wait_id)): Path<(Uuid, Uuid)>,
    Json(body): Json<ResolveWait>,
) -> ApiResult<axum::Json<Wait>> {
    waits::check_resolution(&body)?;
    let mut tx = caller.begin().await?;
    let ended = waits::resolve(&mut tx, id, wait_id, &body).await?;
    tx.commit().await?;
    summary::schedule(
        &state,
        &caller,
        id,
        ended.message_count,
        ended.summary_covers,
    );
    Ok(axum::Json(ended.wait))
}

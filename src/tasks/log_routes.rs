//! Routes of a task's history: the execution log (events), messages and context snapshots.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::model::*;
use super::service::log;
use super::store;
use crate::access::{Reader, Writer};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;

/// Appends a batch of execution-log events (the task_memory_bank log shape) in one transaction, in the order given.
///
/// Sequence numbers are per task, gap-free, and follow commit order even under concurrent appends.
#[utoipa::path(post, path = "/api/tasks/{id}/events", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewEvents,
    responses(
        (status = 201, description = "Where the batch landed", body = Appended),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid event; `field` is its path (`events[3].status`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn post_events(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewEvents>,
) -> ApiResult<Response> {
    log::check_events(&state.config.tasks, &body.events)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let appended = log::append_events(&mut tx, id, &body.events).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(appended)))
        .await
}

/// The execution log in order, filtered by status, tool or sub-task.
#[utoipa::path(get, path = "/api/tasks/{id}/events", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), EventQuery),
    responses(
        (status = 200, description = "A page of events", body = EventPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_events(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<EventQuery>,
) -> ApiResult<axum::Json<EventPage>> {
    let limit = pagination::size(query.limit, 100, 500)?;
    let after = pagination::position::<i64>(query.cursor.as_deref())?.unwrap_or(0);
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    let (items, more) = store::events(&mut tx, id, &query, after, limit).await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|e| e.seq));
    Ok(axum::Json(EventPage { items, next_cursor }))
}

/// Appends a message with any role and type (`task_update` appends agent progress messages).
///
/// A `stuck` message records its time as `last_stuck_alert_at` in the task metadata; another
/// `stuck` message within `MNEMO_TASKS_STUCK_COOLDOWN_SECS` of it is not stored and is answered
/// 200 with `suppressed: true` and `cooldown_ends_at`.
#[utoipa::path(post, path = "/api/tasks/{id}/messages", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewMessage,
    responses(
        (status = 201, description = "The message", body = Message),
        (status = 200, description = "A `stuck` message inside the cooldown after the last one: suppressed, nothing stored", body = StuckSuppressed),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn post_message(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewMessage>,
) -> ApiResult<Response> {
    let post = log::MessagePost::parse(&body)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let written = log::post_message(&mut tx, &state.config.tasks, id, &post).await?;
    let response = match written.value {
        log::Posted::Stored(message) => (StatusCode::CREATED, axum::Json(message)).into_response(),
        log::Posted::Suppressed(answer) => (StatusCode::OK, axum::Json(answer)).into_response(),
    };
    let response = idem.commit(tx, response).await?;
    written.summary.schedule(&state, &caller, id);
    Ok(response)
}

/// The task's messages (updates, lifecycle and plan notes) in order.
#[utoipa::path(get, path = "/api/tasks/{id}/messages", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), PageQuery),
    responses(
        (status = 200, description = "A page of messages", body = MessagePage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_messages(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<MessagePage>> {
    let limit = pagination::size(query.limit, 100, 500)?;
    let after = pagination::position::<i32>(query.cursor.as_deref())?.unwrap_or(0);
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    let (items, more) = store::messages(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|m| m.seq));
    Ok(axum::Json(MessagePage { items, next_cursor }))
}

/// Stores a context snapshot (the `contextHistory`).
#[utoipa::path(post, path = "/api/tasks/{id}/snapshots", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewSnapshot,
    responses(
        (status = 201, description = "The snapshot", body = Snapshot),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn post_snapshot(
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewSnapshot>,
) -> ApiResult<Response> {
    log::check_snapshot(&body)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let snapshot = log::add_snapshot(&mut tx, id, &body).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(snapshot)))
        .await
}

/// The context snapshots in the order they were taken.
#[utoipa::path(get, path = "/api/tasks/{id}/snapshots", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), PageQuery),
    responses(
        (status = 200, description = "A page of snapshots", body = SnapshotPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_snapshots(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<SnapshotPage>> {
    let limit = pagination::size(query.limit, 100, 500)?;
    let after = pagination::position::<i32>(query.cursor.as_deref())?.unwrap_or(0);
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    let (items, more) = store::snapshots(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|s| s.seq));
    Ok(axum::Json(SnapshotPage { items, next_cursor }))
}

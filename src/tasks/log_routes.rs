//! Routes of a task's history: the execution log (events), messages and context snapshots.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use uuid::Uuid;

use super::model::*;
use super::{required_text, store, stuck, summary, workspace};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
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
    let max = state.config.tasks.max_batch_events;
    if body.events.is_empty() {
        return Err(ApiError::invalid("events", "`events` must not be empty"));
    }
    if body.events.len() > max {
        return Err(ApiError::invalid(
            "events",
            format!(
                "a batch has at most {max} events; this one has {}",
                body.events.len()
            ),
        )
        .with("limit", max));
    }
    for (i, event) in body.events.iter().enumerate() {
        required_text(
            &format!("events[{i}].step_narrative"),
            &event.step_narrative,
            100_000,
        )?;
        if matches!(&event.stage, Some(v) if !(v.is_number() || v.is_string() || v.is_null())) {
            return Err(ApiError::invalid(
                format!("events[{i}].stage"),
                "`stage` is a number or a string",
            ));
        }
        if event.duration_ms.is_some_and(|d| d < 0) {
            return Err(ApiError::invalid(
                format!("events[{i}].duration_ms"),
                "`duration_ms` must not be negative",
            ));
        }
    }
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let (first_seq, last_seq) = store::append_events(&mut tx, id, &body.events)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    let appended = Appended {
        count: body.events.len(),
        first_seq,
        last_seq,
    };
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
    let content = required_text("content", &body.content, 100_000)?;
    let role = body.role.unwrap_or(Role::Agent);
    let msg_type = body.msg_type.unwrap_or(MsgType::Text);
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    // A stuck alert takes the task's row lock first, so two alerts at once see each other.
    let stuck_metadata = if msg_type == MsgType::Stuck {
        let (metadata, _) = workspace::store::metadata_for_update(&mut tx, id)
            .await?
            .ok_or_else(|| store::task_not_found(id))?;
        let cooldown = state.config.tasks.stuck_cooldown_secs;
        let now = store::now(&mut tx).await?;
        if let Some((last, ends)) = stuck::suppressed_until(&metadata, now, cooldown) {
            let answer = StuckSuppressed {
                suppressed: true,
                last_stuck_alert_at: last,
                cooldown_ends_at: ends,
                cooldown_seconds: cooldown,
            };
            return idem.commit(tx, (StatusCode::OK, axum::Json(answer))).await;
        }
        Some(metadata)
    } else {
        None
    };
    let (seq, covered, created_at) = store::append_message(&mut tx, id, role, msg_type, content)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    if let Some(mut metadata) = stuck_metadata {
        stuck::record(&mut metadata, created_at);
        workspace::store::save_metadata(&mut tx, id, metadata).await?;
    }
    let message = Message {
        seq,
        role,
        msg_type,
        content: content.to_owned(),
        created_at,
    };
    let response = idem
        .commit(tx, (StatusCode::CREATED, axum::Json(message)))
        .await?;
    summary::schedule(&state, &caller, id, seq, covered);
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
    required_text("label", &body.label, 200)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let snapshot = store::append_snapshot(&mut tx, id, &body)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
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

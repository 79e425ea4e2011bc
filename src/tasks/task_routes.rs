//! Routes of a task itself: register, list, read, change (status, phase, messages, questions
//! that only ask), the "where was I?" query, delete.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::model::*;
use super::service::{self, Written, tasks};
use super::store;
use crate::access::{Caller, Reader, Writer};
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;

/// Registers a task (the `task_register` tool).
///
/// With a plan, version 1 is stored and the task starts in `PLANNING_COMPLETED` with
/// `plan_generated_at` set; without one it starts in `RECEIVED`. Status is `active`.
#[utoipa::path(post, path = "/api/tasks", tag = "tasks",
    params(Idempotency),
    request_body = RegisterTask,
    responses(
        (status = 201, description = "The new task", body = TaskDetail),
        (status = 422, description = "Invalid field (malformed plan: `field` is the JSON path)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn register_task(
    State(state): State<AppState>,
    caller: Writer,
    idem: Idempotency,
    Json(body): Json<RegisterTask>,
) -> ApiResult<Response> {
    let registration = tasks::Registration::parse(&state.config.tasks, &body)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let detail = tasks::register(&mut tx, &registration).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(detail)))
        .await
}

/// Lists the caller's tasks, newest first, filtered by status and phase.
#[utoipa::path(get, path = "/api/tasks", tag = "tasks",
    params(TaskQuery),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
    ),
)]
pub async fn list_tasks(
    caller: Reader,
    Query(query): Query<TaskQuery>,
) -> ApiResult<axum::Json<TaskPage>> {
    let limit = pagination::size(query.limit, 50, 200)?;
    let before = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    let (items, more) = store::list_tasks(
        &mut tx,
        query.status,
        query.phase,
        query.include_archived.unwrap_or(false),
        before,
        limit,
    )
    .await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|t| t.id));
    Ok(axum::Json(TaskPage { items, next_cursor }))
}

/// Deletes a task and everything under it: plans and their items, actions and their logs, the
/// execution log, messages, snapshots, steps, artifacts, waits and the configuration snapshot.
#[utoipa::path(delete, path = "/api/tasks/{id}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete_task(caller: Writer, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    let mut tx = caller.begin().await?;
    store::delete_task(&mut tx, id).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A task with its timestamps, active plan (with item status) and counts.
#[utoipa::path(get, path = "/api/tasks/{id}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task", body = TaskDetail),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_task(caller: Reader, Path(id): Path<Uuid>) -> ApiResult<axum::Json<TaskDetail>> {
    let mut tx = caller.begin().await?;
    let row = store::get_task(&mut tx, id).await?;
    let detail = service::detail(&mut tx, &row).await?;
    tx.end_read_only();
    Ok(axum::Json(detail))
}

/// Changes phase and/or status, final answer, error summary, name or metadata.
///
/// Phase and status follow the state machine: an illegal move is 409 listing the allowed ones
/// (`allowed`). A phase change sets the timestamps and the coarse status; `status: completed` or
/// `failed` moves the phase to `COMPLETED_SUCCESS` or the matching failure. Metadata is merged key
/// by key; a `null` value removes a key.
#[utoipa::path(patch, path = "/api/tasks/{id}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = PatchTask,
    responses(
        (status = 200, description = "The updated task", body = TaskDetail),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Illegal transition; `allowed` lists the legal ones", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch_task(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    Json(body): Json<PatchTask>,
) -> ApiResult<axum::Json<TaskDetail>> {
    let mut tx = caller.begin().await?;
    let written = tasks::patch(&mut tx, id, &body).await?;
    tx.commit().await?;
    written.summary.schedule(&state, &caller, id);
    Ok(axum::Json(written.value))
}

/// The `task_update` tool: append a progress message, apply a status, and/or ask a question.
///
/// In that order, so a question sees the message it came with. A status follows the state machine
/// (409 otherwise); failing a task without an error summary records one from the failing step and
/// the message. The running summary is refreshed in the background every few messages. With an
/// `Idempotency-Key` the answer to a query is part of the stored response.
#[utoipa::path(post, path = "/api/tasks/{id}/update", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = UpdateTask,
    responses(
        (status = 200, description = "What was done, and the answer when a query was asked", body = UpdateResult),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Illegal status transition", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn update_task(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<UpdateTask>,
) -> ApiResult<Response> {
    let update = tasks::Update::parse(id, &body)?;
    let caller = Caller::new(state.db.clone(), principal, update.scope())?;
    if !idem.is_active() {
        let result = tasks::update(&state, &caller, id, &update).await?;
        return Ok(axum::Json(result).into_response());
    }
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let Written { value, summary } = tasks::update_in(&state, &mut tx, id, &update).await?;
    let response = idem.commit(tx, axum::Json(value)).await?;
    summary.schedule(&state, &caller, id);
    Ok(response)
}

/// "Where was I?": completed steps, the current and next one, failures, key details and the last
/// updates, exact and without a model.
///
/// Steps not marked explicitly count as completed when an update says they are done and names
/// them (by ordinal, "Step 3 done", or by the words of their title); they are listed in
/// `digest.inferred` and the answer says so.
#[utoipa::path(post, path = "/api/tasks/{id}/query", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = QueryTask,
    responses(
        (status = 200, description = "The answer and the digest it rests on", body = QueryAnswer),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn query_task(
    State(state): State<AppState>,
    caller: Reader,
    Path(id): Path<Uuid>,
    Json(body): Json<QueryTask>,
) -> ApiResult<axum::Json<QueryAnswer>> {
    let query = service::required_text("query", &body.query, 10_000)?;
    let (answer, _) = tasks::answer_query(&state, &caller, id, query).await?;
    Ok(axum::Json(answer))
}

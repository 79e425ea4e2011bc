//! Routes of a task's plan: replans (versions), plan items, their actions and the actions' logs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use uuid::Uuid;

use super::model::*;
use super::service::{no_step, plans, required_text};
use super::store;
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;

/// Adds plan version N+1 (a replan); earlier versions are kept.
///
/// Each new step whose title matches a step of the previous version takes over its status,
/// timestamps and duration (`rebased_from`); the others start pending. The phase moves to
/// `PLANNING_COMPLETED` (before execution) or `EXECUTING_REPLAN` (during it). A finished task
/// cannot be replanned (409).
#[utoipa::path(put, path = "/api/tasks/{id}/plan", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = PutPlan,
    responses(
        (status = 200, description = "The new plan version with its items", body = Plan),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task is finished", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed plan; `field` is the JSON path (`plan[1].steps[0].toolName`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_plan(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<PutPlan>,
) -> ApiResult<Response> {
    let replan = plans::Replan::parse(&state.config.tasks, &body)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let written = plans::replan(&mut tx, id, &replan).await?;
    let response = idem.commit(tx, axum::Json(written.value)).await?;
    written.summary.schedule(&state, &caller, id);
    Ok(response)
}

/// Every plan version of a task, oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/plans", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The versions", body = PlanVersions),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_plans(
    caller: Reader,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<PlanVersions>> {
    let mut tx = caller.begin().await?;
    let row = store::get_task(&mut tx, id).await?;
    let versions = store::plan_versions(&mut tx, id, row.plan_version).await?;
    tx.end_read_only();
    Ok(axum::Json(PlanVersions { versions }))
}

/// One plan version with its items as they stood when it was replaced (or now, if active).
#[utoipa::path(get, path = "/api/tasks/{id}/plans/{version}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("version" = i32, Path, description = "Plan version (1-based)")),
    responses(
        (status = 200, description = "The plan version", body = Plan),
        (status = 404, description = "No such task or version", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_plan(
    caller: Reader,
    Path((id, version)): Path<(Uuid, i32)>,
) -> ApiResult<axum::Json<Plan>> {
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    let plan = store::plan(&mut tx, id, version)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no plan v{version}")))?;
    tx.end_read_only();
    Ok(axum::Json(plan))
}

/// Sets the status of step `ordinal` of the active plan; `started_at`, `completed_at` and
/// `duration_seconds` follow. The first step to start moves a task that has not begun executing
/// to `EXECUTING_PLAN`.
#[utoipa::path(patch, path = "/api/tasks/{id}/items/{ordinal}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("ordinal" = i32, Path, description = "Step number, 1-based")),
    request_body = PatchItem,
    responses(
        (status = 200, description = "The item", body = PlanItem),
        (status = 404, description = "No such task, or no such step in the active plan", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid status", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch_item(
    State(state): State<AppState>,
    caller: Writer,
    Path((id, ordinal)): Path<(Uuid, i32)>,
    Json(body): Json<PatchItem>,
) -> ApiResult<axum::Json<PlanItem>> {
    let mut tx = caller.begin().await?;
    let written = plans::set_step_status(&mut tx, id, ordinal, body.status).await?;
    tx.commit().await?;
    written.summary.schedule(&state, &caller, id);
    Ok(axum::Json(written.value))
}

/// Records an action taken for step `ordinal` of the active plan.
#[utoipa::path(post, path = "/api/tasks/{id}/items/{ordinal}/actions", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("ordinal" = i32, Path, description = "Step number, 1-based"), Idempotency),
    request_body = NewAction,
    responses(
        (status = 201, description = "The action", body = Action),
        (status = 404, description = "No such task or step", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn post_action(
    caller: Writer,
    Path((id, ordinal)): Path<(Uuid, i32)>,
    idem: Idempotency,
    Json(body): Json<NewAction>,
) -> ApiResult<Response> {
    plans::check_action(&body)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let action = plans::add_action(&mut tx, id, ordinal, &body).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(action)))
        .await
}

/// The actions of step `ordinal` of the active plan, oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/items/{ordinal}/actions", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("ordinal" = i32, Path, description = "Step number, 1-based"), PageQuery),
    responses(
        (status = 200, description = "A page of actions", body = ActionPage),
        (status = 404, description = "No such task or step", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_actions(
    caller: Reader,
    Path((id, ordinal)): Path<(Uuid, i32)>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<ActionPage>> {
    let limit = pagination::size(query.limit, 100, 500)?;
    let after = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    let row = store::get_task(&mut tx, id).await?;
    let counts = store::item_counts(&mut tx, id, row.plan_version).await?;
    if ordinal < 1 || i64::from(ordinal) > counts.items {
        return Err(no_step(ordinal, &row));
    }
    let (items, more) =
        store::actions(&mut tx, id, row.plan_version, ordinal, after, limit).await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|a| a.id));
    Ok(axum::Json(ActionPage { items, next_cursor }))
}

/// Updates an action's status, summary or output.
#[utoipa::path(patch, path = "/api/tasks/{id}/actions/{action_id}", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("action_id" = Uuid, Path, description = "Action id")),
    request_body = PatchAction,
    responses(
        (status = 200, description = "The action", body = Action),
        (status = 404, description = "No such task or action", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch_action(
    caller: Writer,
    Path((id, action_id)): Path<(Uuid, Uuid)>,
    Json(body): Json<PatchAction>,
) -> ApiResult<axum::Json<Action>> {
    if let Some(summary) = &body.summary {
        required_text("summary", summary, 10_000)?;
    }
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    let action = store::patch_action(&mut tx, id, action_id, &body)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no action {action_id}")))?;
    tx.commit().await?;
    Ok(axum::Json(action))
}

/// Appends a log entry to an action.
#[utoipa::path(post, path = "/api/tasks/{id}/actions/{action_id}/logs", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("action_id" = Uuid, Path, description = "Action id"), Idempotency),
    request_body = NewActionLog,
    responses(
        (status = 201, description = "The log entry", body = ActionLog),
        (status = 404, description = "No such task or action", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn post_action_log(
    caller: Writer,
    Path((id, action_id)): Path<(Uuid, Uuid)>,
    idem: Idempotency,
    Json(body): Json<NewActionLog>,
) -> ApiResult<Response> {
    required_text("log_type", &body.log_type, 100)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    store::get_task(&mut tx, id).await?;
    let log = store::insert_action_log(&mut tx, id, action_id, &body)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no action {action_id}")))?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(log)))
        .await
}

/// An action's log entries, oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/actions/{action_id}/logs", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), ("action_id" = Uuid, Path, description = "Action id"), PageQuery),
    responses(
        (status = 200, description = "A page of log entries", body = ActionLogPage),
        (status = 404, description = "No such task or action", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_action_logs(
    caller: Reader,
    Path((id, action_id)): Path<(Uuid, Uuid)>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<ActionLogPage>> {
    let limit = pagination::size(query.limit, 100, 500)?;
    let after = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    store::get_task(&mut tx, id).await?;
    if !store::action_exists(&mut tx, id, action_id).await? {
        return Err(ApiError::not_found(format!(
            "task {id} has no action {action_id}"
        )));
    }
    let (items, more) = store::action_logs(&mut tx, action_id, after, limit).await?;
    tx.end_read_only();
    let next_cursor = pagination::next(more, items.last().map(|l| l.id));
    Ok(axum::Json(ActionLogPage { items, next_cursor }))
}

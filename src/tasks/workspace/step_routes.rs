//! Routes of a task's steps (what each agent did, in parts) and of its configuration snapshot.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use uuid::Uuid;

use super::model::*;
use super::{steps, store};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;

/// Appends a step (the TaskStep) to the task's history.
///
/// Parts are `type`-tagged: `text`, `tool_call`, `tool_result` (must answer a `tool_call` of this
/// task, in this step or an earlier one, else 422), `artifact` (must name an artifact of this
/// task; `uri` and `mime_type` are filled in). Sending a step with an existing `step_id` again is
/// a no-op answered 200 when it is the same step, 409 otherwise.
#[utoipa::path(post, path = "/api/tasks/{id}/steps", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewStep,
    responses(
        (status = 201, description = "The stored step", body = Step),
        (status = 200, description = "The same step was already stored", body = Step),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another step has this step_id", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid part (`field` is its path, e.g. `parts[2].tool_call_id`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn append_step(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewStep>,
) -> ApiResult<Response> {
    let step = steps::StepPost::parse(id, body, state.config.tasks.step_max_parts)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let response = match steps::append(&mut tx, id, step).await? {
        steps::Appended::Stored(step) => (StatusCode::CREATED, axum::Json(step)),
        steps::Appended::Retried(step) => (StatusCode::OK, axum::Json(step)),
    };
    idem.commit(tx, response).await
}

/// The task's steps in order, a page at a time, or the last `recent` steps (the "recent N
/// steps" context compilation).
#[utoipa::path(get, path = "/api/tasks/{id}/steps", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), StepQuery),
    responses(
        (status = 200, description = "A page of steps, oldest first", body = StepPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_steps(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<StepQuery>,
) -> ApiResult<axum::Json<StepPage>> {
    let listing = steps::Listing::parse(&query)?;
    let mut tx = caller.begin().await?;
    let page = steps::list(&mut tx, id, listing).await?;
    tx.end_read_only();
    Ok(axum::Json(page))
}

/// Stores the task's configuration snapshot (the `team.json`), once.
///
/// 201 the first time; the same snapshot again is 200; a different one is 409.
#[utoipa::path(put, path = "/api/tasks/{id}/config", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body(content = Object, description = "Any JSON object: the team, agents, models, tools the task started with"),
    responses(
        (status = 201, description = "Stored", body = TaskConfigSnapshot),
        (status = 200, description = "The same snapshot was already stored", body = TaskConfigSnapshot),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A different snapshot is already stored", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a JSON object", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_config(
    caller: Writer,
    Path(id): Path<Uuid>,
    Json(body): Json<Value>,
) -> ApiResult<(StatusCode, axum::Json<TaskConfigSnapshot>)> {
    if !body.is_object() {
        return Err(ApiError::invalid(
            "",
            "the configuration snapshot must be a JSON object",
        ));
    }
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (snapshot, created) = store::put_config(&mut tx, id, &body, None).await?;
    if created {
        store::touch_task(&mut tx, id).await?;
    }
    tx.commit().await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(snapshot)))
}

/// The task's configuration snapshot.
#[utoipa::path(get, path = "/api/tasks/{id}/config", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The snapshot", body = TaskConfigSnapshot),
        (status = 404, description = "No such task, or no snapshot stored", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_config(
    caller: Reader,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<TaskConfigSnapshot>> {
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let snapshot = store::get_config(&mut tx, id).await?;
    tx.end_read_only();
    snapshot
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no configuration snapshot")))
}

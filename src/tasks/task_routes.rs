//! Routes of a task itself: register, list, read, change (status, phase, messages, questions
//! that only ask), the "where was I?" query, delete.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::lifecycle::{Phase, Status};
use super::model::*;
use super::store::{TaskRow, TaskWrite};
use super::{
    detail, digest, illegal, lifecycle, no_change, note_change, plan, plan_error, required_text,
    store, summary, write_for,
};
use crate::access::{Caller, Reader, Writer};
use crate::auth::{Principal, Scope};
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
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
    let name = required_text("name", &body.name, 1000)?;
    let steps = body
        .plan
        .as_ref()
        .map(|p| plan::parse(p, "plan", state.config.tasks.max_plan_steps))
        .transpose()
        .map_err(plan_error)?;
    let metadata = Value::Object(body.metadata.clone().unwrap_or_default());
    let id = Uuid::now_v7();
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let mut row = store::insert_task(
        &mut tx,
        id,
        name,
        body.original_user_task.as_deref(),
        &metadata,
    )
    .await?;
    if let (Some(plan_json), Some(steps)) = (&body.plan, &steps) {
        store::insert_plan(&mut tx, id, 1, plan_json, None, steps, &[]).await?;
        let change = lifecycle::apply(
            row.phase(),
            row.status(),
            Some(Phase::PlanningCompleted),
            None,
        )
        .map_err(illegal)?;
        let write = TaskWrite {
            plan_version: Some(1),
            ..write_for(&row, change)
        };
        row = store::save_task(&mut tx, id, &write).await?;
    }
    let detail = detail(&mut tx, &row).await?;
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
    let detail = detail(&mut tx, &row).await?;
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
    let name = body
        .name
        .as_deref()
        .map(|n| required_text("name", n, 1000).map(str::to_owned))
        .transpose()?;
    let mut tx = caller.begin().await?;
    let row = store::lock_task(&mut tx, id).await?;
    let change =
        lifecycle::apply(row.phase(), row.status(), body.phase, body.status).map_err(illegal)?;
    let metadata = body.metadata.as_ref().map(|patch| {
        let mut merged: Map<String, Value> = row.metadata.as_object().cloned().unwrap_or_default();
        for (key, value) in patch {
            if value.is_null() {
                merged.remove(key);
            } else {
                merged.insert(key.clone(), value.clone());
            }
        }
        Value::Object(merged)
    });
    let write = TaskWrite {
        name,
        final_answer: body.final_answer.clone(),
        error_summary: body
            .error_summary
            .as_ref()
            .and_then(|e| serde_json::to_value(e).ok()),
        metadata,
        ..write_for(&row, change)
    };
    let saved = store::save_task(&mut tx, id, &write).await?;
    let appended = note_change(&mut tx, &row, &change).await?;
    let saved = if appended.is_some() {
        store::get_task(&mut tx, id).await?
    } else {
        saved
    };
    let detail = detail(&mut tx, &saved).await?;
    tx.commit().await?;
    if let Some((seq, covered)) = appended {
        summary::schedule(&state, &caller, id, seq, covered);
    }
    Ok(axum::Json(detail))
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
    if body.task_id.is_some_and(|t| t != id) {
        return Err(ApiError::invalid(
            "task_id",
            "`task_id` differs from the task id in the path",
        ));
    }
    if body.message.is_none() && body.status.is_none() && body.query.is_none() {
        return Err(ApiError::invalid(
            "",
            "give at least one of `message`, `status` and `query`",
        ));
    }
    let message = body
        .message
        .as_deref()
        .map(|m| required_text("message", m, 100_000))
        .transpose()?;
    let query = body
        .query
        .as_deref()
        .map(|q| required_text("query", q, 10_000))
        .transpose()?;
    let writes = message.is_some() || body.status.is_some();
    let caller = Caller::new(
        state.db.clone(),
        principal,
        if writes { Scope::Write } else { Scope::Read },
    )?;
    if !writes && !idem.is_active() {
        let Some(query) = query else {
            return Err(ApiError::invalid(
                "",
                "give at least one of `message`, `status` and `query`",
            ));
        };
        let (answer, row) = answer_query(&state, &caller, id, query).await?;
        return Ok(axum::Json(update_result(&row, None, Some(answer))).into_response());
    }
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let mut message_seq = None;
    let mut latest = None;
    if let Some(status) = body.status {
        let row = store::lock_task(&mut tx, id).await?;
        let change =
            lifecycle::apply(row.phase(), row.status(), None, Some(status)).map_err(illegal)?;
        if change != no_change(&row) {
            let mut write = write_for(&row, change);
            if change.status == Status::Failed && row.error_summary.is_none() {
                let failing = store::failing_item(&mut tx, id, row.plan_version).await?;
                let summary = ErrorSummary {
                    failed_at_stage: failing
                        .as_ref()
                        .map(|(ordinal, stage, _)| json!(stage.unwrap_or(*ordinal))),
                    failed_step_narrative: failing.map(|(_, _, title)| title),
                    error_message: message.map(str::to_owned),
                };
                write.error_summary = serde_json::to_value(summary).ok();
            }
            store::save_task(&mut tx, id, &write).await?;
            latest = note_change(&mut tx, &row, &change).await?;
        }
    }
    if let Some(message) = message {
        let appended = store::append_message(&mut tx, id, Role::Agent, MsgType::Progress, message)
            .await?
            .ok_or_else(|| store::task_not_found(id))?;
        message_seq = Some(appended.0);
        latest = Some((appended.0, appended.1));
    }
    let row = store::get_task(&mut tx, id).await?;
    let response = if idem.is_active() {
        // The stored response must hold the answer, so it is found in this transaction (a
        // configured model is asked while it is open).
        let answer = match query {
            Some(query) => Some(answer_from(&state, &mut tx, &row, query).await?),
            None => None,
        };
        let result = update_result(&row, message_seq, answer);
        idem.commit(tx, axum::Json(result)).await?
    } else {
        tx.commit().await?;
        let (answer, row) = match query {
            Some(query) => {
                let (answer, row) = answer_query(&state, &caller, id, query).await?;
                (Some(answer), row)
            }
            None => (None, row),
        };
        axum::Json(update_result(&row, message_seq, answer)).into_response()
    };
    if let Some((seq, covered)) = latest {
        summary::schedule(&state, &caller, id, seq, covered);
    }
    Ok(response)
}

fn update_result(
    row: &TaskRow,
    message_seq: Option<i32>,
    answer: Option<QueryAnswer>,
) -> UpdateResult {
    let (answer, source, model_error, digest) = match answer {
        Some(a) => (
            Some(a.answer),
            Some(a.source),
            a.model_error,
            Some(a.digest),
        ),
        None => (None, None, None, None),
    };
    UpdateResult {
        task_id: row.id,
        status: row.status(),
        phase: row.phase(),
        message_seq,
        answer,
        source,
        model_error,
        digest,
    }
}

/// Answers `query` about task `id`: the exact digest, and its answer in a few sentences; with a
/// model configured, the model's answer grounded on the running summary and the messages since.
/// The transaction ends before the model is asked.
async fn answer_query(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    query: &str,
) -> ApiResult<(QueryAnswer, TaskRow)> {
    let mut tx = caller.begin().await?;
    let row = store::get_task(&mut tx, id).await?;
    let loaded = summary::load_digest(&mut tx, &row, state.config.tasks.digest_recent).await?;
    tx.end_read_only();
    Ok((ask(state, &loaded, &row, query).await, row))
}

/// [`answer_query`] for a task already read in `tx`, which stays open while the model is asked.
async fn answer_from(
    state: &AppState,
    tx: &mut Scoped,
    row: &TaskRow,
    query: &str,
) -> ApiResult<QueryAnswer> {
    let loaded = summary::load_digest(tx, row, state.config.tasks.digest_recent).await?;
    Ok(ask(state, &loaded, row, query).await)
}

/// The digest's answer, or the model's when one is configured and answers.
async fn ask(
    state: &AppState,
    loaded: &summary::Loaded,
    row: &TaskRow,
    query: &str,
) -> QueryAnswer {
    let mut answer = QueryAnswer {
        answer: digest::answer(&loaded.digest),
        source: "digest".into(),
        model_error: None,
        digest: loaded.digest.clone(),
    };
    if let Some(llm) = &state.llm {
        match summary::ask_model(llm, loaded, row, query).await {
            Ok(text) => {
                answer.answer = text;
                answer.source = "model".into();
            }
            Err(err) => {
                tracing::warn!(task_id = %row.id, error = %err, "model answer failed; answering from the digest");
                answer.model_error = Some(err);
            }
        }
    }
    answer
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
    let query = required_text("query", &body.query, 10_000)?;
    let (answer, _) = answer_query(&state, &caller, id, query).await?;
    Ok(axum::Json(answer))
}

//! Task memory: tasks, plans and replans, step status, execution log, snapshots and "where was I?".
//!
//! Files: `model.rs` (request and response types), `lifecycle.rs` (the phase/status state machine),
//! `plan.rs` (plan forms and re-basing), `digest.rs` (the exact "where was I?"), `store.rs` (SQL),
//! `summary.rs` (the background running summary), `stuck.rs` (the stuck-alert cooldown). Handlers
//! here parse, run one [`Scoped`] transaction, and map the result.

pub mod digest;
pub mod lifecycle;
pub mod model;
pub mod plan;
pub mod prompt;
pub mod store;
pub mod stuck;
pub mod summary;
pub mod workspace;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use clap::Args;
use serde_json::{Map, Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::access::{Caller, Reader, Writer};
use crate::auth::{Principal, Scope};
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;
use lifecycle::{Change, Illegal, Phase, Stamps, Status};
use model::*;
use store::{TaskRow, TaskWrite};

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args)]
pub struct TasksConfig {
    /// Most events one `POST /api/tasks/{id}/events` may carry.
    #[arg(
        long = "tasks-max-batch-events",
        env = "MNEMO_TASKS_MAX_BATCH_EVENTS",
        default_value_t = 1000
    )]
    pub max_batch_events: usize,
    /// Most steps a plan version may have.
    #[arg(
        long = "tasks-max-plan-steps",
        env = "MNEMO_TASKS_MAX_PLAN_STEPS",
        default_value_t = 500
    )]
    pub max_plan_steps: usize,
    /// Refresh a task's running summary in the background every this many messages (0: never).
    #[arg(
        long = "tasks-summary-every",
        env = "MNEMO_TASKS_SUMMARY_EVERY",
        default_value_t = 5
    )]
    pub summary_every: u32,
    /// How many of the last updates the "where was I?" digest quotes.
    #[arg(
        long = "tasks-digest-recent",
        env = "MNEMO_TASKS_DIGEST_RECENT",
        default_value_t = 5
    )]
    pub digest_recent: usize,
    /// Largest artifact, in bytes.
    #[arg(
        long = "tasks-artifact-max-bytes",
        env = "MNEMO_TASKS_ARTIFACT_MAX_BYTES",
        default_value_t = 64 * 1024 * 1024
    )]
    pub artifact_max_bytes: usize,
    /// Largest import archive, in bytes, compressed and unpacked.
    #[arg(
        long = "tasks-import-max-bytes",
        env = "MNEMO_TASKS_IMPORT_MAX_BYTES",
        default_value_t = 256 * 1024 * 1024
    )]
    pub import_max_bytes: usize,
    /// Most members an import archive may have.
    #[arg(
        long = "tasks-import-max-members",
        env = "MNEMO_TASKS_IMPORT_MAX_MEMBERS",
        default_value_t = 10_000
    )]
    pub import_max_members: usize,
    /// Most parts one step may have.
    #[arg(
        long = "tasks-step-max-parts",
        env = "MNEMO_TASKS_STEP_MAX_PARTS",
        default_value_t = 200
    )]
    pub step_max_parts: usize,
    /// An active task with no update for this many seconds is paused.
    #[arg(
        long = "tasks-pause-after-secs",
        env = "MNEMO_TASKS_PAUSE_AFTER_SECS",
        default_value_t = 24 * 3600
    )]
    pub pause_after_secs: u64,
    /// A completed task this many seconds after completion is archived.
    #[arg(
        long = "tasks-archive-after-secs",
        env = "MNEMO_TASKS_ARCHIVE_AFTER_SECS",
        default_value_t = 7 * 24 * 3600
    )]
    pub archive_after_secs: u64,
    /// Seconds between lifecycle sweeps (0: no sweeper in this process).
    #[arg(
        long = "tasks-sweep-interval-secs",
        env = "MNEMO_TASKS_SWEEP_INTERVAL_SECS",
        default_value_t = 300
    )]
    pub sweep_interval_secs: u64,
    /// Seconds between rounds of the wait-timeout job, which ends watching waits whose
    /// `timeout_seconds` ran out (0: no such job in this process).
    #[arg(
        long = "tasks-wait-sweep-interval-secs",
        env = "MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS",
        default_value_t = 10
    )]
    pub wait_sweep_interval_secs: u64,
    /// After a `stuck` message, further `stuck` messages of the task within this many seconds
    /// are suppressed (0: every one is stored).
    #[arg(
        long = "tasks-stuck-cooldown-secs",
        env = "MNEMO_TASKS_STUCK_COOLDOWN_SECS",
        default_value_t = 300
    )]
    pub stuck_cooldown_secs: u64,
}

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            max_batch_events: 1000,
            max_plan_steps: 500,
            summary_every: 5,
            digest_recent: 5,
            artifact_max_bytes: 64 * 1024 * 1024,
            import_max_bytes: 256 * 1024 * 1024,
            import_max_members: 10_000,
            step_max_parts: 200,
            pause_after_secs: 24 * 3600,
            archive_after_secs: 7 * 24 * 3600,
            sweep_interval_secs: 300,
            wait_sweep_interval_secs: 10,
            stuck_cooldown_secs: 300,
        }
    }
}

impl TasksConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        // 11 bind parameters per event; PostgreSQL allows 65535 per statement.
        if self.max_batch_events == 0 || self.max_batch_events > 5000 {
            return Err("MNEMO_TASKS_MAX_BATCH_EVENTS must be between 1 and 5000".into());
        }
        if self.max_plan_steps == 0 || self.max_plan_steps > 5000 {
            return Err("MNEMO_TASKS_MAX_PLAN_STEPS must be between 1 and 5000".into());
        }
        workspace::check_config(self)
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register_task, list_tasks))
        .routes(routes!(get_task, patch_task, delete_task))
        .routes(routes!(update_task))
        .routes(routes!(query_task))
        .routes(routes!(put_plan))
        .routes(routes!(list_plans))
        .routes(routes!(get_plan))
        .routes(routes!(patch_item))
        .routes(routes!(post_action, list_actions))
        .routes(routes!(patch_action))
        .routes(routes!(post_action_log, list_action_logs))
        .routes(routes!(post_events, list_events))
        .routes(routes!(post_message, list_messages))
        .routes(routes!(post_snapshot, list_snapshots))
        .merge(workspace::router())
}

fn illegal(err: Illegal) -> ApiError {
    ApiError::conflict(err.detail())
        .with("field", err.field)
        .with("current", err.from)
        .with("allowed", err.allowed)
}

fn plan_error(err: plan::PlanError) -> ApiError {
    let detail = format!("invalid `{}`: {}", err.path, err.detail);
    ApiError::invalid(err.path, detail)
}

/// A required, non-blank text field of at most `max` characters.
fn required_text<'a>(field: &str, text: &'a str, max: usize) -> ApiResult<&'a str> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not be empty"),
        ));
    }
    if trimmed.chars().count() > max {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` is longer than {max} characters"),
        ));
    }
    Ok(trimmed)
}

fn no_step(ordinal: i32, row: &TaskRow) -> ApiError {
    if row.plan_version == 0 {
        ApiError::not_found(format!("task {} has no plan yet", row.id))
    } else {
        ApiError::not_found(format!(
            "plan v{} of task {} has no step {ordinal}",
            row.plan_version, row.id
        ))
    }
}

fn no_change(row: &TaskRow) -> Change {
    Change {
        phase: row.phase(),
        status: row.status(),
        stamps: Stamps::default(),
    }
}

fn write_for(row: &TaskRow, change: Change) -> TaskWrite {
    TaskWrite {
        phase: change.phase,
        status: change.status,
        stamps: change.stamps,
        ..TaskWrite::from_row(row)
    }
}

/// The lifecycle message recorded when a change moves the phase or status.
fn lifecycle_note(row: &TaskRow, change: &Change) -> Option<String> {
    let mut parts = Vec::new();
    if change.status != row.status() {
        parts.push(format!(
            "status: {} → {}",
            row.status().as_str(),
            change.status.as_str()
        ));
    }
    if change.phase != row.phase() {
        parts.push(format!(
            "phase: {} → {}",
            row.phase().as_str(),
            change.phase.as_str()
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

async fn detail(tx: &mut Scoped, row: &TaskRow) -> ApiResult<TaskDetail> {
    let plan = if row.plan_version > 0 {
        store::plan(&mut *tx, row.id, row.plan_version).await?
    } else {
        None
    };
    let mut counts = store::item_counts(&mut *tx, row.id, row.plan_version).await?;
    counts.plan_versions = row.plan_version;
    counts.events = row.event_count;
    counts.messages = row.message_count;
    counts.snapshots = row.snapshot_count;
    Ok(TaskDetail {
        task: row.to_task(),
        plan,
        counts,
    })
}

/// Records a lifecycle message and schedules the summary when the change moved anything.
async fn note_change(
    tx: &mut Scoped,
    row: &TaskRow,
    change: &Change,
) -> ApiResult<Option<(i32, i32)>> {
    match lifecycle_note(row, change) {
        Some(note) => {
            Ok(
                store::append_message(tx, row.id, Role::System, MsgType::Lifecycle, &note)
                    .await?
                    .map(|(seq, covered, _)| (seq, covered)),
            )
        }
        None => Ok(None),
    }
}

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
    let next_cursor = more
        .then(|| items.last().map(|t| pagination::encode(&t.id)))
        .flatten();
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
    // Every table under a task references it with ON DELETE CASCADE.
    let deleted = sqlx::query(
        "DELETE FROM tasks
         WHERE tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')
           AND id = $1",
    )
    .bind(id)
    .execute(&mut tx)
    .await?
    .rows_affected();
    if deleted == 0 {
        return Err(ApiError::not_found(format!("no task {id}")));
    }
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
    let steps =
        plan::parse(&body.plan, "plan", state.config.tasks.max_plan_steps).map_err(plan_error)?;
    let reason = body
        .reason
        .as_deref()
        .map(|r| required_text("reason", r, 10_000))
        .transpose()?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let row = store::lock_task(&mut tx, id).await?;
    let target = lifecycle::on_plan(row.phase(), row.status()).map_err(illegal)?;
    let previous = if row.plan_version > 0 {
        store::previous_items(&mut tx, id, row.plan_version).await?
    } else {
        Vec::new()
    };
    let carried = plan::rebase(&steps, &previous);
    let version = row.plan_version + 1;
    store::insert_plan(&mut tx, id, version, &body.plan, reason, &steps, &carried).await?;
    let change = match target {
        Some(phase) => {
            lifecycle::apply(row.phase(), row.status(), Some(phase), None).map_err(illegal)?
        }
        None => no_change(&row),
    };
    let write = TaskWrite {
        plan_version: Some(version),
        ..write_for(&row, change)
    };
    store::save_task(&mut tx, id, &write).await?;
    let kept = carried.iter().filter(|c| c.is_some()).count();
    let note = format!(
        "plan v{version}{}: {} steps, {kept} carried over from v{}{}",
        if version > 1 { " (replan)" } else { "" },
        steps.len(),
        row.plan_version,
        reason.map(|r| format!("; reason: {r}")).unwrap_or_default()
    );
    let mut latest = store::append_message(&mut tx, id, Role::System, MsgType::Plan, &note)
        .await?
        .map(|(seq, covered, _)| (seq, covered));
    if let Some(appended) = note_change(&mut tx, &row, &change).await? {
        latest = Some(appended);
    }
    let plan = store::plan(&mut tx, id, version)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    let response = idem.commit(tx, axum::Json(plan)).await?;
    if let Some((seq, covered)) = latest {
        summary::schedule(&state, &caller, id, seq, covered);
    }
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
    let row = store::lock_task(&mut tx, id).await?;
    let item = store::set_item_status(&mut tx, id, row.plan_version, ordinal, body.status)
        .await?
        .ok_or_else(|| no_step(ordinal, &row))?;
    let change = match lifecycle::on_item_progress(row.phase()) {
        Some(phase) if body.status != ItemStatus::Pending => {
            lifecycle::apply(row.phase(), row.status(), Some(phase), None)
                .unwrap_or_else(|_| no_change(&row))
        }
        _ => no_change(&row),
    };
    store::save_task(&mut tx, id, &write_for(&row, change)).await?;
    let appended = note_change(&mut tx, &row, &change).await?;
    tx.commit().await?;
    if let Some((seq, covered)) = appended {
        summary::schedule(&state, &caller, id, seq, covered);
    }
    Ok(axum::Json(item))
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
    required_text("summary", &body.summary, 10_000)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let row = store::get_task(&mut tx, id).await?;
    let action = store::insert_action(&mut tx, id, row.plan_version, ordinal, &body)
        .await
        .map_err(|err| {
            ApiError::from_db_constraint(err, |name| {
                (name == "task_actions_item_fkey").then(|| no_step(ordinal, &row))
            })
        })?;
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
    let next_cursor = more
        .then(|| items.last().map(|a| pagination::encode(&a.id)))
        .flatten();
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
    let next_cursor = more
        .then(|| items.last().map(|l| pagination::encode(&l.id)))
        .flatten();
    Ok(axum::Json(ActionLogPage { items, next_cursor }))
}

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
    let next_cursor = more
        .then(|| items.last().map(|e| pagination::encode(&e.seq)))
        .flatten();
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
        let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut tx)
            .await?;
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
    let next_cursor = more
        .then(|| items.last().map(|m| pagination::encode(&m.seq)))
        .flatten();
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
    let next_cursor = more
        .then(|| items.last().map(|s| pagination::encode(&s.seq)))
        .flatten();
    Ok(axum::Json(SnapshotPage { items, next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_matches_command_line() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            tasks: TasksConfig,
        }
        let parsed = <Cli as clap::Parser>::try_parse_from(["mnemo"])
            .unwrap()
            .tasks;
        if std::env::vars().all(|(k, _)| !k.starts_with("MNEMO_TASKS_")) {
            assert_eq!(
                format!("{parsed:?}"),
                format!("{:?}", TasksConfig::default())
            );
        }
        assert!(TasksConfig::default().validate().is_ok());
    }

    #[test]
    fn wait_sweep_and_stuck_cooldown_are_bounded_and_named() {
        let config = |adjust: fn(&mut TasksConfig)| {
            let mut c = TasksConfig::default();
            adjust(&mut c);
            c.validate()
        };
        assert!(config(|c| c.wait_sweep_interval_secs = 0).is_ok());
        assert!(config(|c| c.stuck_cooldown_secs = 0).is_ok());
        let err = config(|c| c.wait_sweep_interval_secs = 86_401).unwrap_err();
        assert!(
            err.starts_with("MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS") && !err.contains('\n'),
            "{err}"
        );
        let err = config(|c| c.stuck_cooldown_secs = 604_801).unwrap_err();
        assert!(
            err.starts_with("MNEMO_TASKS_STUCK_COOLDOWN_SECS") && !err.contains('\n'),
            "{err}"
        );
    }
}

//! A task itself: register it, change it, report progress on it, ask about it.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::*;
use crate::auth::Scope;
use crate::tasks::TasksConfig;
use crate::tasks::digest;
use crate::tasks::lifecycle::{self, Phase, Status};

/// A registration, checked.
pub struct Registration<'a> {
    name: &'a str,
    /// The plan as sent, and its steps.
    plan: Option<(&'a Value, Vec<plan::Step>)>,
    original_user_task: Option<&'a str>,
    metadata: Value,
}

impl<'a> Registration<'a> {
    /// 422 naming the field for a blank name or a malformed plan.
    pub fn parse(config: &TasksConfig, body: &'a RegisterTask) -> ApiResult<Self> {
        let name = required_text("name", &body.name, 1000)?;
        let plan = match &body.plan {
            Some(sent) => Some((
                sent,
                plan::parse(sent, "plan", config.max_plan_steps).map_err(plan_error)?,
            )),
            None => None,
        };
        Ok(Registration {
            name,
            plan,
            original_user_task: body.original_user_task.as_deref(),
            metadata: Value::Object(body.metadata.clone().unwrap_or_default()),
        })
    }
}

/// Stores a new task; with a plan, its version 1, and the phase moves to `PLANNING_COMPLETED`.
pub async fn register(tx: &mut Scoped, task: &Registration<'_>) -> ApiResult<TaskDetail> {
    let id = Uuid::now_v7();
    let mut row =
        store::insert_task(tx, id, task.name, task.original_user_task, &task.metadata).await?;
    if let Some((sent, steps)) = &task.plan {
        store::insert_plan(tx, id, 1, sent, None, steps, &[]).await?;
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
        row = store::save_task(tx, id, &write).await?;
    }
    detail(tx, &row).await
}

/// Applies a `PATCH`: phase and status through the state machine, the texts, and the metadata
/// merged key by key (a `null` removes its key).
pub async fn patch(tx: &mut Scoped, id: Uuid, body: &PatchTask) -> ApiResult<Written<TaskDetail>> {
    let name = body
        .name
        .as_deref()
        .map(|n| required_text("name", n, 1000).map(str::to_owned))
        .transpose()?;
    let row = store::lock_task(tx, id).await?;
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
    let saved = store::save_task(tx, id, &write).await?;
    let appended = note_change(tx, &row, &change).await?;
    let saved = if appended.is_some() {
        store::get_task(tx, id).await?
    } else {
        saved
    };
    Ok(Written::new(detail(tx, &saved).await?, appended))
}

/// A `task_update`, checked: a progress message, a status, a question, at least one of them.
pub struct Update<'a> {
    pub message: Option<&'a str>,
    pub status: Option<Status>,
    pub query: Option<&'a str>,
}

impl<'a> Update<'a> {
    /// 422 when the body names another task, gives nothing to do, or a blank text.
    pub fn parse(id: Uuid, body: &'a UpdateTask) -> ApiResult<Self> {
        if body.task_id.is_some_and(|t| t != id) {
            return Err(ApiError::invalid(
                "task_id",
                "`task_id` differs from the task id in the path",
            ));
        }
        if body.message.is_none() && body.status.is_none() && body.query.is_none() {
            return Err(nothing_to_do());
        }
        Ok(Update {
            message: body
                .message
                .as_deref()
                .map(|m| required_text("message", m, 100_000))
                .transpose()?,
            status: body.status,
            query: body
                .query
                .as_deref()
                .map(|q| required_text("query", q, 10_000))
                .transpose()?,
        })
    }

    /// Whether it changes the task (else it only asks).
    pub fn writes(&self) -> bool {
        self.message.is_some() || self.status.is_some()
    }

    /// The scope the update needs: a question alone only reads.
    pub fn scope(&self) -> Scope {
        if self.writes() {
            Scope::Write
        } else {
            Scope::Read
        }
    }
}

/// 422 for an update that gives none of `message`, `status` and `query`.
fn nothing_to_do() -> ApiError {
    ApiError::invalid("", "give at least one of `message`, `status` and `query`")
}

/// Applies the status, then appends the message, so that a question asked with them sees both.
/// Failing a task without an error summary records one from the failing step and the message.
/// Answers the task as it stands after, and the message's sequence number.
pub async fn apply_update(
    tx: &mut Scoped,
    id: Uuid,
    update: &Update<'_>,
) -> ApiResult<Written<(TaskRow, Option<i32>)>> {
    let mut latest = None;
    if let Some(status) = update.status {
        let row = store::lock_task(tx, id).await?;
        let change =
            lifecycle::apply(row.phase(), row.status(), None, Some(status)).map_err(illegal)?;
        if change != no_change(&row) {
            let mut write = write_for(&row, change);
            if change.status == Status::Failed && row.error_summary.is_none() {
                let failing = store::failing_item(tx, id, row.plan_version).await?;
                let summary = ErrorSummary {
                    failed_at_stage: failing
                        .as_ref()
                        .map(|(ordinal, stage, _)| json!(stage.unwrap_or(*ordinal))),
                    failed_step_narrative: failing.map(|(_, _, title)| title),
                    error_message: update.message.map(str::to_owned),
                };
                write.error_summary = serde_json::to_value(summary).ok();
            }
            store::save_task(tx, id, &write).await?;
            latest = note_change(tx, &row, &change).await?;
        }
    }
    let mut message_seq = None;
    if let Some(message) = update.message {
        let appended = store::append_message(tx, id, Role::Agent, MsgType::Progress, message)
            .await?
            .ok_or_else(|| store::task_not_found(id))?;
        message_seq = Some(appended.0);
        latest = Some((appended.0, appended.1));
    }
    let row = store::get_task(tx, id).await?;
    Ok(Written::new((row, message_seq), latest))
}

/// Applies an update in a transaction of its own, then answers its question (if any) after the
/// commit, so that a configured model is never asked while the task's row is locked.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    update: &Update<'_>,
) -> ApiResult<UpdateResult> {
    let mut applied = None;
    if update.writes() {
        let mut tx = caller.begin().await?;
        let Written { value, summary } = apply_update(&mut tx, id, update).await?;
        tx.commit().await?;
        summary.schedule(state, caller, id);
        applied = Some(value);
    }
    let message_seq = applied.as_ref().and_then(|(_, seq)| *seq);
    match (update.query, applied) {
        (Some(query), _) => {
            let (answer, row) = answer_query(state, caller, id, query).await?;
            Ok(update_result(&row, message_seq, Some(answer)))
        }
        (None, Some((row, _))) => Ok(update_result(&row, message_seq, None)),
        // `Update::parse` refuses an update with none of the three.
        (None, None) => Err(nothing_to_do()),
    }
}

/// [`update`] inside the caller's transaction (one under an `Idempotency-Key`, whose stored
/// response must hold the answer): the question is answered in it, a configured model asked
/// while it is open.
pub async fn update_in(
    state: &AppState,
    tx: &mut Scoped,
    id: Uuid,
    update: &Update<'_>,
) -> ApiResult<Written<UpdateResult>> {
    let Written {
        value: (row, message_seq),
        summary,
    } = apply_update(tx, id, update).await?;
    let answer = match update.query {
        Some(query) => Some(answer_from(state, tx, &row, query).await?),
        None => None,
    };
    Ok(Written {
        value: update_result(&row, message_seq, answer),
        summary,
    })
}

/// The answer of a `task_update`.
pub fn update_result(
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
pub async fn answer_query(
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
pub async fn answer_from(
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

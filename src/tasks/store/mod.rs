//! The SQL of task memory. Every function runs inside the caller's [`Scoped`] transaction, so
//! row-level security limits it to the caller; inserts still write `tenant_id`/`user_id` from the
//! transaction's settings.
//!
//! Appends (events, messages, snapshots) take their sequence numbers from a counter on the task
//! row, bumped by an UPDATE in the same statement as the INSERT. The UPDATE holds the task's row
//! lock until commit, so concurrent appends to one task serialize: sequence numbers are gap-free
//! and follow commit order.
//!
//! Here: the task row. `plans.rs`: plan versions and items; `history.rs`: messages (and the
//! digest's stored state), events and snapshots; `actions.rs`: actions and their logs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::lifecycle::{Phase, Stamps, Status};
use super::model::*;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

mod actions;
mod history;
mod plans;

pub(crate) use actions::ActionRow;
pub use actions::*;
pub use history::*;
pub use plans::*;

/// A task row as stored (every statement returning it names each of these columns).
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: Uuid,
    pub name: String,
    pub original_user_task: Option<String>,
    pub status: String,
    pub phase: String,
    pub metadata: Value,
    pub final_answer: Option<String>,
    pub error_summary: Option<Value>,
    pub running_summary: Option<String>,
    pub summary_message_count: i32,
    pub summary_updated_at: Option<DateTime<Utc>>,
    pub plan_version: i32,
    pub event_count: i64,
    pub message_count: i32,
    pub snapshot_count: i32,
    pub created_at: DateTime<Utc>,
    pub plan_generated_at: Option<DateTime<Utc>>,
    pub execution_started_at: Option<DateTime<Utc>>,
    pub synthesis_started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

impl TaskRow {
    pub fn phase(&self) -> Phase {
        Phase::parse(&self.phase).unwrap_or(Phase::Received)
    }

    pub fn status(&self) -> Status {
        Status::parse(&self.status).unwrap_or(Status::Active)
    }

    pub fn to_task(&self) -> Task {
        Task {
            id: self.id,
            name: self.name.clone(),
            original_user_task: self.original_user_task.clone(),
            status: self.status(),
            phase: self.phase(),
            metadata: self.metadata.clone(),
            final_answer: self.final_answer.clone(),
            error_summary: self
                .error_summary
                .clone()
                .and_then(|v| serde_json::from_value(v).ok()),
            running_summary: self.running_summary.clone(),
            summary_message_count: self.summary_message_count,
            summary_updated_at: self.summary_updated_at,
            plan_version: self.plan_version,
            timestamps: Timestamps {
                created_at: self.created_at,
                plan_generated_at: self.plan_generated_at,
                execution_started_at: self.execution_started_at,
                synthesis_started_at: self.synthesis_started_at,
                completed_at: self.completed_at,
                last_updated_at: self.updated_at,
                archived_at: self.archived_at,
            },
        }
    }
}

pub fn task_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("no task {id}"))
}

pub async fn insert_task(
    tx: &mut Scoped,
    id: Uuid,
    name: &str,
    original_user_task: Option<&str>,
    metadata: &Value,
) -> Result<TaskRow, sqlx::Error> {
    sqlx::query_as!(
        TaskRow,
        "INSERT INTO tasks (tenant_id, user_id, id, name, original_user_task, metadata)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4)
         RETURNING id, name, original_user_task, status, phase, metadata, final_answer,
                   error_summary, running_summary, summary_message_count, summary_updated_at,
                   plan_version, event_count, message_count, snapshot_count, created_at,
                   plan_generated_at, execution_started_at, synthesis_started_at, completed_at,
                   updated_at, archived_at",
        id,
        name,
        original_user_task,
        metadata
    )
    .fetch_one(&mut *tx)
    .await
}

pub async fn get_task(tx: &mut Scoped, id: Uuid) -> ApiResult<TaskRow> {
    sqlx::query_as!(
        TaskRow,
        "SELECT id, name, original_user_task, status, phase, metadata, final_answer,
                   error_summary, running_summary, summary_message_count, summary_updated_at,
                   plan_version, event_count, message_count, snapshot_count, created_at,
                   plan_generated_at, execution_started_at, synthesis_started_at, completed_at,
                   updated_at, archived_at
         FROM tasks WHERE id = $1",
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| task_not_found(id))
}

/// The task, locked until the transaction ends (state-machine checks read, then write).
pub async fn lock_task(tx: &mut Scoped, id: Uuid) -> ApiResult<TaskRow> {
    sqlx::query_as!(
        TaskRow,
        "SELECT id, name, original_user_task, status, phase, metadata, final_answer,
                   error_summary, running_summary, summary_message_count, summary_updated_at,
                   plan_version, event_count, message_count, snapshot_count, created_at,
                   plan_generated_at, execution_started_at, synthesis_started_at, completed_at,
                   updated_at, archived_at
         FROM tasks WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| task_not_found(id))
}

/// Deletes a task and everything under it (every table under a task references it with
/// `ON DELETE CASCADE`). 404 when the caller has no such task.
pub async fn delete_task(tx: &mut Scoped, id: Uuid) -> ApiResult<()> {
    let deleted = sqlx::query!(
        "DELETE FROM tasks
         WHERE tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')
           AND id = $1",
        id
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if deleted == 0 {
        return Err(task_not_found(id));
    }
    Ok(())
}

/// The transaction's clock: `now()`, the time its statements stamp on the rows they write.
pub async fn now(tx: &mut Scoped) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(&mut *tx)
        .await
}

/// A change to a task row; `None` fields stay as they are.
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub name: Option<String>,
    pub phase: Phase,
    pub status: Status,
    pub stamps: Stamps,
    pub final_answer: Option<String>,
    pub error_summary: Option<Value>,
    pub metadata: Option<Value>,
    pub plan_version: Option<i32>,
}

impl TaskWrite {
    /// No change but `lastUpdatedAt`, from the row's current state.
    pub fn from_row(row: &TaskRow) -> Self {
        TaskWrite {
            name: None,
            phase: row.phase(),
            status: row.status(),
            stamps: Stamps::default(),
            final_answer: None,
            error_summary: None,
            metadata: None,
            plan_version: None,
        }
    }
}

pub async fn save_task(tx: &mut Scoped, id: Uuid, write: &TaskWrite) -> ApiResult<TaskRow> {
    sqlx::query_as!(
        TaskRow,
        "UPDATE tasks SET
             name = coalesce($2, name),
             phase = $3,
             status = $4,
             plan_generated_at = CASE WHEN $5 THEN coalesce(plan_generated_at, now()) ELSE plan_generated_at END,
             execution_started_at = CASE WHEN $6 THEN coalesce(execution_started_at, now()) ELSE execution_started_at END,
             synthesis_started_at = CASE WHEN $7 THEN coalesce(synthesis_started_at, now()) ELSE synthesis_started_at END,
             completed_at = CASE WHEN $8 THEN now() ELSE completed_at END,
             final_answer = coalesce($9, final_answer),
             error_summary = coalesce($10, error_summary),
             metadata = coalesce($11, metadata),
             plan_version = coalesce($12, plan_version),
             updated_at = now()
         WHERE id = $1
         RETURNING id, name, original_user_task, status, phase, metadata, final_answer,
                   error_summary, running_summary, summary_message_count, summary_updated_at,
                   plan_version, event_count, message_count, snapshot_count, created_at,
                   plan_generated_at, execution_started_at, synthesis_started_at, completed_at,
                   updated_at, archived_at",
        id,
        write.name.as_deref(),
        write.phase.as_str(),
        write.status.as_str(),
        write.stamps.plan_generated,
        write.stamps.execution_started,
        write.stamps.synthesis_started,
        write.stamps.completed,
        write.final_answer.as_deref(),
        write.error_summary.as_ref(),
        write.metadata.as_ref(),
        write.plan_version
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| task_not_found(id))
}

pub async fn list_tasks(
    tx: &mut Scoped,
    status: Option<Status>,
    phase: Option<Phase>,
    include_archived: bool,
    before: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Task>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        TaskRow,
        "SELECT id, name, original_user_task, status, phase, metadata, final_answer,
                   error_summary, running_summary, summary_message_count, summary_updated_at,
                   plan_version, event_count, message_count, snapshot_count, created_at,
                   plan_generated_at, execution_started_at, synthesis_started_at, completed_at,
                   updated_at, archived_at
         FROM tasks
         WHERE ($1::text IS NULL OR status = $1)
           AND ($2::text IS NULL OR phase = $2)
           AND ($3::uuid IS NULL OR id < $3)
           AND ($5 OR archived_at IS NULL)
         ORDER BY id DESC LIMIT $4",
        status.map(Status::as_str),
        phase.map(Phase::as_str),
        before,
        limit + 1,
        include_archived
    )
    .fetch_all(&mut *tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((rows.iter().map(TaskRow::to_task).collect(), more))
}

/// Stores a refreshed running summary unless a newer one (covering more messages) is already in.
pub async fn set_running_summary(
    tx: &mut Scoped,
    task_id: Uuid,
    summary: &str,
    covers: i32,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE tasks SET running_summary = $2, summary_message_count = $3,
                summary_updated_at = now()
         WHERE id = $1 AND summary_message_count < $3",
        task_id,
        summary,
        covers
    )
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

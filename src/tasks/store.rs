//! The SQL of task memory. Every function runs inside the caller's [`Scoped`] transaction, so
//! row-level security limits it to the caller; inserts still write `tenant_id`/`user_id` from the
//! transaction's settings.
//!
//! Appends (events, messages, snapshots) take their sequence numbers from a counter on the task
//! row, bumped by an UPDATE in the same statement as the INSERT. The UPDATE holds the task's row
//! lock until commit, so concurrent appends to one task serialize: sequence numbers are gap-free
//! and follow commit order.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{FromRow, Postgres, QueryBuilder};
use uuid::Uuid;

use super::digest;
use super::digest_state::DigestState;
use super::lifecycle::{Phase, Stamps, Status};
use super::model::*;
use super::plan::{Previous, Step};
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

const TASK_COLUMNS: &str = "id, name, original_user_task, status, phase, metadata, final_answer, \
    error_summary, running_summary, summary_message_count, summary_updated_at, plan_version, \
    event_count, message_count, snapshot_count, created_at, plan_generated_at, \
    execution_started_at, synthesis_started_at, completed_at, updated_at, archived_at";

/// A task row as stored.
#[derive(Debug, Clone, FromRow)]
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
    sqlx::query_as(&format!(
        "INSERT INTO tasks (tenant_id, user_id, id, name, original_user_task, metadata)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4)
         RETURNING {TASK_COLUMNS}"
    ))
    .bind(id)
    .bind(name)
    .bind(original_user_task)
    .bind(metadata)
    .fetch_one(tx)
    .await
}

pub async fn get_task(tx: &mut Scoped, id: Uuid) -> ApiResult<TaskRow> {
    sqlx::query_as(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"))
        .bind(id)
        .fetch_optional(tx)
        .await?
        .ok_or_else(|| task_not_found(id))
}

/// The task, locked until the transaction ends (state-machine checks read, then write).
pub async fn lock_task(tx: &mut Scoped, id: Uuid) -> ApiResult<TaskRow> {
    sqlx::query_as(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(tx)
    .await?
    .ok_or_else(|| task_not_found(id))
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
    sqlx::query_as(&format!(
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
         RETURNING {TASK_COLUMNS}"
    ))
    .bind(id)
    .bind(&write.name)
    .bind(write.phase.as_str())
    .bind(write.status.as_str())
    .bind(write.stamps.plan_generated)
    .bind(write.stamps.execution_started)
    .bind(write.stamps.synthesis_started)
    .bind(write.stamps.completed)
    .bind(&write.final_answer)
    .bind(&write.error_summary)
    .bind(&write.metadata)
    .bind(write.plan_version)
    .fetch_optional(tx)
    .await?
    .ok_or_else(|| task_not_found(id))
}

/// A previous item's state carried over by a replan.
#[derive(Debug, Clone, FromRow)]
pub struct ItemState {
    pub status: String,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub duration_seconds: Option<f64>,
}

pub async fn previous_items(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Vec<Previous<ItemState>>, sqlx::Error> {
    #[derive(FromRow)]
    struct Row {
        ordinal: i32,
        title: String,
        #[sqlx(flatten)]
        state: ItemState,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ordinal, title, status, started_at, completed_at, duration_seconds
         FROM task_plan_items WHERE task_id = $1 AND version = $2 ORDER BY ordinal",
    )
    .bind(task_id)
    .bind(version)
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Previous {
            ordinal: r.ordinal,
            title: r.title,
            state: r.state,
        })
        .collect())
}

/// Stores plan `version` and its items (one multi-row INSERT); `carried[i]` is the previous item
/// step `i` takes its state from.
pub async fn insert_plan(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    plan: &Value,
    reason: Option<&str>,
    steps: &[Step],
    carried: &[Option<&Previous<ItemState>>],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO task_plans (tenant_id, user_id, task_id, version, plan, reason)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4)",
    )
    .bind(task_id)
    .bind(version)
    .bind(plan)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    let mut insert = QueryBuilder::<Postgres>::new(
        "INSERT INTO task_plan_items (tenant_id, user_id, task_id, version, ordinal, id, stage, \
         title, tool, input, narrative, status, started_at, completed_at, duration_seconds, \
         rebased_from) ",
    );
    insert.push_values(steps.iter().enumerate(), |mut row, (i, step)| {
        let from = carried.get(i).copied().flatten();
        row.push("current_setting('mnemo.tenant')")
            .push("current_setting('mnemo.user')")
            .push_bind(task_id)
            .push_bind(version)
            .push_bind(i32::try_from(i + 1).unwrap_or(i32::MAX))
            .push_bind(Uuid::now_v7())
            .push_bind(step.stage)
            .push_bind(step.title.clone())
            .push_bind(step.tool.clone())
            .push_bind(step.input.clone())
            .push_bind(step.narrative.clone())
            .push_bind(from.map_or_else(|| "pending".to_owned(), |p| p.state.status.clone()))
            .push_bind(from.and_then(|p| p.state.started_at))
            .push_bind(from.and_then(|p| p.state.completed_at))
            .push_bind(from.and_then(|p| p.state.duration_seconds))
            .push_bind(from.map(|p| p.ordinal));
    });
    insert.build().execute(tx).await?;
    Ok(())
}

#[derive(FromRow)]
struct ItemRow {
    id: Uuid,
    ordinal: i32,
    stage: Option<i32>,
    title: String,
    tool: Option<String>,
    input: Option<Value>,
    narrative: Option<String>,
    status: String,
    started_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
    duration_seconds: Option<f64>,
    rebased_from: Option<i32>,
}

const ITEM_COLUMNS: &str = "id, ordinal, stage, title, tool, input, narrative, status, started_at, \
    completed_at, duration_seconds, rebased_from";

impl From<ItemRow> for PlanItem {
    fn from(r: ItemRow) -> Self {
        PlanItem {
            id: r.id,
            ordinal: r.ordinal,
            stage: r.stage,
            title: r.title,
            tool: r.tool,
            input: r.input,
            narrative: r.narrative,
            status: ItemStatus::parse(&r.status).unwrap_or(ItemStatus::Pending),
            started_at: r.started_at,
            completed_at: r.completed_at,
            duration_seconds: r.duration_seconds,
            rebased_from: r.rebased_from,
        }
    }
}

pub async fn plan_items(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Vec<PlanItem>, sqlx::Error> {
    let rows: Vec<ItemRow> = sqlx::query_as(&format!(
        "SELECT {ITEM_COLUMNS} FROM task_plan_items WHERE task_id = $1 AND version = $2
         ORDER BY ordinal"
    ))
    .bind(task_id)
    .bind(version)
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(PlanItem::from).collect())
}

pub async fn plan(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Option<Plan>, sqlx::Error> {
    let head: Option<(Option<String>, DateTime<Utc>, Value)> = sqlx::query_as(
        "SELECT reason, created_at, plan FROM task_plans WHERE task_id = $1 AND version = $2",
    )
    .bind(task_id)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((reason, created_at, plan)) = head else {
        return Ok(None);
    };
    Ok(Some(Plan {
        version,
        reason,
        created_at,
        plan,
        items: plan_items(tx, task_id, version).await?,
    }))
}

pub async fn plan_versions(
    tx: &mut Scoped,
    task_id: Uuid,
    active: i32,
) -> Result<Vec<PlanVersion>, sqlx::Error> {
    let rows: Vec<(i32, Option<String>, DateTime<Utc>, i64)> = sqlx::query_as(
        "SELECT p.version, p.reason, p.created_at,
                (SELECT count(*) FROM task_plan_items i
                 WHERE i.task_id = p.task_id AND i.version = p.version)
         FROM task_plans p WHERE p.task_id = $1 ORDER BY p.version",
    )
    .bind(task_id)
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(version, reason, created_at, steps)| PlanVersion {
            version,
            reason,
            created_at,
            steps,
            active: version == active,
        })
        .collect())
}

/// Sets an item's status; timestamps and duration follow. `None`: no such ordinal.
pub async fn set_item_status(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    ordinal: i32,
    status: ItemStatus,
) -> Result<Option<PlanItem>, sqlx::Error> {
    // An unchanged status keeps its timestamps, so repeating a PATCH is harmless.
    let row: Option<ItemRow> = sqlx::query_as(&format!(
        "UPDATE task_plan_items SET
             status = $4,
             started_at = CASE WHEN status = $4 THEN started_at
                               WHEN $4 = 'pending' THEN NULL
                               WHEN $4 = 'active' THEN now()
                               ELSE started_at END,
             completed_at = CASE WHEN status = $4 THEN completed_at
                                 WHEN $4 IN ('pending', 'active') THEN NULL
                                 ELSE now() END,
             duration_seconds = CASE WHEN status = $4 THEN duration_seconds
                                     WHEN $4 IN ('pending', 'active') THEN NULL
                                     ELSE extract(epoch FROM now() - started_at)::float8 END
         WHERE task_id = $1 AND version = $2 AND ordinal = $3
         RETURNING {ITEM_COLUMNS}"
    ))
    .bind(task_id)
    .bind(version)
    .bind(ordinal)
    .bind(status.as_str())
    .fetch_optional(tx)
    .await?;
    Ok(row.map(PlanItem::from))
}

/// The item of the active plan most likely to be where a task failed: a failed one, else the
/// active one.
pub async fn failing_item(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Option<(i32, Option<i32>, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ordinal, stage, title FROM task_plan_items
         WHERE task_id = $1 AND version = $2 AND status IN ('failed', 'active')
         ORDER BY status = 'failed' DESC, ordinal LIMIT 1",
    )
    .bind(task_id)
    .bind(version)
    .fetch_optional(tx)
    .await
}

/// Counts of the active plan's items by status.
pub async fn item_counts(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Counts, sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM task_plan_items WHERE task_id = $1 AND version = $2
         GROUP BY status",
    )
    .bind(task_id)
    .bind(version)
    .fetch_all(tx)
    .await?;
    let mut counts = Counts::default();
    for (status, n) in rows {
        counts.items += n;
        match ItemStatus::parse(&status) {
            Some(ItemStatus::Pending) => counts.pending = n,
            Some(ItemStatus::Active) => counts.active = n,
            Some(ItemStatus::Completed) => counts.completed = n,
            Some(ItemStatus::Failed) => counts.failed = n,
            Some(ItemStatus::Skipped) => counts.skipped = n,
            None => {}
        }
    }
    Ok(counts)
}

/// Messages between two checkpoints of a task's digest state.
pub const DIGEST_CHECKPOINT: i32 = 64;

/// The digest state of a task as last stored (empty when none is).
pub async fn digest_state(tx: &mut Scoped, task_id: Uuid) -> Result<DigestState, sqlx::Error> {
    let stored: Option<sqlx::types::Json<DigestState>> =
        sqlx::query_scalar("SELECT state FROM task_digests WHERE task_id = $1")
            .bind(task_id)
            .fetch_optional(tx)
            .await?;
    Ok(stored.map(|s| s.0).unwrap_or_default())
}

/// Folds the messages written since the stored digest state into it, with the titles of the
/// active plan, and stores it.
pub async fn checkpoint_digest(tx: &mut Scoped, task_id: Uuid) -> Result<(), sqlx::Error> {
    let mut state = digest_state(&mut *tx, task_id).await?;
    let messages = digest_messages(&mut *tx, task_id, state.through).await?;
    if messages.is_empty() {
        return Ok(());
    }
    let titles: Vec<String> = sqlx::query_scalar(
        "SELECT i.title FROM task_plan_items i JOIN tasks t ON t.id = i.task_id
         WHERE i.task_id = $1 AND i.version = t.plan_version ORDER BY i.ordinal",
    )
    .bind(task_id)
    .fetch_all(&mut *tx)
    .await?;
    state.fold(&titles, &messages);
    sqlx::query(
        "INSERT INTO task_digests (tenant_id, user_id, task_id, through_seq, state)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3)
         ON CONFLICT (tenant_id, user_id, task_id)
         DO UPDATE SET through_seq = EXCLUDED.through_seq, state = EXCLUDED.state,
                       updated_at = now()
         WHERE task_digests.through_seq < EXCLUDED.through_seq",
    )
    .bind(task_id)
    .bind(state.through)
    .bind(sqlx::types::Json(&state))
    .execute(tx)
    .await?;
    Ok(())
}

/// Appends a message; returns its seq (also the task's message count), how many messages the
/// running summary covers and the message's time, or `None` when the task does not exist.
pub async fn append_message(
    tx: &mut Scoped,
    task_id: Uuid,
    role: Role,
    msg_type: MsgType,
    content: &str,
) -> Result<Option<(i32, i32, DateTime<Utc>)>, sqlx::Error> {
    let queue = tx.queues_embeddings();
    let appended: Option<(i32, i32, DateTime<Utc>)> = sqlx::query_as(
        "WITH t AS (
             UPDATE tasks SET message_count = message_count + 1, updated_at = now()
             WHERE id = $1
             RETURNING tenant_id, user_id, message_count, summary_message_count
         ), m AS (
             INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
             SELECT tenant_id, user_id, $1, message_count, $2, $3, $4 FROM t
             RETURNING tenant_id, user_id, seq, created_at
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
             SELECT tenant_id, user_id, 'task', $1, 'message', seq FROM m
             WHERE $5 AND btrim($3) <> ''
         )
         SELECT m.seq, t.summary_message_count, m.created_at FROM m, t",
    )
    .bind(task_id)
    .bind(role.as_str())
    .bind(content)
    .bind(msg_type.as_str())
    .bind(queue)
    .fetch_optional(&mut *tx)
    .await?;
    // Every so many messages the digest's state takes in the latest, so that a digest never
    // reads more than that many.
    if let Some((seq, _, _)) = appended
        && seq % DIGEST_CHECKPOINT == 0
    {
        checkpoint_digest(tx, task_id).await?;
    }
    Ok(appended)
}

#[derive(FromRow)]
struct MessageRow {
    seq: i32,
    role: String,
    msg_type: String,
    content: String,
    created_at: DateTime<Utc>,
}

pub async fn messages(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
    limit: i64,
) -> Result<(Vec<Message>, bool), sqlx::Error> {
    let rows: Vec<MessageRow> = sqlx::query_as(
        "SELECT seq, role, msg_type, content, created_at FROM task_messages
         WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(task_id)
    .bind(after)
    .bind(limit + 1)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| Message {
                seq: r.seq,
                role: Role::parse(&r.role).unwrap_or(Role::Agent),
                msg_type: MsgType::parse(&r.msg_type).unwrap_or(MsgType::Text),
                content: r.content,
                created_at: r.created_at,
            })
            .collect(),
        more,
    ))
}

/// Every message after `after`, in order, for the digest and the summary.
/// The messages after `after`, in order.
pub async fn digest_messages(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
) -> Result<Vec<digest::Message>, sqlx::Error> {
    let rows: Vec<MessageRow> = sqlx::query_as(
        "SELECT seq, role, msg_type, content, created_at FROM task_messages
         WHERE task_id = $1 AND seq > $2 ORDER BY seq",
    )
    .bind(task_id)
    .bind(after)
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| digest::Message {
            seq: r.seq,
            role: r.role,
            msg_type: r.msg_type,
            content: r.content,
            created_at: r.created_at,
        })
        .collect())
}

/// Appends a batch of events in one statement: the task's counter moves by the batch size under
/// its row lock and one multi-row INSERT writes the events with consecutive sequence numbers.
/// `None` when the task does not exist.
pub async fn append_events(
    tx: &mut Scoped,
    task_id: Uuid,
    events: &[NewEvent],
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let n = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let mut insert =
        QueryBuilder::<Postgres>::new("WITH t AS (UPDATE tasks SET event_count = event_count + ");
    insert
        .push_bind(n)
        .push(", updated_at = now() WHERE id = ")
        .push_bind(task_id)
        .push(" RETURNING tenant_id, user_id, id, event_count - ")
        .push_bind(n)
        .push(
            " AS base) INSERT INTO task_events (tenant_id, user_id, task_id, seq, ts, stage, \
             sub_task_id, step_narrative, tool_name, status, input_payload, result_data, \
             error_info, duration_ms) \
             SELECT t.tenant_id, t.user_id, t.id, t.base + v.i, coalesce(v.ts, now()), \
             v.stage, v.sub_task_id, v.step_narrative, v.tool_name, v.status, v.input_payload, \
             v.result_data, v.error_info, v.duration_ms FROM t CROSS JOIN (",
        );
    insert.push_values(events.iter().enumerate(), |mut row, (i, e)| {
        row.push_bind(i64::try_from(i + 1).unwrap_or(i64::MAX))
            .push_bind(e.timestamp)
            .push_bind(e.stage.clone())
            .push_bind(e.sub_task_id.clone())
            .push_bind(e.step_narrative.clone())
            .push_bind(e.tool_name.clone())
            .push_bind(e.status.as_str())
            .push_bind(e.input_payload.clone())
            .push_bind(e.result_data.clone())
            .push_bind(
                e.error_info
                    .as_ref()
                    .and_then(|info| serde_json::to_value(info).ok()),
            )
            .push_bind(e.duration_ms);
    });
    insert.push(
        ") AS v(i, ts, stage, sub_task_id, step_narrative, tool_name, status, \
         input_payload, result_data, error_info, duration_ms) \
         RETURNING seq",
    );
    let queue = tx.queues_embeddings();
    let seqs: Vec<i64> = insert.build_query_scalar().fetch_all(&mut *tx).await?;
    if queue && !seqs.is_empty() {
        queue_task_items(tx, task_id, "event", &seqs).await?;
    }
    Ok(match (seqs.iter().min(), seqs.iter().max()) {
        (Some(first), Some(last)) => Some((*first, *last)),
        _ => None,
    })
}

#[derive(FromRow)]
struct EventRow {
    seq: i64,
    ts: DateTime<Utc>,
    stage: Option<Value>,
    sub_task_id: Option<String>,
    step_narrative: String,
    tool_name: Option<String>,
    status: String,
    input_payload: Option<Value>,
    result_data: Option<Value>,
    error_info: Option<Value>,
    duration_ms: Option<i64>,
}

pub async fn events(
    tx: &mut Scoped,
    task_id: Uuid,
    query: &EventQuery,
    after: i64,
    limit: i64,
) -> Result<(Vec<Event>, bool), sqlx::Error> {
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT seq, ts, stage, sub_task_id, step_narrative, tool_name, status, input_payload,
                result_data, error_info, duration_ms
         FROM task_events
         WHERE task_id = $1 AND seq > $2
           AND ($3::text IS NULL OR status = $3)
           AND ($4::text IS NULL OR tool_name = $4)
           AND ($5::text IS NULL OR sub_task_id = $5)
         ORDER BY seq LIMIT $6",
    )
    .bind(task_id)
    .bind(after)
    .bind(&query.status)
    .bind(&query.tool_name)
    .bind(&query.sub_task_id)
    .bind(limit + 1)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| Event {
                seq: r.seq,
                timestamp: r.ts,
                stage: r.stage,
                sub_task_id: r.sub_task_id,
                step_narrative: r.step_narrative,
                tool_name: r.tool_name,
                status: r.status,
                input_payload: r.input_payload,
                result_data: r.result_data,
                error_info: r.error_info,
                duration_ms: r.duration_ms,
            })
            .collect(),
        more,
    ))
}

pub async fn append_snapshot(
    tx: &mut Scoped,
    task_id: Uuid,
    snapshot: &NewSnapshot,
) -> Result<Option<Snapshot>, sqlx::Error> {
    let queue = tx.queues_embeddings();
    let row: Option<(i32, DateTime<Utc>)> = sqlx::query_as(
        "WITH t AS (
             UPDATE tasks SET snapshot_count = snapshot_count + 1, updated_at = now()
             WHERE id = $1
             RETURNING tenant_id, user_id, snapshot_count
         ), s AS (
             INSERT INTO task_snapshots (tenant_id, user_id, task_id, seq, label, content,
                                         is_summarized, ts)
             SELECT tenant_id, user_id, $1, snapshot_count, $2, $3, $4, coalesce($5, now())
             FROM t
             RETURNING tenant_id, user_id, seq, ts
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
             SELECT tenant_id, user_id, 'task', $1, 'snapshot', seq FROM s WHERE $6
         )
         SELECT seq, ts FROM s",
    )
    .bind(task_id)
    .bind(&snapshot.label)
    .bind(&snapshot.content)
    .bind(snapshot.is_summarized)
    .bind(snapshot.timestamp)
    .bind(queue)
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|(seq, timestamp)| Snapshot {
        seq,
        label: snapshot.label.clone(),
        content: snapshot.content.clone(),
        is_summarized: snapshot.is_summarized,
        timestamp,
    }))
}

/// Queues items of a task's history for the embedder: `source` is `message`, `event`,
/// `snapshot` or `step` (all text chunks of the step). The caller checks
/// [`Scoped::queues_embeddings`].
pub async fn queue_task_items(
    tx: &mut Scoped,
    task_id: Uuid,
    source: &str,
    seqs: &[i64],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'task', $1, $2, s
         FROM unnest($3::int8[]) AS s",
    )
    .bind(task_id)
    .bind(source)
    .bind(seqs)
    .execute(tx)
    .await?;
    Ok(())
}

/// Queues every message, event and snapshot of a task for the embedder (an imported task; its
/// steps are queued as they are inserted). Nothing when the transaction queues no embeddings.
pub async fn queue_task_history(tx: &mut Scoped, task_id: Uuid) -> Result<(), sqlx::Error> {
    if !tx.queues_embeddings() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'task', $1,
                i.source, i.seq
         FROM (SELECT 'message' AS source, seq::int8 AS seq FROM task_messages
               WHERE task_id = $1 AND btrim(content) <> ''
               UNION ALL SELECT 'event', seq FROM task_events WHERE task_id = $1
               UNION ALL SELECT 'snapshot', seq FROM task_snapshots WHERE task_id = $1) i",
    )
    .bind(task_id)
    .execute(tx)
    .await?;
    Ok(())
}

pub async fn snapshots(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
    limit: i64,
) -> Result<(Vec<Snapshot>, bool), sqlx::Error> {
    let rows: Vec<(i32, String, String, bool, DateTime<Utc>)> = sqlx::query_as(
        "SELECT seq, label, content, is_summarized, ts FROM task_snapshots
         WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(task_id)
    .bind(after)
    .bind(limit + 1)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|(seq, label, content, is_summarized, timestamp)| Snapshot {
                seq,
                label,
                content,
                is_summarized,
                timestamp,
            })
            .collect(),
        more,
    ))
}

pub async fn list_tasks(
    tx: &mut Scoped,
    status: Option<Status>,
    phase: Option<Phase>,
    include_archived: bool,
    before: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Task>, bool), sqlx::Error> {
    let rows: Vec<TaskRow> = sqlx::query_as(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks
         WHERE ($1::text IS NULL OR status = $1)
           AND ($2::text IS NULL OR phase = $2)
           AND ($3::uuid IS NULL OR id < $3)
           AND ($5 OR archived_at IS NULL)
         ORDER BY id DESC LIMIT $4"
    ))
    .bind(status.map(Status::as_str))
    .bind(phase.map(Phase::as_str))
    .bind(before)
    .bind(limit + 1)
    .bind(include_archived)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((rows.iter().map(TaskRow::to_task).collect(), more))
}

/// A row of `task_actions` as stored (the routes answer [`Action`]; a bundle export writes it).
#[derive(FromRow)]
pub(crate) struct ActionRow {
    pub id: Uuid,
    pub task_id: Uuid,
    pub version: i32,
    pub ordinal: i32,
    pub action_type: String,
    pub summary: String,
    pub status: String,
    pub input_data: Option<Value>,
    pub output_data: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`ActionRow`], for its `SELECT`s.
pub(crate) const ACTION_COLUMNS: &str = "id, task_id, version, ordinal, action_type, summary, status, \
    input_data, output_data, created_at, updated_at";

impl From<ActionRow> for Action {
    fn from(r: ActionRow) -> Self {
        Action {
            id: r.id,
            task_id: r.task_id,
            plan_version: r.version,
            ordinal: r.ordinal,
            action_type: ActionType::parse(&r.action_type).unwrap_or(ActionType::Other),
            summary: r.summary,
            status: ActionStatus::parse(&r.status).unwrap_or(ActionStatus::Completed),
            input_data: r.input_data,
            output_data: r.output_data,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

pub async fn insert_action(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    ordinal: i32,
    action: &NewAction,
) -> Result<Action, sqlx::Error> {
    let row: ActionRow = sqlx::query_as(&format!(
        "INSERT INTO task_actions (tenant_id, user_id, id, task_id, version, ordinal, action_type,
                                   summary, status, input_data, output_data)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4,
                 $5, $6, $7, $8, $9)
         RETURNING {ACTION_COLUMNS}"
    ))
    .bind(Uuid::now_v7())
    .bind(task_id)
    .bind(version)
    .bind(ordinal)
    .bind(action.action_type.as_str())
    .bind(&action.summary)
    .bind(action.status.unwrap_or(ActionStatus::Completed).as_str())
    .bind(&action.input_data)
    .bind(&action.output_data)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("UPDATE tasks SET updated_at = now() WHERE id = $1")
        .bind(task_id)
        .execute(tx)
        .await?;
    Ok(row.into())
}

pub async fn patch_action(
    tx: &mut Scoped,
    task_id: Uuid,
    action_id: Uuid,
    patch: &PatchAction,
) -> Result<Option<Action>, sqlx::Error> {
    let row: Option<ActionRow> = sqlx::query_as(&format!(
        "UPDATE task_actions SET status = coalesce($3, status), summary = coalesce($4, summary),
                output_data = coalesce($5, output_data), updated_at = now()
         WHERE task_id = $1 AND id = $2
         RETURNING {ACTION_COLUMNS}"
    ))
    .bind(task_id)
    .bind(action_id)
    .bind(patch.status.map(ActionStatus::as_str))
    .bind(&patch.summary)
    .bind(&patch.output_data)
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Action::from))
}

pub async fn actions(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    ordinal: i32,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Action>, bool), sqlx::Error> {
    let rows: Vec<ActionRow> = sqlx::query_as(&format!(
        "SELECT {ACTION_COLUMNS} FROM task_actions
         WHERE task_id = $1 AND version = $2 AND ordinal = $3 AND ($4::uuid IS NULL OR id > $4)
         ORDER BY id LIMIT $5"
    ))
    .bind(task_id)
    .bind(version)
    .bind(ordinal)
    .bind(after)
    .bind(limit + 1)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((rows.into_iter().map(Action::from).collect(), more))
}

/// Appends a log line to an action of the task; `None` when there is no such action.
pub async fn insert_action_log(
    tx: &mut Scoped,
    task_id: Uuid,
    action_id: Uuid,
    log: &NewActionLog,
) -> Result<Option<ActionLog>, sqlx::Error> {
    let row: Option<(Uuid, DateTime<Utc>)> = sqlx::query_as(
        "INSERT INTO task_action_logs (tenant_id, user_id, id, task_id, action_id, log_type, content)
         SELECT tenant_id, user_id, $3, task_id, id, $4, $5 FROM task_actions
         WHERE task_id = $1 AND id = $2
         RETURNING id, created_at",
    )
    .bind(task_id)
    .bind(action_id)
    .bind(Uuid::now_v7())
    .bind(&log.log_type)
    .bind(&log.content)
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|(id, created_at)| ActionLog {
        id,
        action_id,
        log_type: log.log_type.clone(),
        content: log.content.clone(),
        created_at,
    }))
}

pub async fn action_exists(
    tx: &mut Scoped,
    task_id: Uuid,
    action_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM task_actions WHERE task_id = $1 AND id = $2)")
        .bind(task_id)
        .bind(action_id)
        .fetch_one(tx)
        .await
}

pub async fn action_logs(
    tx: &mut Scoped,
    action_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<ActionLog>, bool), sqlx::Error> {
    let rows: Vec<(Uuid, String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT id, log_type, content, created_at FROM task_action_logs
         WHERE action_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
    )
    .bind(action_id)
    .bind(after)
    .bind(limit + 1)
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|(id, log_type, content, created_at)| ActionLog {
                id,
                action_id,
                log_type,
                content,
                created_at,
            })
            .collect(),
        more,
    ))
}

/// Stores a refreshed running summary unless a newer one (covering more messages) is already in.
pub async fn set_running_summary(
    tx: &mut Scoped,
    task_id: Uuid,
    summary: &str,
    covers: i32,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE tasks SET running_summary = $2, summary_message_count = $3,
                summary_updated_at = now()
         WHERE id = $1 AND summary_message_count < $3",
    )
    .bind(task_id)
    .bind(summary)
    .bind(covers)
    .execute(tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

//! Waits: creating, reading, locking and ending them, and recording an ended wait in the task's
//! metadata and messages.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::tasks::workspace::model::*;
use crate::tasks::workspace::waits::WaitStatus;

/// A `task_waits` row as the statements below select it (`id, task_id, target_type, target_id,
/// criteria, timeout_seconds, poll_interval, status, result_message, created_at, resolved_at`).
struct WaitRow {
    id: Uuid,
    task_id: Uuid,
    target_type: String,
    target_id: String,
    criteria: String,
    timeout_seconds: Option<i64>,
    poll_interval: Option<f64>,
    status: String,
    result_message: Option<String>,
    created_at: DateTime<Utc>,
    resolved_at: Option<DateTime<Utc>>,
}

impl From<WaitRow> for Wait {
    fn from(r: WaitRow) -> Self {
        Wait {
            wait_id: r.id,
            task_id: r.task_id,
            target_type: r.target_type,
            target_id: r.target_id,
            criteria: r.criteria,
            timeout_seconds: r.timeout_seconds,
            poll_interval: r.poll_interval,
            status: WaitStatus::parse(&r.status).unwrap_or(WaitStatus::Error),
            result_message: r.result_message,
            created_at: r.created_at,
            resolved_at: r.resolved_at,
            message_seq: None,
        }
    }
}

pub async fn insert_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
    wait: &NewWait,
) -> Result<Wait, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "INSERT INTO task_waits (tenant_id, user_id, task_id, id, target_type, target_id, criteria,
                                 timeout_seconds, poll_interval)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4, $5, $6, $7)
         RETURNING id, task_id, target_type, target_id, criteria, timeout_seconds,
                   poll_interval, status, result_message, created_at, resolved_at",
        task_id,
        id,
        wait.target_type.trim(),
        wait.target_id.trim(),
        wait.criteria.trim(),
        wait.timeout_seconds,
        wait.poll_interval
    )
    .fetch_one(tx)
    .await?;
    Ok(row.into())
}

/// The wait.
pub async fn wait(tx: &mut Scoped, task_id: Uuid, id: Uuid) -> Result<Option<Wait>, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits WHERE task_id = $1 AND id = $2",
        task_id,
        id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Into::into))
}

/// The wait, locked until the transaction ends.
pub async fn lock_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
) -> Result<Option<Wait>, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits WHERE task_id = $1 AND id = $2 FOR UPDATE",
        task_id,
        id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Into::into))
}

pub async fn end_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
    status: WaitStatus,
    result_message: Option<&str>,
) -> Result<Wait, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "UPDATE task_waits SET status = $3, result_message = $4, resolved_at = now()
         WHERE task_id = $1 AND id = $2
         RETURNING id, task_id, target_type, target_id, criteria, timeout_seconds,
                   poll_interval, status, result_message, created_at, resolved_at",
        task_id,
        id,
        status.as_str(),
        result_message
    )
    .fetch_one(tx)
    .await?;
    Ok(row.into())
}

/// What ending a wait did: the ended wait (with `message_seq`), and the task's message count
/// after the note and how many of its messages the running summary covers.
#[derive(Debug, Clone)]
pub struct WaitEnd {
    pub wait: Wait,
    pub message_count: i32,
    pub summary_covers: i32,
}

/// Ends a watching wait as `status` and records it: the wait row, the task metadata
/// (`active_wait_ids`, `last_wait_state`, `last_wait_event_at`) and `note` as a system message of
/// type wait. The caller holds the task's row lock (`metadata` was read under it) and has checked
/// the wait is still watching. The one path for a client's resolution and for a timeout.
pub async fn finish_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    wait_id: Uuid,
    mut metadata: Map<String, Value>,
    status: WaitStatus,
    result_message: Option<&str>,
    note: &str,
) -> Result<WaitEnd, sqlx::Error> {
    let mut wait = end_wait(&mut *tx, task_id, wait_id, status, result_message).await?;
    let at = wait.resolved_at.unwrap_or(wait.created_at);
    crate::tasks::workspace::waits::record_in_metadata(
        &mut metadata,
        &wait_id.to_string(),
        status,
        at,
    );
    save_metadata(&mut *tx, task_id, metadata).await?;
    let (seq, covered, _) = crate::tasks::store::append_message(
        &mut *tx,
        task_id,
        crate::tasks::model::Role::System,
        crate::tasks::model::MsgType::Wait,
        note,
    )
    .await?
    .ok_or(sqlx::Error::RowNotFound)?;
    wait.message_seq = Some(seq);
    Ok(WaitEnd {
        wait,
        message_count: seq,
        summary_covers: covered,
    })
}

pub async fn waits_after(
    tx: &mut Scoped,
    task_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Wait>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits
         WHERE task_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((rows.into_iter().map(Into::into).collect(), more))
}

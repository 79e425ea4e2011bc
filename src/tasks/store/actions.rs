//! Actions taken for plan items, and their logs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::FromRow;
use uuid::Uuid;

use super::*;
use crate::db::Scoped;

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

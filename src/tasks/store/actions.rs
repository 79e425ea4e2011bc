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
    let row = sqlx::query_as!(
        ActionRow,
        "INSERT INTO task_actions (tenant_id, user_id, id, task_id, version, ordinal, action_type,
                                   summary, status, input_data, output_data)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4,
                 $5, $6, $7, $8, $9)
         RETURNING id, task_id, version, ordinal, action_type, summary, status, input_data,
                   output_data, created_at, updated_at",
        Uuid::now_v7(),
        task_id,
        version,
        ordinal,
        action.action_type.as_str(),
        action.summary,
        action.status.unwrap_or(ActionStatus::Completed).as_str(),
        action.input_data.as_ref(),
        action.output_data.as_ref()
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!("UPDATE tasks SET updated_at = now() WHERE id = $1", task_id)
        .execute(&mut *tx)
        .await?;
    Ok(row.into())
}

pub async fn patch_action(
    tx: &mut Scoped,
    task_id: Uuid,
    action_id: Uuid,
    patch: &PatchAction,
) -> Result<Option<Action>, sqlx::Error> {
    let row = sqlx::query_as!(
        ActionRow,
        "UPDATE task_actions SET status = coalesce($3, status), summary = coalesce($4, summary),
                output_data = coalesce($5, output_data), updated_at = now()
         WHERE task_id = $1 AND id = $2
         RETURNING id, task_id, version, ordinal, action_type, summary, status, input_data,
                   output_data, created_at, updated_at",
        task_id,
        action_id,
        patch.status.map(ActionStatus::as_str),
        patch.summary.as_deref(),
        patch.output_data.as_ref()
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(Action::from))
}

/// A page of a step's actions. The scope is compared through sub-selects (see
/// [`crate::search::scope_unseen`]), so that the plan goes through the actions' index by task
/// and step for any caller: for a user the statistics do not know, the primary key (tenant,
/// user, id) costs the same and reads every action of the user in id order.
pub async fn actions(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    ordinal: i32,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Action>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        ActionRow,
        "SELECT id, task_id, version, ordinal, action_type, summary, status, input_data,
                   output_data, created_at, updated_at
         FROM task_actions
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user'))
           AND task_id = $1 AND version = $2 AND ordinal = $3 AND ($4::uuid IS NULL OR id > $4)
         ORDER BY id LIMIT $5",
        task_id,
        version,
        ordinal,
        after,
        limit + 1
    )
    .fetch_all(&mut *tx)
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
    struct InsertedLog {
        id: Uuid,
        created_at: DateTime<Utc>,
    }
    let row = sqlx::query_as!(
        InsertedLog,
        "INSERT INTO task_action_logs (tenant_id, user_id, id, task_id, action_id, log_type, content)
         SELECT tenant_id, user_id, $3, task_id, id, $4, $5 FROM task_actions
         WHERE task_id = $1 AND id = $2
         RETURNING id, created_at",
        task_id,
        action_id,
        Uuid::now_v7(),
        log.log_type,
        log.content
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|InsertedLog { id, created_at }| ActionLog {
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
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM task_actions WHERE task_id = $1 AND id = $2) AS "exists!""#,
        task_id,
        action_id
    )
    .fetch_one(&mut *tx)
    .await
}

/// A page of an action's logs, through their index by action for any caller (the scope compared
/// as in [`actions`]).
pub async fn action_logs(
    tx: &mut Scoped,
    action_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<ActionLog>, bool), sqlx::Error> {
    struct LogRow {
        id: Uuid,
        log_type: String,
        content: String,
        created_at: DateTime<Utc>,
    }
    let rows = sqlx::query_as!(
        LogRow,
        "SELECT id, log_type, content, created_at FROM task_action_logs
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user'))
           AND action_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
        action_id,
        after,
        limit + 1
    )
    .fetch_all(&mut *tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| ActionLog {
                id: r.id,
                action_id,
                log_type: r.log_type,
                content: r.content,
                created_at: r.created_at,
            })
            .collect(),
        more,
    ))
}

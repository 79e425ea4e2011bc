//! The task's configuration snapshot: stored once, read back.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::tasks::workspace::model::*;

/// A `task_configs` row: the snapshot and when it was stored.
struct ConfigRow {
    config: Value,
    created_at: DateTime<Utc>,
}

/// Stores the snapshot once. Returns it and whether this call created it; a different snapshot
/// already stored is 409.
pub async fn put_config(
    tx: &mut Scoped,
    task_id: Uuid,
    config: &Value,
    created_at: Option<DateTime<Utc>>,
) -> ApiResult<(TaskConfigSnapshot, bool)> {
    let inserted = sqlx::query_as!(
        ConfigRow,
        "INSERT INTO task_configs (tenant_id, user_id, task_id, config, created_at)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, coalesce($3, now()))
         ON CONFLICT DO NOTHING RETURNING config, created_at",
        task_id,
        config,
        created_at
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(ConfigRow { config, created_at }) = inserted {
        return Ok((
            TaskConfigSnapshot {
                task_id,
                config,
                created_at,
            },
            true,
        ));
    }
    let existing = get_config(tx, task_id)
        .await?
        .ok_or_else(|| task_not_found(task_id))?;
    if existing.config != *config {
        return Err(ApiError::conflict(
            "this task's configuration snapshot is already stored and cannot change",
        )
        .with("created_at", existing.created_at.to_rfc3339()));
    }
    Ok((existing, false))
}

pub async fn get_config(
    tx: &mut Scoped,
    task_id: Uuid,
) -> Result<Option<TaskConfigSnapshot>, sqlx::Error> {
    let row = sqlx::query_as!(
        ConfigRow,
        "SELECT config, created_at FROM task_configs WHERE task_id = $1",
        task_id
    )
    .fetch_optional(tx)
    .await?;
    Ok(
        row.map(|ConfigRow { config, created_at }| TaskConfigSnapshot {
            task_id,
            config,
            created_at,
        }),
    )
}

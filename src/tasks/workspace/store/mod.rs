//! The SQL of the task workspace: steps, tool calls, searchable step text, artifacts, the
//! configuration snapshot, waits, and search. Every function runs inside the caller's [`Scoped`]
//! transaction (row-level security limits it to the caller); inserts write `tenant_id`/`user_id`
//! from the transaction's settings.
//!
//! This file holds what the features share (the task lookups and the metadata helpers); the
//! statements by feature: `steps.rs`, `artifacts.rs`, `config.rs` (the configuration snapshot)
//! and `waits.rs`.
//!
//! [`Scoped`]: crate::db::Scoped

mod artifacts;
mod config;
mod steps;
mod waits;

pub use artifacts::*;
pub use config::*;
pub use steps::*;
pub use waits::*;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// 404 for a task the caller does not have.
pub fn task_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("no task {id}"))
}

/// Characters per indexed chunk of step text.
pub const CHUNK_CHARS: usize = 20_000;

/// Locks the task row and moves its `lastUpdatedAt` (a paused task resumes: see migration 0006);
/// 404 when the caller has no such task.
pub async fn touch_task(tx: &mut Scoped, task_id: Uuid) -> ApiResult<()> {
    sqlx::query_scalar!(
        "UPDATE tasks SET updated_at = now() WHERE id = $1 RETURNING id",
        task_id
    )
    .fetch_optional(tx)
    .await?
    .map(|_| ())
    .ok_or_else(|| task_not_found(task_id))
}

/// 404 unless the caller has the task.
pub async fn require_task(tx: &mut Scoped, task_id: Uuid) -> ApiResult<()> {
    sqlx::query_scalar!("SELECT 1 FROM tasks WHERE id = $1", task_id)
        .fetch_optional(tx)
        .await?
        .map(|_| ())
        .ok_or_else(|| task_not_found(task_id))
}

/// The task's metadata and coarse status, its row locked until the transaction ends; `None`
/// when there is no task.
pub async fn metadata_for_update(
    tx: &mut Scoped,
    task_id: Uuid,
) -> Result<Option<(Map<String, Value>, String)>, sqlx::Error> {
    struct MetadataRow {
        metadata: Value,
        status: String,
    }
    let row = sqlx::query_as!(
        MetadataRow,
        "SELECT metadata, status FROM tasks WHERE id = $1 FOR UPDATE",
        task_id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|MetadataRow { metadata, status }| {
        let map = match metadata {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        (map, status)
    }))
}

/// The task's metadata, its row locked until the transaction ends; 404 when there is no task.
pub async fn lock_metadata(tx: &mut Scoped, task_id: Uuid) -> ApiResult<Map<String, Value>> {
    metadata_for_update(tx, task_id)
        .await?
        .map(|(metadata, _)| metadata)
        .ok_or_else(|| task_not_found(task_id))
}

/// Writes the task's metadata and moves `lastUpdatedAt`.
pub async fn save_metadata(
    tx: &mut Scoped,
    task_id: Uuid,
    metadata: Map<String, Value>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE tasks SET metadata = $2, updated_at = now() WHERE id = $1",
        task_id,
        Value::Object(metadata)
    )
    .execute(tx)
    .await?;
    Ok(())
}

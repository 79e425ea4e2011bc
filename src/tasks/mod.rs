//! Task memory: tasks, plans and replans, step status, execution log, snapshots and "where was I?".
//!
//! Files: the routes by feature, `task_routes.rs` (a task itself: register, read, change, the
//! "where was I?" query), `plan_routes.rs` (plans, items, actions and their logs) and
//! `log_routes.rs` (events, messages, snapshots); `config.rs` (settings), `model.rs` (request and
//! response types), `lifecycle.rs` (the phase/status state machine), `plan.rs` (plan forms and
//! re-basing), `digest.rs` (the exact "where was I?"), `store.rs` (SQL), `summary.rs` (the
//! background running summary), `stuck.rs` (the stuck-alert cooldown); `workspace/` steps,
//! artifacts, waits, search and transfer. A handler parses, runs one [`Scoped`] transaction, and
//! maps the result; the helpers the routes share are here.

mod config;
pub mod digest;
pub mod digest_state;
pub mod lifecycle;
mod log_routes;
pub mod model;
pub mod plan;
mod plan_routes;
pub mod prompt;
pub mod store;
pub mod stuck;
pub mod summary;
mod task_routes;
pub mod workspace;

pub use config::TasksConfig;
pub use log_routes::*;
pub use plan_routes::*;
pub use task_routes::*;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use lifecycle::{Change, Illegal, Stamps};
use model::*;
use store::{TaskRow, TaskWrite};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
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

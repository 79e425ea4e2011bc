//! The task workflows, free of HTTP: each takes the caller's transaction and the parsed
//! request, does the work (the state machine, the SQL through `store`), and answers the domain
//! value. The routes extract, open the transaction (with its idempotency key), call one of these,
//! commit and answer. `tasks.rs` is a task itself (register, change, update, ask), `plans.rs`
//! replans, step status and actions, `log.rs` events, messages and snapshots.

pub mod log;
pub mod plans;
pub mod tasks;

use uuid::Uuid;

use super::lifecycle::{Change, Illegal, Stamps};
use super::model::*;
use super::store::{self, TaskRow, TaskWrite};
use super::{plan, summary};
use crate::access::Caller;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// What a write answers, and whether it appended task messages the running summary has not
/// covered: [`SummaryDue::schedule`] the refresh once the transaction has committed.
pub struct Written<T> {
    pub value: T,
    pub summary: SummaryDue,
}

impl<T> Written<T> {
    fn new(value: T, latest: Option<(i32, i32)>) -> Self {
        Written {
            value,
            summary: SummaryDue(latest),
        }
    }
}

/// The task's message count and the count its summary covers, after a write that appended
/// messages.
#[must_use = "schedule the summary refresh after the commit"]
pub struct SummaryDue(Option<(i32, i32)>);

impl SummaryDue {
    /// Refreshes the running summary in the background when the write calls for it.
    pub fn schedule(self, state: &AppState, caller: &Caller, task_id: Uuid) {
        if let Some((seq, covered)) = self.0 {
            summary::schedule(state, caller, task_id, seq, covered);
        }
    }
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
pub(crate) fn required_text<'a>(field: &str, text: &'a str, max: usize) -> ApiResult<&'a str> {
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

pub(crate) fn no_step(ordinal: i32, row: &TaskRow) -> ApiError {
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

pub(crate) async fn detail(tx: &mut Scoped, row: &TaskRow) -> ApiResult<TaskDetail> {
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

/// Records a lifecycle message when the change moved anything; answers where the messages end.
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

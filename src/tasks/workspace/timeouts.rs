//! The wait-timeout job: a watching wait whose `timeout_seconds` ran out ends as `timeout`, with
//! the `[Wait timeout] <criteria> → no result within …` message and the task metadata
//! (`active_wait_ids`, `last_wait_state`, `last_wait_event_at`) recorded exactly as a client's
//! resolution records them ([`store::finish_wait`]).
//!
//! Like the lifecycle sweeper it works across tenants on a path of its own: one transaction of
//! [`Job::WaitTimeouts`], as the role `mnemo_sweeper` (a policy lets it read `task_waits`), each
//! wait ended as `mnemo_app` acting as its own tenant and user, and the job's advisory lock so
//! that concurrent replicas skip a round instead of doing it twice. The wait is re-read under its
//! task's row lock, so a client's resolution racing the job ends it once.
//!
//! A timeout does not wake a paused task: the job's own update of the task would resume it (see
//! migration 0006), so a task paused before keeps its status.

use std::time::Duration;

use uuid::Uuid;

use super::store;
use super::sweeper::{Clock, SystemClock};
use super::waits::{self, WaitStatus};
use crate::db::{Db, Job};
use crate::state::AppState;
/// Most waits one round ends; the next round takes the rest.
const BATCH: i64 = 1000;

/// A wait past its timeout, with the tenant and user the round acts as.
struct DueWait {
    tenant_id: String,
    user_id: String,
    task_id: Uuid,
    id: Uuid,
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeoutReport {
    /// False when another replica held the lock.
    pub ran: bool,
    /// The waits that ended as `timeout`, oldest first.
    pub timed_out: Vec<Uuid>,
}

/// One round at the clock's "now": ends every watching wait created more than its
/// `timeout_seconds` before it.
pub async fn timeout_waits_once(db: &Db, clock: &dyn Clock) -> Result<TimeoutReport, sqlx::Error> {
    let now = clock.now();
    let Some(mut tx) = db.system(Job::WaitTimeouts).await? else {
        return Ok(TimeoutReport::default());
    };
    let mut report = TimeoutReport {
        ran: true,
        ..TimeoutReport::default()
    };
    // The elapsed seconds are compared, not a deadline computed in SQL: a huge timeout cannot
    // overflow a timestamp this way.
    let due = sqlx::query_as!(
        DueWait,
        "SELECT tenant_id, user_id, task_id, id FROM task_waits
         WHERE status = 'watching' AND timeout_seconds IS NOT NULL AND created_at < $1
           AND extract(epoch FROM $1 - created_at) > timeout_seconds
         ORDER BY created_at, id LIMIT $2",
        now,
        BATCH
    )
    .fetch_all(&mut tx)
    .await?;
    for DueWait {
        tenant_id,
        user_id,
        task_id,
        id: wait_id,
    } in due
    {
        let scoped = tx.act_as(&tenant_id, &user_id).await?;
        let Some((metadata, status)) = store::metadata_for_update(scoped, task_id).await? else {
            continue;
        };
        let Some(wait) = store::lock_wait(scoped, task_id, wait_id).await? else {
            continue;
        };
        // Ended meanwhile (a client's resolution), or not overdue after all.
        if wait.status != WaitStatus::Watching
            || !waits::is_overdue(wait.created_at, wait.timeout_seconds, now)
        {
            continue;
        }
        let result = waits::timeout_result(wait.timeout_seconds.unwrap_or_default());
        let note = waits::timeout_message(&wait.criteria, &result);
        store::finish_wait(
            scoped,
            task_id,
            wait_id,
            metadata,
            WaitStatus::Timeout,
            Some(&result),
            &note,
        )
        .await?;
        if status == "paused" {
            // The update above resumed it (the resume-on-update trigger); it was not the client's.
            sqlx::query!(
                "UPDATE tasks SET status = 'paused' WHERE id = $1 AND status = 'active'",
                task_id
            )
            .execute(&mut *scoped)
            .await?;
        }
        report.timed_out.push(wait_id);
    }
    tx.act_as_nobody().await?;
    tx.commit().await?;
    Ok(report)
}

/// Runs [`timeout_waits_once`] every `MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS` on the wall clock
/// until the runtime stops. A zero interval disables the job in this process.
pub fn spawn(state: &AppState) {
    let interval = state.config.tasks.wait_sweep_interval_secs;
    if interval == 0 {
        return;
    }
    let db = state.db.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(interval));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match timeout_waits_once(&db, &SystemClock).await {
                Ok(report) if !report.timed_out.is_empty() => {
                    tracing::info!(timed_out = report.timed_out.len(), "wait timeouts");
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "wait-timeout round failed"),
            }
        }
    });
}

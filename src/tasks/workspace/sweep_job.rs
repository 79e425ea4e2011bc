//! The lifecycle sweeper as a background job: pauses active tasks left without an update and
//! archives completed ones after a while (decision rules in [`super::sweeper`]).
//!
//! It works across tenants, so it does not use the request path: its one transaction is
//! [`Job::TaskLifecycle`]'s, as the role `mnemo_sweeper`, which a policy lets read `tasks` only;
//! each change is then made as `mnemo_app` acting as that task's own tenant and user
//! ([`System::act_as`](crate::db::System::act_as)), under the ordinary isolation policy. The
//! job's advisory lock makes concurrent sweepers (several replicas) skip a round instead of doing
//! it twice.

use std::time::Duration;

use uuid::Uuid;

use super::sweeper::{Clock, SystemClock, Thresholds, describe};
use crate::db::{Db, Job};
use crate::state::AppState;
/// Most tasks one round changes per kind; the next round takes the rest.
const BATCH: i64 = 1000;

/// A task the round changes, with the tenant and user it acts as.
struct TaskKey {
    tenant_id: String,
    user_id: String,
    id: Uuid,
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// False when another sweeper held the lock.
    pub ran: bool,
    pub paused: Vec<Uuid>,
    pub archived: Vec<Uuid>,
}

/// One round at the clock's "now".
pub async fn sweep_once(
    db: &Db,
    clock: &dyn Clock,
    thresholds: &Thresholds,
) -> Result<SweepReport, sqlx::Error> {
    let now = clock.now();
    let (pause_before, archive_before) = thresholds.cutoffs(now);
    let Some(mut tx) = db.system(Job::TaskLifecycle).await? else {
        return Ok(SweepReport::default());
    };
    let mut report = SweepReport {
        ran: true,
        ..SweepReport::default()
    };

    let stale = sqlx::query_as!(
        TaskKey,
        "SELECT tenant_id, user_id, id FROM tasks
         WHERE status = 'active' AND updated_at < $1 ORDER BY updated_at LIMIT $2",
        pause_before,
        BATCH
    )
    .fetch_all(&mut tx)
    .await?;
    let note = format!(
        "status: active → paused (no update for {})",
        describe(thresholds.pause_after)
    );
    for TaskKey {
        tenant_id,
        user_id,
        id,
    } in stale
    {
        let scoped = tx.act_as(&tenant_id, &user_id).await?;
        // The note goes first: it moves updated_at while the task is still active, so the
        // resume-on-update trigger does not undo the pause that follows.
        let paused = sqlx::query_scalar!(
            "WITH t AS (
                 UPDATE tasks SET message_count = message_count + 1, updated_at = now()
                 WHERE id = $1 AND status = 'active' AND updated_at < $2
                 RETURNING tenant_id, user_id, id, message_count
             ), m AS (
                 INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
                 SELECT tenant_id, user_id, id, message_count, 'system', $3, 'lifecycle' FROM t
             ), o AS (
                 INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source,
                                               task_seq)
                 SELECT tenant_id, user_id, 'task', id, 'message', message_count FROM t WHERE $4
             )
             SELECT id FROM t",
            id,
            pause_before,
            &note,
            scoped.queues_embeddings()
        )
        .fetch_optional(&mut *scoped)
        .await?;
        if paused.is_some() {
            sqlx::query!(
                "UPDATE tasks SET status = 'paused' WHERE id = $1 AND status = 'active'",
                id
            )
            .execute(&mut *scoped)
            .await?;
            report.paused.push(id);
        }
    }

    tx.act_as_nobody().await?;
    let done = sqlx::query_as!(
        TaskKey,
        "SELECT tenant_id, user_id, id FROM tasks
         WHERE status = 'completed' AND archived_at IS NULL
           AND coalesce(completed_at, updated_at) < $1
         ORDER BY coalesce(completed_at, updated_at) LIMIT $2",
        archive_before,
        BATCH
    )
    .fetch_all(&mut tx)
    .await?;
    for TaskKey {
        tenant_id,
        user_id,
        id,
    } in done
    {
        let scoped = tx.act_as(&tenant_id, &user_id).await?;
        let archived = sqlx::query!(
            "UPDATE tasks SET archived_at = $2
             WHERE id = $1 AND status = 'completed' AND archived_at IS NULL
               AND coalesce(completed_at, updated_at) < $3",
            id,
            now,
            archive_before
        )
        .execute(&mut *scoped)
        .await?;
        if archived.rows_affected() > 0 {
            report.archived.push(id);
        }
    }
    tx.commit().await?;
    Ok(report)
}

/// Runs [`sweep_once`] every `interval` on the wall clock until the runtime stops. A zero
/// interval disables the job.
pub fn spawn(state: &AppState) {
    let config = &state.config.tasks;
    let interval = config.sweep_interval_secs;
    if interval == 0 {
        return;
    }
    let thresholds = Thresholds::from_secs(config.pause_after_secs, config.archive_after_secs);
    let db = state.db.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(interval));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match sweep_once(&db, &SystemClock, &thresholds).await {
                Ok(report) if !report.paused.is_empty() || !report.archived.is_empty() => {
                    tracing::info!(
                        paused = report.paused.len(),
                        archived = report.archived.len(),
                        "lifecycle sweep"
                    );
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "lifecycle sweep failed"),
            }
        }
    });
}

//! The lifecycle sweeper as a background job: pauses active tasks left without an update and
//! archives completed ones after a while (decision rules in [`super::sweeper`]).
//!
//! It works across tenants, so it does not use the request path ([`crate::db::Scoped`]). Its one
//! transaction runs as `mnemo_app` with `mnemo.sweeper = 'on'`, which a policy of migration 0006
//! honours for reading `tasks` only; each change is then made with that task's own tenant and
//! user set, under the ordinary isolation policy. A transaction-level advisory lock makes
//! concurrent sweepers (several replicas) skip a round instead of doing it twice.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::sweeper::{Clock, SystemClock, Thresholds, describe};
use crate::state::AppState;

/// Key of the advisory lock (an arbitrary constant: "mnemo sweep").
const LOCK_KEY: i64 = 0x6d6e_656d_6f73_7770;
/// Most tasks one round changes per kind; the next round takes the rest.
const BATCH: i64 = 1000;

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// False when another sweeper held the lock.
    pub ran: bool,
    pub paused: Vec<Uuid>,
    pub archived: Vec<Uuid>,
}

pub(super) async fn act_as(
    tx: &mut PgConnection,
    tenant: &str,
    user: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('mnemo.tenant', $1, true), set_config('mnemo.user', $2, true)")
        .bind(tenant)
        .bind(user)
        .execute(tx)
        .await?;
    Ok(())
}

/// One round at the clock's "now".
pub async fn sweep_once(
    pool: &PgPool,
    clock: &dyn Clock,
    thresholds: &Thresholds,
) -> Result<SweepReport, sqlx::Error> {
    let now = clock.now();
    let (pause_before, archive_before) = thresholds.cutoffs(now);
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.sweeper', 'on', true)",
    )
    .execute(&mut *tx)
    .await?;
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *tx)
        .await?;
    if !locked {
        return Ok(SweepReport::default());
    }
    let mut report = SweepReport {
        ran: true,
        ..SweepReport::default()
    };

    let stale: Vec<(String, String, Uuid)> = sqlx::query_as(
        "SELECT tenant_id, user_id, id FROM tasks
         WHERE status = 'active' AND updated_at < $1 ORDER BY updated_at LIMIT $2",
    )
    .bind(pause_before)
    .bind(BATCH)
    .fetch_all(&mut *tx)
    .await?;
    let note = format!(
        "status: active → paused (no update for {})",
        describe(thresholds.pause_after)
    );
    for (tenant, user, id) in stale {
        act_as(&mut tx, &tenant, &user).await?;
        // The note goes first: it moves updated_at while the task is still active, so the
        // resume-on-update trigger does not undo the pause that follows.
        let paused: Option<Uuid> = sqlx::query_scalar(
            "WITH t AS (
                 UPDATE tasks SET message_count = message_count + 1, updated_at = now()
                 WHERE id = $1 AND status = 'active' AND updated_at < $2
                 RETURNING tenant_id, user_id, id, message_count
             ), m AS (
                 INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
                 SELECT tenant_id, user_id, id, message_count, 'system', $3, 'lifecycle' FROM t
             )
             SELECT id FROM t",
        )
        .bind(id)
        .bind(pause_before)
        .bind(&note)
        .fetch_optional(&mut *tx)
        .await?;
        if paused.is_some() {
            sqlx::query("UPDATE tasks SET status = 'paused' WHERE id = $1 AND status = 'active'")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            report.paused.push(id);
        }
    }

    act_as(&mut tx, "", "").await?;
    let done: Vec<(String, String, Uuid)> = sqlx::query_as(
        "SELECT tenant_id, user_id, id FROM tasks
         WHERE status = 'completed' AND archived_at IS NULL
           AND coalesce(completed_at, updated_at) < $1
         ORDER BY coalesce(completed_at, updated_at) LIMIT $2",
    )
    .bind(archive_before)
    .bind(BATCH)
    .fetch_all(&mut *tx)
    .await?;
    for (tenant, user, id) in done {
        act_as(&mut tx, &tenant, &user).await?;
        let archived = sqlx::query(
            "UPDATE tasks SET archived_at = $2
             WHERE id = $1 AND status = 'completed' AND archived_at IS NULL
               AND coalesce(completed_at, updated_at) < $3",
        )
        .bind(id)
        .bind(now)
        .bind(archive_before)
        .execute(&mut *tx)
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
    let pool = state.pool.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(interval));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match sweep_once(&pool, &SystemClock, &thresholds).await {
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

//! Retention sweeper: deletes conversation history older than `MNEMO_HISTORY_RETENTION_DAYS`.
//!
//! Reads already hide expired rows (every query filters on the cutoff), so the sweeper only
//! reclaims space and may lag. It runs in the background for every tenant, which is why it does
//! NOT use the request path ([`crate::db::Scoped`], one tenant and user): its transactions are
//! [`Job::HistoryRetention`]'s, as the `mnemo_retention` role, whose policies (migration 0004) let
//! it read and delete these tables across tenants and nothing else. Each transaction deletes at
//! most `batch` rows per table, under the job's transaction-scoped advisory lock, so only one
//! replica sweeps at a time and a sweep never holds long locks.

use std::time::Duration;

use super::ConversationsConfig;
use crate::db::{Db, Job};

/// What one sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepOutcome {
    /// Another replica holds the lock; nothing was done.
    Skipped,
    /// Rows deleted (messages, batch records and sessions together).
    Deleted(u64),
}

/// Sweeps until nothing expired is left, in transactions of at most `batch` rows per table.
pub async fn sweep_once(
    db: &Db,
    retention_days: i32,
    batch: i64,
) -> Result<SweepOutcome, sqlx::Error> {
    let mut total = 0u64;
    loop {
        // The explicit cross-tenant path: the retention role, never the request role.
        let Some(mut tx) = db.system(Job::HistoryRetention).await? else {
            return Ok(if total == 0 {
                SweepOutcome::Skipped
            } else {
                SweepOutcome::Deleted(total)
            });
        };
        let full = |n: u64| i64::try_from(n).unwrap_or(i64::MAX) >= batch;
        let messages = sqlx::query!(
            "DELETE FROM conversation_messages WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM conversation_messages
                 WHERE archived_at < now() - make_interval(days => $1) LIMIT $2))",
            retention_days,
            batch
        )
        .execute(&mut tx)
        .await?
        .rows_affected();
        let batches = sqlx::query!(
            "DELETE FROM recent_conversation_history WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM recent_conversation_history
                 WHERE archived_at < now() - make_interval(days => $1) LIMIT $2))",
            retention_days,
            batch
        )
        .execute(&mut tx)
        .await?
        .rows_affected();
        // Sessions go only once no expired message is left, so their cascade deletes nothing
        // unaccounted and the bound per transaction holds. A session expires once its last
        // activity does; all its messages are older, so they went first and the cascade has
        // little left to do.
        let mut more = full(messages) || full(batches);
        let sessions = if more {
            0
        } else {
            sqlx::query!(
                "DELETE FROM agent_sessions WHERE ctid = ANY (ARRAY(
                     SELECT ctid FROM agent_sessions
                     WHERE last_activity_at < now() - make_interval(days => $1) LIMIT $2))",
                retention_days,
                batch
            )
            .execute(&mut tx)
            .await?
            .rows_affected()
        };
        more |= full(sessions);
        total += messages + batches + sessions;
        tx.commit().await?;
        if !more {
            return Ok(SweepOutcome::Deleted(total));
        }
    }
}

/// Starts the background sweeper when retention is configured; `None` otherwise.
pub fn spawn(db: Db, config: &ConversationsConfig) -> Option<tokio::task::JoinHandle<()>> {
    let days = i32::try_from(config.history_retention_days?).ok()?;
    let every = Duration::from_secs(config.history_sweep_interval_secs.max(1));
    let batch = i64::try_from(config.history_sweep_batch).unwrap_or(i64::MAX);
    Some(tokio::spawn(async move {
        // First sweep soon after start, then on the interval.
        tokio::time::sleep(every.min(Duration::from_secs(60))).await;
        loop {
            match sweep_once(&db, days, batch).await {
                Ok(SweepOutcome::Deleted(n)) if n > 0 => {
                    tracing::info!(deleted = n, "conversation retention sweep");
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "conversation retention sweep failed"),
            }
            tokio::time::sleep(every).await;
        }
    }))
}

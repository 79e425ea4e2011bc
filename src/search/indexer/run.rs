//! Driving the indexer: one pass with its counters, the loop that runs passes until shutdown, and
//! the backlog count.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::db::{Db, Job};
use tokio_util::sync::CancellationToken;

use super::pass::pass;
use super::*;
use crate::embed::Embedder;

/// Rows waiting in the outbox (due or not).
pub async fn backlog(db: &Db) -> Result<u64, sqlx::Error> {
    let mut tx = begin(db, Job::Indexer).await?;
    let n = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM embedding_outbox"#)
        .fetch_one(&mut tx)
        .await?;
    tx.commit().await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Claims due rows, embeds their chunks and stores the vectors, in one transaction.
pub async fn run_once(db: &Db, embedder: &Embedder, stats: &IndexerStats) -> Pass {
    match pass(db, embedder).await {
        Ok(Some((rows, chunks))) => {
            stats.embedded.fetch_add(chunks as u64, Ordering::Relaxed);
            Pass::Done { rows, chunks }
        }
        Ok(None) => Pass::Idle,
        Err(err) => {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "embedding batch failed; it will be retried");
            Pass::Failed(err)
        }
    }
}

/// Runs passes until `cancel` fires: back to back while there is work, every [`IDLE_POLL`] when
/// idle, backing off after a failure. (`/metrics` counts the backlog itself when scraped, so
/// the loop does not count it on every pass.)
pub async fn run(db: Db, embedder: Embedder, stats: Arc<IndexerStats>, cancel: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let wait = match run_once(&db, &embedder, &stats).await {
            Pass::Done { .. } => {
                failures = 0;
                Duration::ZERO
            }
            Pass::Idle => IDLE_POLL,
            Pass::Failed(_) => {
                failures = failures.saturating_add(1);
                Duration::from_millis(500u64.saturating_mul(1 << failures.min(6)))
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

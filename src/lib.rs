//! mnemo: a memory service for LLM agents.
//!
//! [`app`] builds the complete router for a state and [`serve`] runs it on a listener until the
//! shutdown future resolves, so tests start the real server on port 0.

pub mod access;
pub mod auth;
pub mod config;
pub mod conversations;
pub mod db;
pub mod embed;
pub mod error;
pub mod extract;
pub mod fair_use;
pub mod http;
pub mod idempotency;
pub mod llm;
pub mod mcp;
pub mod memories;
pub mod metrics;
pub mod notes;
pub mod openapi;
pub mod pagination;
pub mod platform;
pub mod recall;
pub mod rights;
pub mod search;
pub mod state;
pub mod tasks;
#[cfg(test)]
mod testing;
pub mod tools;

use std::future::Future;

pub use http::app;
pub use state::AppState;

/// Starts the jobs that run beside the server: the conversation retention sweeper (when
/// `MNEMO_HISTORY_RETENTION_DAYS` is set), the task lifecycle sweeper (pause idle tasks,
/// archive old completed ones; off when its interval is 0), the wait-timeout job (end waits
/// whose timeout ran out; off when its interval is 0) and the sweep of expired idempotency
/// keys, each under a PostgreSQL advisory lock
/// so that one replica runs it at a time, and with an embedder the indexer (replicas share its
/// work). The returned token stops the indexer. `mnemo serve` calls this; tests
/// drive the sweeps directly with their own clock.
pub fn start_background_jobs(state: &AppState) -> tokio_util::sync::CancellationToken {
    conversations::sweeper::spawn(state.db.clone(), &state.config.conversations);
    tasks::workspace::sweep_job::spawn(state);
    tasks::workspace::timeouts::spawn(state);
    idempotency::spawn(state.db.clone());
    let cancel = tokio_util::sync::CancellationToken::new();
    if let Some(embedder) = state.embedder.clone() {
        tokio::spawn(search::indexer::run(
            state.db.clone(),
            embedder,
            state.indexer.clone(),
            cancel.clone(),
        ));
    }
    cancel
}

/// Readies semantic search when an embedder is configured: the vector tables (and pgvector),
/// this model's index, and a backfill queueing every memory and message without a vector of this
/// model (after an embedder is first set, or its model changed). Errors name what is missing.
/// `admin` is a database handle without the requests' statement timeout (index builds may take long).
pub async fn prepare_embeddings(state: &AppState, admin: &db::Db) -> Result<(), String> {
    let Some(embedder) = &state.embedder else {
        return Ok(());
    };
    search::indexer::prepare_schema(admin, embedder).await?;
    let queued = search::indexer::backfill(admin, embedder)
        .await
        .map_err(|e| format!("queueing texts for the embedder failed: {e}"))?;
    if queued > 0 {
        tracing::info!(
            queued,
            model = embedder.model_id(),
            "texts queued for embedding"
        );
    }
    Ok(())
}

/// Serves `state` on `listener` until `shutdown` resolves; requests in flight then complete, and
/// the background work they started (up to 30 s).
/// Connection limits and the header-read timeout come from the configuration.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = ConnectionLimits::from_config(&state.config);
    let jobs = state.jobs.clone();
    let served = serve_router_with(listener, app(state), limits, shutdown).await;
    // The work requests left running (summaries, a streamed chat turn) finishes before exit.
    jobs.close();
    if tokio::time::timeout(JOBS_DRAIN, jobs.wait()).await.is_err() {
        tracing::warn!(
            left = jobs.len(),
            "background work still running at shutdown was abandoned"
        );
    }
    served
}

/// How long shutdown waits for background work requests started.
const JOBS_DRAIN: std::time::Duration = std::time::Duration::from_secs(30);

/// What a connection may hold and how long it may take to send its request head.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at once; a connection past it is closed at once.
    pub max_connections: usize,
    /// Open connections from one client address at once.
    pub max_connections_per_ip: usize,
    /// Time a client has to send a request's head (request line and headers); a slower client
    /// is disconnected, so connections trickling headers cannot pile up.
    pub header_read_timeout: std::time::Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 10_000,
            max_connections_per_ip: 256,
            header_read_timeout: std::time::Duration::from_secs(10),
        }
    }
}

impl ConnectionLimits {
    pub fn from_config(config: &config::Config) -> Self {
        ConnectionLimits {
            max_connections: config.max_connections,
            max_connections_per_ip: config.max_connections_per_ip,
            header_read_timeout: std::time::Duration::from_secs(config.header_read_timeout_secs),
        }
    }
}

/// Serves any router (normally [`app`]) with the default [`ConnectionLimits`].
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_with(listener, router, ConnectionLimits::default(), shutdown).await
}

/// Serves `router` with graceful shutdown: when `shutdown` resolves the listener closes, and
/// requests already being handled run to completion before this returns. Each connection needs
/// a slot under `limits` (else it is closed at once) and must send each request head within the
/// header-read timeout.
pub async fn serve_router_with(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt;

    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let per_ip = std::sync::Arc::new(PerIp::new(limits.max_connections_per_ip));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection limit reached; closing");
            continue;
        };
        let Some(ip_slot) = PerIp::enter(&per_ip, peer.ip()) else {
            tracing::debug!(%peer, "per-address connection limit reached; closing");
            continue;
        };
        let service = TowerToHyperService::new(router.clone().map_request(
            |req: axum::http::Request<hyper::body::Incoming>| req.map(axum::body::Body::new),
        ));
        let watcher = graceful.watcher();
        let header_read_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            builder.http2().timer(TokioTimer::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(err) = watcher.watch(conn).await {
                tracing::trace!(error = %err, "connection ended with an error");
            }
            drop(slot);
            drop(ip_slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Open connections per client address.
struct PerIp {
    max: usize,
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// A connection's place in its address's count, given back when dropped.
struct IpSlot {
    table: std::sync::Arc<PerIp>,
    ip: std::net::IpAddr,
}

impl PerIp {
    fn new(max: usize) -> Self {
        PerIp {
            max,
            open: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn enter(table: &std::sync::Arc<PerIp>, ip: std::net::IpAddr) -> Option<IpSlot> {
        let mut open = table.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= table.max {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            table: table.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

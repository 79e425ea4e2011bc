//! mnemo: a memory service for LLM agents.
//!
//! [`app`] builds the complete router for a state and [`serve`] runs it on a listener until the
//! shutdown future resolves, so tests start the real server on port 0.

pub mod auth;
pub mod config;
pub mod conversations;
pub mod db;
pub mod embed;
pub mod error;
pub mod extract;
pub mod fair_use;
pub mod http;
pub mod llm;
pub mod memories;
pub mod metrics;
pub mod notes;
pub mod openapi;
pub mod pagination;
pub mod platform;
pub mod recall;
pub mod search;
pub mod state;
pub mod tasks;

use std::future::Future;

pub use http::app;
pub use state::AppState;

/// Starts the jobs that run beside the server: the conversation retention sweeper (when
/// `MNEMO_HISTORY_RETENTION_DAYS` is set) and the task lifecycle sweeper (pause idle tasks,
/// archive old completed ones; off when its interval is 0), each under a PostgreSQL advisory lock
/// so that one replica runs it at a time, and with an embedder the indexer (replicas share its
/// work). The returned token stops the indexer. `mnemo serve` calls this; tests
/// drive the sweeps directly with their own clock.
pub fn start_background_jobs(state: &AppState) -> tokio_util::sync::CancellationToken {
    conversations::sweeper::spawn(state.pool.clone(), &state.config.conversations);
    tasks::workspace::sweep_job::spawn(state);
    let cancel = tokio_util::sync::CancellationToken::new();
    if let Some(embedder) = state.embedder.clone() {
        tokio::spawn(search::indexer::run(
            state.pool.clone(),
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
/// `admin` is a pool without the requests' statement timeout (index builds may take long).
pub async fn prepare_embeddings(state: &AppState, admin: &sqlx::PgPool) -> Result<(), String> {
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

/// Serves `state` on `listener` until `shutdown` resolves; requests in flight then complete.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, app(state), shutdown).await
}

/// Serves any router (normally [`app`]) with graceful shutdown: when `shutdown` resolves the
/// listener closes, and requests already being handled run to completion before this returns.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

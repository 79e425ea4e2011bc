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

/// Starts the jobs that run beside the server, each under a PostgreSQL advisory lock so that one
/// replica runs it at a time: the conversation retention sweeper (when
/// `MNEMO_HISTORY_RETENTION_DAYS` is set) and the task lifecycle sweeper (pause idle tasks,
/// archive old completed ones; off when its interval is 0). `mnemo serve` calls this; tests
/// drive the sweeps directly with their own clock.
pub fn start_background_jobs(state: &AppState) {
    conversations::sweeper::spawn(state.pool.clone(), &state.config.conversations);
    tasks::workspace::sweep_job::spawn(state);
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

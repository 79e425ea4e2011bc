//! mnemo: a memory service for LLM agents.
//!
//! [`app`] builds the complete router for a state and [`serve`] runs it on a listener until the
//! shutdown future resolves, so tests start the real server on port 0.

pub mod auth;
pub mod config;
pub mod conversations;
pub mod db;
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
pub mod state;
pub mod tasks;

use std::future::Future;

pub use http::app;
pub use state::AppState;

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

//! Shared application state, cloned cheaply into every handler.

use std::sync::Arc;

use sqlx::PgPool;

use crate::auth::Verifier;
use crate::config::Config;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub config: Arc<Config>,
    pub verifier: Arc<Verifier>,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// Builds the state from a validated config and a connected pool.
    pub async fn new(config: Config, pool: PgPool) -> Result<Self, String> {
        let verifier = Verifier::from_config(&config).await?;
        Ok(AppState {
            pool,
            config: Arc::new(config),
            verifier: Arc::new(verifier),
            metrics: Arc::new(Metrics::default()),
        })
    }
}

//! Task memory: tasks, plans and replans, step status, execution log, snapshots and "where was I?" (issues 6 and 7).

pub mod workspace;

use clap::Args;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args, Default)]
pub struct TasksConfig {}

impl TasksConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}

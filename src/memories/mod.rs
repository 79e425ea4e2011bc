//! Detail memory: large tool outputs stored once, referenced by `[MemoryRef: <key> - <description>]` placeholders, retrieved in pages, grepped and searched (issue 3).

use clap::Args;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args, Default)]
pub struct MemoriesConfig {}

impl MemoriesConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}

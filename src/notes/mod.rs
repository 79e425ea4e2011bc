//! Long-term notes: per-user, per-agent Markdown notes with section edits, optimistic concurrency and revisions (issue 4).

pub mod sections;

use clap::Args;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args, Default)]
pub struct NotesConfig {}

impl NotesConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}

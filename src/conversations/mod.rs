//! Conversation memory: batched archival, sendBeacon uploads, sessions, the short-term window and chat context (issue 5).

use clap::Args;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args, Default)]
pub struct ConversationsConfig {}

impl ConversationsConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}

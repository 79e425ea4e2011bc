//! Types of a task's message history and of its context snapshots.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{MsgType, Role};

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TaskMessage)]
pub struct Message {
    pub seq: i32,
    pub role: Role,
    pub msg_type: MsgType,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// The answer to a `stuck` message inside the cooldown after the last one: nothing was stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StuckSuppressed {
    /// Always true.
    pub suppressed: bool,
    /// When the last stored `stuck` message arrived (`last_stuck_alert_at` in the task metadata).
    pub last_stuck_alert_at: DateTime<Utc>,
    /// From then on a `stuck` message is stored again.
    pub cooldown_ends_at: DateTime<Utc>,
    /// The cooldown, `MNEMO_TASKS_STUCK_COOLDOWN_SECS`.
    pub cooldown_seconds: u64,
}

/// A message to append to a task's history.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewTaskMessage)]
pub struct NewMessage {
    /// Default `agent`.
    #[serde(default)]
    pub role: Option<Role>,
    #[schema(min_length = 1, max_length = 100_000, pattern = r"\S")]
    pub content: String,
    /// Default `text`.
    #[serde(default)]
    pub msg_type: Option<MsgType>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TaskMessagePage)]
pub struct MessagePage {
    pub items: Vec<Message>,
    pub next_cursor: Option<String>,
}

/// A context snapshot (an entry of `contextHistory`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSnapshot {
    /// When it was taken: `initial_context`, `after_summarization`, `before_stage_1`, ...
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub label: String,
    pub content: String,
    #[serde(default)]
    pub is_summarized: bool,
    /// Default: now.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Snapshot {
    /// Order of the snapshots (1-based).
    pub seq: i32,
    pub label: String,
    pub content: String,
    pub is_summarized: bool,
    pub timestamp: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SnapshotPage {
    pub items: Vec<Snapshot>,
    pub next_cursor: Option<String>,
}

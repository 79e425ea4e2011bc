//! Types of the actions recorded under plan items, their logs, and the execution log's events.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{ActionStatus, ActionType, EventStatus, StageLabel};

/// An action to record under a plan item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewAction {
    pub action_type: ActionType,
    #[schema(min_length = 1, max_length = 10_000, pattern = r"\S")]
    pub summary: String,
    /// Default `completed`.
    #[serde(default)]
    pub status: Option<ActionStatus>,
    #[serde(default)]
    pub input_data: Option<Value>,
    #[serde(default)]
    pub output_data: Option<Value>,
}

/// `PATCH /api/tasks/{id}/actions/{action_id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchAction {
    #[serde(default)]
    pub status: Option<ActionStatus>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 10_000, pattern = r"\S")]
    pub summary: Option<String>,
    #[serde(default)]
    pub output_data: Option<Value>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Action {
    pub id: Uuid,
    pub task_id: Uuid,
    pub plan_version: i32,
    pub ordinal: i32,
    pub action_type: ActionType,
    pub summary: String,
    pub status: ActionStatus,
    pub input_data: Option<Value>,
    pub output_data: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionPage {
    pub items: Vec<Action>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewActionLog {
    /// Free-form kind: `stdout`, `stderr`, `screenshot`, ...
    #[schema(min_length = 1, max_length = 100, pattern = r"\S")]
    pub log_type: String,
    pub content: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionLog {
    pub id: Uuid,
    pub action_id: Uuid,
    pub log_type: String,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionLogPage {
    pub items: Vec<ActionLog>,
    pub next_cursor: Option<String>,
}

/// The `error_info` of an execution-log event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorInfo {
    pub message: String,
    #[serde(default)]
    pub details: Option<Value>,
}

/// An execution-log event in the task_memory_bank log shape.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    /// Default: the time of the append.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
    /// A stage number, or a label such as `"Initial"` or `"System"`.
    #[serde(default)]
    #[schema(value_type = Option<StageLabel>)]
    pub stage: Option<Value>,
    #[serde(default)]
    pub sub_task_id: Option<String>,
    /// Narrative from the plan, or the system action's description.
    #[schema(min_length = 1, max_length = 100_000, pattern = r"\S")]
    pub step_narrative: String,
    /// The tool used, or `"System"`.
    #[serde(default)]
    pub tool_name: Option<String>,
    pub status: EventStatus,
    #[serde(default)]
    pub input_payload: Option<Value>,
    #[serde(default)]
    pub result_data: Option<Value>,
    #[serde(default)]
    pub error_info: Option<ErrorInfo>,
    #[serde(default)]
    #[schema(minimum = 0)]
    pub duration_ms: Option<i64>,
}

/// A batch of events, appended in one transaction and in this order.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEvents {
    /// 1 to `MNEMO_TASKS_MAX_BATCH_EVENTS` (default 1000) events.
    #[schema(min_items = 1, max_items = 1000)]
    pub events: Vec<NewEvent>,
}

/// Where a batch landed in the log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Appended {
    pub count: usize,
    pub first_seq: i64,
    pub last_seq: i64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Event {
    /// Position in the task's log (1-based, gap-free).
    pub seq: i64,
    pub timestamp: DateTime<Utc>,
    pub stage: Option<Value>,
    pub sub_task_id: Option<String>,
    pub step_narrative: String,
    pub tool_name: Option<String>,
    pub status: String,
    pub input_payload: Option<Value>,
    pub result_data: Option<Value>,
    pub error_info: Option<Value>,
    pub duration_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<Event>,
    pub next_cursor: Option<String>,
}

/// Filters and paging of the execution log.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    /// Page size, 1..=500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
    /// Only events with this status (`COMPLETED`, `FAILED`, ...).
    pub status: Option<String>,
    pub tool_name: Option<String>,
    pub sub_task_id: Option<String>,
}

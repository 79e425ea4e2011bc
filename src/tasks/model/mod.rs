//! Request and response types of the task API, and the enums stored as text.

mod history;
mod log;
mod schemas;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::digest::Digest;
use super::lifecycle::{Phase, Status};

pub use history::{
    Message, MessagePage, NewMessage, NewSnapshot, Snapshot, SnapshotPage, StuckSuppressed,
};
pub use log::{
    Action, ActionLog, ActionLogPage, ActionPage, Appended, ErrorInfo, Event, EventPage,
    EventQuery, NewAction, NewActionLog, NewEvent, NewEvents, PatchAction,
};
pub use schemas::{PlanInput, StageLabel};

/// An enum stored and sent as text. Its schema is written from the same texts serde uses, so the
/// document lists exactly the values on the wire.
macro_rules! text_enum {
    ($(#[doc = $doc:literal])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                let doc: &[&str] = &[$($doc),*];
                let description = doc.iter().map(|line| line.trim()).collect::<Vec<_>>().join("\n");
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description((!description.is_empty()).then_some(description))
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }
    };
}

text_enum!(
    /// Status of a plan item.
    ItemStatus { Pending => "pending", Active => "active", Completed => "completed", Failed => "failed", Skipped => "skipped" }
);
text_enum!(
    /// Kind of an action taken for a plan item.
    ActionType { Cli => "cli", Gui => "gui", Wait => "wait", Vision => "vision", Reasoning => "reasoning", Other => "other" }
);
text_enum!(
    /// Status of an action.
    ActionStatus { Started => "started", Completed => "completed", Failed => "failed" }
);
text_enum!(
    /// Who wrote a task message.
    Role { Agent => "agent", System => "system", User => "user" }
);
text_enum!(
    /// Kind of a task message.
    MsgType { Text => "text", Lifecycle => "lifecycle", Progress => "progress", Wait => "wait", Stuck => "stuck", Plan => "plan" }
);
text_enum!(
    /// Status of an execution-log event.
    EventStatus { Completed => "COMPLETED", Failed => "FAILED", Skipped => "SKIPPED", SystemAction => "SYSTEM_ACTION", SystemError => "SYSTEM_ERROR" }
);

/// The error summary of a failed task.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ErrorSummary {
    /// Stage number or label where the task failed.
    #[serde(default)]
    pub failed_at_stage: Option<Value>,
    #[serde(default)]
    pub failed_step_narrative: Option<String>,
    #[serde(default)]
    pub error_message: Option<String>,
}

/// The timestamps of a task's phases.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Timestamps {
    pub created_at: DateTime<Utc>,
    pub plan_generated_at: Option<DateTime<Utc>>,
    pub execution_started_at: Option<DateTime<Utc>>,
    pub synthesis_started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Every change a client makes moves it.
    pub last_updated_at: DateTime<Utc>,
    /// When the lifecycle sweeper archived the task (completed and untouched past the archive
    /// threshold). Archived tasks stay readable but leave `GET /api/tasks` unless
    /// `include_archived=true`.
    pub archived_at: Option<DateTime<Utc>>,
}

/// A task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Task {
    pub id: Uuid,
    pub name: String,
    pub original_user_task: Option<String>,
    pub status: Status,
    pub phase: Phase,
    pub metadata: Value,
    pub final_answer: Option<String>,
    pub error_summary: Option<ErrorSummary>,
    /// Kept up to date in the background every few messages.
    pub running_summary: Option<String>,
    /// How many messages the running summary covers.
    pub summary_message_count: i32,
    pub summary_updated_at: Option<DateTime<Utc>>,
    /// The active plan version (0: no plan yet).
    pub plan_version: i32,
    pub timestamps: Timestamps,
}

/// A plan item (a step of a plan version).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanItem {
    pub id: Uuid,
    /// 1-based position in its plan ("Step 1").
    pub ordinal: i32,
    pub stage: Option<i32>,
    pub title: String,
    pub tool: Option<String>,
    pub input: Option<Value>,
    pub narrative: Option<String>,
    pub status: ItemStatus,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub duration_seconds: Option<f64>,
    /// On a replan: the ordinal of the previous version's item whose status this one took.
    pub rebased_from: Option<i32>,
}

/// One plan version with its items.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Plan {
    pub version: i32,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The plan as it was sent.
    pub plan: Value,
    pub items: Vec<PlanItem>,
}

/// A plan version without its items.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanVersion {
    pub version: i32,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub steps: i64,
    pub active: bool,
}

/// Every plan version of a task, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanVersions {
    pub versions: Vec<PlanVersion>,
}

/// How much a task holds.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Counts {
    pub items: i64,
    pub pending: i64,
    pub active: i64,
    pub completed: i64,
    pub failed: i64,
    pub skipped: i64,
    pub plan_versions: i32,
    pub events: i64,
    pub messages: i32,
    pub snapshots: i32,
}

/// A task with its active plan and counts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: Task,
    /// The active plan version with item status; null before the first plan.
    pub plan: Option<Plan>,
    pub counts: Counts,
}

/// `task_register`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterTask {
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub name: String,
    /// A list of step titles, or stage objects `[{stage, steps: [{stepDescription, toolName,
    /// sub_task_input, narrative_step}]}]`.
    #[serde(default)]
    #[schema(value_type = Option<PlanInput>)]
    pub plan: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub original_user_task: Option<String>,
}

/// `task_update` as agents use it: any of a progress message, a status, a question.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTask {
    /// Optional, as tool adapters send it; must equal the id in the path.
    #[serde(default)]
    pub task_id: Option<Uuid>,
    /// Appended to the task's messages (role `agent`, type `progress`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 100_000, pattern = r"\S")]
    pub message: Option<String>,
    #[serde(default)]
    pub status: Option<Status>,
    /// Answered after the message and status are applied.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 10_000, pattern = r"\S")]
    pub query: Option<String>,
}

/// What `task_update` did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UpdateResult {
    pub task_id: Uuid,
    pub status: Status,
    pub phase: Phase,
    /// Sequence number of the appended message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_seq: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// With an answer: `digest` or `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why the configured model's answer is missing, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
}

/// `PATCH /api/tasks/{id}`: every field optional.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTask {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub name: Option<String>,
    #[serde(default)]
    pub phase: Option<Phase>,
    #[serde(default)]
    pub status: Option<Status>,
    #[serde(default)]
    pub final_answer: Option<String>,
    #[serde(default)]
    pub error_summary: Option<ErrorSummary>,
    /// Merged into the metadata key by key; a `null` value removes the key.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `PUT /api/tasks/{id}/plan`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPlan {
    /// Same forms as at registration.
    #[schema(value_type = PlanInput)]
    pub plan: Value,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 10_000, pattern = r"\S")]
    pub reason: Option<String>,
}

/// `PATCH /api/tasks/{id}/items/{ordinal}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchItem {
    pub status: ItemStatus,
}

/// Paging of messages, snapshots, actions and logs.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Page size, 1..=500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// Filters and paging of the task list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Page size, 1..=200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
    pub status: Option<Status>,
    pub phase: Option<Phase>,
    /// Also list archived tasks (default false).
    pub include_archived: Option<bool>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskPage {
    /// Newest first.
    pub items: Vec<Task>,
    pub next_cursor: Option<String>,
}

/// `POST /api/tasks/{id}/query`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryTask {
    #[schema(min_length = 1, max_length = 10_000, pattern = r"\S")]
    pub query: String,
}

/// The answer to a question about a task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueryAnswer {
    pub answer: String,
    /// `digest` (exact, no model) or `model`.
    pub source: String,
    /// Why the configured model's answer is missing (the digest answered instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_error: Option<String>,
    pub digest: Digest,
}

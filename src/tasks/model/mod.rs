//! Request and response types of the task API, and the enums stored as text.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::digest::Digest;
use super::lifecycle::{Phase, Status};

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

/// Schema of a plan as a request gives it: a list of step titles, steps or stages.
pub struct PlanInput;

impl PlanInput {
    pub fn json() -> Value {
        let title = serde_json::json!({"type": "string", "minLength": 1, "pattern": "\\S"});
        let staged_step = serde_json::json!({
            "type": "object",
            "description": "A step of a stage; `sub_task_input` (any JSON) may come with it.",
            "required": ["stepDescription", "toolName"],
            "properties": {
                "stepDescription": title,
                "toolName": {"type": "string"},
                "narrative_step": {"type": ["string", "null"]}
            }
        });
        serde_json::json!({
            "type": "array",
            "description": "A list of step titles (`[\"Build image\", \"Push\"]`), of steps \
                `{title, tool?, input?, narrative?}`, or of stages `{stage, steps: [{stepDescription, \
                toolName, sub_task_input?, narrative_step?}]}`; forms may be mixed. At least one step, \
                at most `MNEMO_TASKS_MAX_PLAN_STEPS` (default 500) in all.",
            "minItems": 1,
            "maxItems": 500,
            "items": {"anyOf": [
                title,
                {
                    "type": "object",
                    "description": "A step; `input` (any JSON) may come with it.",
                    "required": ["title"],
                    "properties": {
                        "title": title,
                        "tool": {"type": ["string", "null"]},
                        "narrative": {"type": ["string", "null"]}
                    }
                },
                {
                    "type": "object",
                    "description": "A stage and its steps.",
                    "required": ["steps"],
                    "properties": {
                        "stage": {
                            "type": ["integer", "null"],
                            "format": "int32",
                            "minimum": i32::MIN,
                            "maximum": i32::MAX
                        },
                        "steps": {"type": "array", "minItems": 1, "items": staged_step}
                    }
                }
            ]}
        })
    }
}

impl utoipa::PartialSchema for PlanInput {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::openapi::json_schema(Self::json())
    }
}

impl ToSchema for PlanInput {}

/// Schema of an event's stage: a number, or a label such as `"Initial"` or `"System"`.
pub struct StageLabel;

impl StageLabel {
    pub fn json() -> Value {
        serde_json::json!({
            "type": ["number", "string"],
            "description": "A stage number, or a label such as `\"Initial\"` or `\"System\"`."
        })
    }
}

impl utoipa::PartialSchema for StageLabel {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::openapi::json_schema(Self::json())
    }
}

impl ToSchema for StageLabel {}

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

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    /// The hand-written schemas read back exactly as written (nothing dropped on the way).
    #[test]
    fn schema_json_reads_back() {
        for (json, schema) in [
            (super::PlanInput::json(), super::PlanInput::schema()),
            (super::StageLabel::json(), super::StageLabel::schema()),
        ] {
            let written = serde_json::to_value(schema).unwrap();
            assert_eq!(written, json);
        }
    }
}

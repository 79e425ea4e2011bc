//! Request and response types of the task workspace API.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::parts::Part;
use super::waits::WaitStatus;

/// A step to append (a TaskStep).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewStep {
    /// Default: `step_<32 hex>`. Appending the same step again (same id and content) is a no-op.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[A-Za-z0-9_.:-]+$")]
    pub step_id: Option<String>,
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub agent_name: String,
    /// 1 to `MNEMO_TASKS_STEP_MAX_PARTS` (default 200) parts.
    #[schema(min_items = 1, max_items = 200)]
    pub parts: Vec<Part>,
}

/// A stored step.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct Step {
    /// Position in the task's history (1-based, gap-free).
    pub seq: i32,
    pub step_id: String,
    pub agent_name: String,
    pub parts: Vec<Part>,
    pub created_at: DateTime<Utc>,
}

/// Paging of the steps: in order from the start, or the last `recent` steps.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StepQuery {
    /// Page size (1-500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
    /// The last N steps in order (1-500). Excludes `cursor`.
    #[param(minimum = 1, maximum = 500)]
    pub recent: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StepPage {
    pub items: Vec<Step>,
    /// Null at the end (and always in `recent` mode).
    pub next_cursor: Option<String>,
}

/// The configuration snapshot of a task (`team.json`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskConfigSnapshot {
    pub task_id: Uuid,
    #[schema(value_type = Object)]
    pub config: Value,
    pub created_at: DateTime<Utc>,
}

/// An artifact's description.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Artifact {
    pub artifact_id: Uuid,
    /// `mnemo://tasks/{task_id}/artifacts/{artifact_id}`
    pub uri: String,
    pub mime_type: String,
    pub size: i64,
    /// Hex SHA-256 of the bytes (also the ETag).
    pub sha256: String,
    pub name: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArtifactPage {
    pub items: Vec<Artifact>,
    pub next_cursor: Option<String>,
}

/// Query of a raw artifact upload.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// A file name to keep with the artifact.
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Page size (1-200, default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// A search over task history.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TaskSearchRequest)]
pub struct SearchRequest {
    /// A question or keywords. Words and `"phrases"` are ORed (texts holding more of them, and
    /// rarer ones, rank higher); `-word` excludes.
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub query: String,
    /// Hits per page (1-100, default 20).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub cursor: Option<String>,
    /// `keyword`, `semantic` or `hybrid`; default `hybrid` when the server has an embedder,
    /// else `keyword`. `keyword` pages through every match of one task, and of all tasks while
    /// the caller's task history holds fewer than 5,000 texts; across a longer history, through
    /// every match of the query's rare words and the newest 1,000 matches among the newest
    /// 5,000 texts. `semantic` and `hybrid` page through the best 100 of each side.
    #[serde(default)]
    pub mode: Option<crate::search::SearchMode>,
}

/// Where a hit sits in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HitSource {
    Message,
    Event,
    StepText,
    ToolResult,
    Snapshot,
}

impl HitSource {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "message" => HitSource::Message,
            "event" => HitSource::Event,
            "step_text" => HitSource::StepText,
            "tool_result" => HitSource::ToolResult,
            "snapshot" => HitSource::Snapshot,
            _ => return None,
        })
    }
}

/// One search hit.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TaskSearchHit)]
pub struct SearchHit {
    pub task_id: Uuid,
    pub source: HitSource,
    /// The seq of the message, event, step or snapshot.
    pub seq: i64,
    /// For step hits: the step id, the part index, and the character offset of the matching
    /// chunk within the part.
    pub step_id: Option<String>,
    pub part_index: Option<i32>,
    pub char_offset: Option<i32>,
    /// For tool results: the call answered.
    pub tool_call_id: Option<String>,
    /// For snapshots: the label.
    pub label: Option<String>,
    /// The matching text with hits in `«»` (a hit by meaning alone: the start of the text).
    pub snippet: String,
    /// The rank score, higher is better: the keyword score in `keyword` mode, the similarity less
    /// its crowding discount in `semantic` mode, their fusion in `hybrid` mode.
    pub rank: f32,
    /// Place among the keyword matches (1 = best), when the words matched.
    pub keyword_rank: Option<u32>,
    /// Place by similarity less the crowding discount (1 = closest), when the text has been
    /// embedded.
    pub vector_rank: Option<u32>,
    /// Cosine similarity of the text to the query, when compared.
    pub similarity: Option<f32>,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TaskSearchPage)]
pub struct SearchPage {
    /// The mode that ranked the hits.
    pub mode: crate::search::SearchMode,
    /// True when the embedder failed and only keyword results are served.
    pub degraded: bool,
    /// Best first.
    pub hits: Vec<SearchHit>,
    pub next_cursor: Option<String>,
}

/// A smart-wait job to record.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWait {
    /// What is watched: `process`, `url`, `file`, `window`, ...
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub target_type: String,
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub target_id: String,
    /// The condition that ends the wait, in words.
    #[schema(min_length = 1, max_length = 4000, pattern = r"\S")]
    pub criteria: String,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub timeout_seconds: Option<i64>,
    /// Seconds between checks.
    #[serde(default)]
    #[schema(exclusive_minimum = 0)]
    pub poll_interval: Option<f64>,
}

/// The end of a wait.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveWait {
    /// resolved, timeout, cancelled or error.
    #[schema(value_type = WaitEnd)]
    pub status: WaitStatus,
    #[serde(default)]
    #[schema(max_length = 10_000)]
    pub result_message: Option<String>,
}

/// Schema of the status a wait ends with: a final status, never `watching`.
pub struct WaitEnd;

impl utoipa::PartialSchema for WaitEnd {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let finals: Vec<&str> = WaitStatus::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .map(WaitStatus::as_str)
            .collect();
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("How the wait ended."))
            .enum_values(Some(finals))
            .into()
    }
}

impl ToSchema for WaitEnd {}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Wait {
    pub wait_id: Uuid,
    pub task_id: Uuid,
    pub target_type: String,
    pub target_id: String,
    pub criteria: String,
    pub timeout_seconds: Option<i64>,
    pub poll_interval: Option<f64>,
    pub status: WaitStatus,
    pub result_message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    /// On resolution: the seq of the message posted to the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_seq: Option<i32>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WaitPage {
    pub items: Vec<Wait>,
    pub next_cursor: Option<String>,
}

/// Query of an import.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// Keep the archive's task id (`parentTaskId`, which must then be a UUID not in use) instead
    /// of making a new one.
    #[serde(default)]
    pub keep_id: Option<bool>,
}

/// What an import created.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportResult {
    pub task_id: Uuid,
    /// The id the archive had.
    pub source_task_id: String,
    pub plan_versions: usize,
    pub events: usize,
    pub messages: usize,
    pub snapshots: usize,
    pub steps: usize,
    pub artifacts: usize,
}

//! A task's workspace as files: the in-memory form of the `task_memory_bank/<task_id>/` layout
//! with the `team.json`, `history.jsonl` and `artifacts/`. [`super::export`] renders a
//! [`Bundle`] to files and a `.tar.gz`; [`super::import`] reads them back.
//!
//! Files, relative to the task directory:
//! - `metadata.json`: the camelCase schema (`"version": "1.0"`), plus a `mnemo` object holding
//!   what that schema has no place for (name, coarse status, metadata, running summary, plan state).
//! - `plan.json`, `plan_v2.json`, ...: each plan version as it was sent.
//! - `execution.log.jsonl`: the execution-log events, one per line.
//! - `messages.jsonl`: the task's messages, one per line.
//! - `actions.jsonl`: actions under plan items with their logs, when there are any.
//! - `waits.jsonl`: smart-wait jobs, when there are any.
//! - `final_answer.md`: when there is one.
//! - `context_history/NN_<label>.txt`: each snapshot's text; `context_history/index.json` keeps
//!   its label, flag and time.
//! - `team.json`: the configuration snapshot, when stored.
//! - `history.jsonl`: the steps, one per line.
//! - `artifacts/<artifact_id>.<ext>` and `artifacts/index.json` (name, type, size, sha256).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::parts::Part;

/// Top-level directory of every archive.
pub const ROOT: &str = "task_memory_bank";
/// `metadata.json` schema version.
pub const SCHEMA_VERSION: &str = "1.0";

pub const METADATA: &str = "metadata.json";
pub const EXECUTION_LOG: &str = "execution.log.jsonl";
pub const MESSAGES: &str = "messages.jsonl";
pub const ACTIONS: &str = "actions.jsonl";
pub const WAITS: &str = "waits.jsonl";
pub const FINAL_ANSWER: &str = "final_answer.md";
pub const TEAM: &str = "team.json";
pub const HISTORY: &str = "history.jsonl";
pub const CONTEXT_DIR: &str = "context_history";
pub const CONTEXT_INDEX: &str = "context_history/index.json";
pub const ARTIFACT_DIR: &str = "artifacts";
pub const ARTIFACT_INDEX: &str = "artifacts/index.json";

/// Everything an export carries and an import recreates.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    pub metadata: Metadata,
    /// Plan versions, oldest first (version 1 is `plan.json`).
    pub plans: Vec<PlanFile>,
    /// the execution-log events, in order (objects).
    pub events: Vec<Value>,
    /// The task's messages, in order (objects).
    pub messages: Vec<Value>,
    /// Actions with their logs, in order (objects).
    pub actions: Vec<Value>,
    /// Wait jobs, in order (objects).
    pub waits: Vec<Value>,
    pub final_answer: Option<String>,
    pub snapshots: Vec<Snapshot>,
    /// `team.json`.
    pub team: Option<Value>,
    /// `history.jsonl`.
    pub steps: Vec<StepRecord>,
    pub artifacts: Vec<ArtifactFile>,
}

/// the `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub parent_task_id: String,
    #[serde(default)]
    pub original_user_task: Option<String>,
    /// the status: the fine-grained phase (`RECEIVED`, ..., `COMPLETED_SUCCESS`).
    pub task_status: String,
    #[serde(default)]
    pub final_answer_file: Option<String>,
    #[serde(default)]
    pub error_summary: Option<Value>,
    pub timestamps: Timestamps,
    pub version: String,
    /// mnemo's own fields; absent in archives written by other tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mnemo: Option<MnemoFields>,
}

/// the timestamps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timestamps {
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub plan_generated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub execution_started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub synthesis_started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub last_updated_at: DateTime<Utc>,
}

/// What mnemo keeps beyond the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MnemoFields {
    pub name: String,
    /// Coarse status: active, paused, completed, failed, cancelled.
    pub status: String,
    #[serde(default)]
    pub metadata: Value,
    #[serde(default)]
    pub running_summary: Option<String>,
    /// How many messages the running summary covers.
    #[serde(default)]
    pub summary_message_count: i32,
    /// The active plan version (0: none).
    #[serde(default)]
    pub active_plan_version: i32,
    #[serde(default)]
    pub archived_at: Option<DateTime<Utc>>,
    /// Each plan version's reason, time and items with their status.
    #[serde(default)]
    pub plan_versions: Vec<Value>,
}

/// One plan version's file.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFile {
    pub version: i32,
    pub plan: Value,
}

/// One context snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub label: String,
    pub content: String,
    pub is_summarized: bool,
    pub timestamp: DateTime<Utc>,
}

/// An entry of `context_history/index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotIndexEntry {
    pub file: String,
    pub label: String,
    pub is_summarized: bool,
    pub timestamp: DateTime<Utc>,
}

/// One line of `history.jsonl`: a TaskStep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRecord {
    pub step_id: String,
    pub agent_name: String,
    pub parts: Vec<Part>,
    pub created_at: DateTime<Utc>,
}

/// An artifact with its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactFile {
    pub entry: ArtifactIndexEntry,
    pub bytes: Vec<u8>,
}

/// An entry of `artifacts/index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactIndexEntry {
    pub artifact_id: Uuid,
    /// The file under `artifacts/`.
    pub file: String,
    #[serde(default)]
    pub name: Option<String>,
    pub mime_type: String,
    pub size: u64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

/// The file name of plan version `version` (`plan.json`, then `plan_v2.json`, ...).
pub fn plan_file_name(version: i32) -> String {
    if version <= 1 {
        "plan.json".to_string()
    } else {
        format!("plan_v{version}.json")
    }
}

/// The plan version a file name holds, if it is a plan file.
pub fn plan_version_of(file: &str) -> Option<i32> {
    if file == "plan.json" {
        return Some(1);
    }
    let digits = file.strip_prefix("plan_v")?.strip_suffix(".json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|v| *v >= 1)
}

/// A safe file-name slug of a snapshot label: lowercase ASCII letters and digits, other runs
/// become one `_`, at most 48 characters, never empty.
pub fn label_slug(label: &str) -> String {
    let mut slug = String::new();
    let mut gap = false;
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !slug.is_empty() {
                slug.push('_');
            }
            gap = false;
            slug.push(c.to_ascii_lowercase());
            if slug.len() >= 48 {
                break;
            }
        } else {
            gap = true;
        }
    }
    if slug.is_empty() {
        "snapshot".to_string()
    } else {
        slug
    }
}

/// `context_history/NN_<slug>.txt` for the snapshot at `index` (0-based; two digits at least).
pub fn snapshot_file_name(index: usize, label: &str) -> String {
    format!("{CONTEXT_DIR}/{index:02}_{}.txt", label_slug(label))
}

/// The extension an artifact file gets from its type (`.bin` unless it is text).
pub fn artifact_extension(mime_type: &str) -> &'static str {
    let essence = mime_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => "json",
        "text/markdown" => "md",
        e if e.starts_with("text/") => "txt",
        _ => "bin",
    }
}

/// `artifacts/<artifact_id>.<ext>`.
pub fn artifact_file_name(artifact_id: Uuid, mime_type: &str) -> String {
    format!(
        "{ARTIFACT_DIR}/{artifact_id}.{}",
        artifact_extension(mime_type)
    )
}

/// The files of a bundle: path relative to the task directory → bytes.
pub type Files = BTreeMap<String, Vec<u8>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_files_follow_the_task_memory_bank_layout() {
        assert_eq!(plan_file_name(1), "plan.json");
        assert_eq!(plan_file_name(2), "plan_v2.json");
        assert_eq!(plan_file_name(12), "plan_v12.json");
        for v in [1, 2, 12] {
            assert_eq!(plan_version_of(&plan_file_name(v)), Some(v));
        }
        for bad in [
            "plan_v.json",
            "plan_v02.json",
            "plan_v0.json",
            "plan_vx.json",
            "plans.json",
        ] {
            assert_eq!(plan_version_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn label_slugs_are_safe() {
        assert_eq!(label_slug("Initial context"), "initial_context");
        assert_eq!(label_slug("../../etc/passwd"), "etc_passwd");
        assert_eq!(label_slug("  Before stage #2!  "), "before_stage_2");
        assert_eq!(label_slug("コンテキスト"), "snapshot");
        assert_eq!(label_slug(&"a".repeat(100)).len(), 48);
        assert_eq!(
            label_slug(&label_slug("After: summarization")),
            "after_summarization"
        );
        assert_eq!(
            snapshot_file_name(3, "after summarization"),
            "context_history/03_after_summarization.txt"
        );
        assert_eq!(snapshot_file_name(123, "x"), "context_history/123_x.txt");
    }

    #[test]
    fn artifact_files_are_named_by_id_and_kind() {
        let id = Uuid::nil();
        assert_eq!(
            artifact_file_name(id, "text/plain; charset=utf-8"),
            format!("artifacts/{id}.txt")
        );
        assert_eq!(artifact_extension("application/json"), "json");
        assert_eq!(artifact_extension("image/png"), "bin");
        assert_eq!(artifact_extension(""), "bin");
    }
}

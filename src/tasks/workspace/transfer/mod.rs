//! Export and import against the database: a task and everything under it as a [`Bundle`], and a
//! bundle written back as a new task in one transaction (so a refused import writes nothing).
//!
//! This file holds the line shapes of the bundle's JSON files, shared by both sides; `load.rs`
//! reads a task out, `store.rs` checks and writes one in.

mod load;
mod store;

pub use load::*;
pub use store::*;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiError;

/// One line of `execution.log.jsonl` (the shape).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EventLine {
    timestamp: DateTime<Utc>,
    #[serde(default)]
    stage: Option<Value>,
    #[serde(default)]
    sub_task_id: Option<String>,
    step_narrative: String,
    #[serde(default)]
    tool_name: Option<String>,
    status: String,
    #[serde(default)]
    input_payload: Option<Value>,
    #[serde(default, alias = "resultData")]
    result_data: Option<Value>,
    #[serde(default, alias = "errorInfo")]
    error_info: Option<Value>,
    #[serde(default)]
    duration_ms: Option<i64>,
}

/// One line of `messages.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct MessageLine {
    timestamp: DateTime<Utc>,
    role: String,
    msg_type: String,
    content: String,
}

/// One line of `actions.jsonl`: an action under a plan item, with its logs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ActionLine {
    plan_version: i32,
    ordinal: i32,
    action_type: String,
    summary: String,
    status: String,
    #[serde(default)]
    input_data: Option<Value>,
    #[serde(default)]
    output_data: Option<Value>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default)]
    logs: Vec<ActionLogLine>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ActionLogLine {
    log_type: String,
    content: String,
    created_at: DateTime<Utc>,
}

/// One line of `waits.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WaitLine {
    wait_id: Uuid,
    target_type: String,
    target_id: String,
    criteria: String,
    #[serde(default)]
    timeout_seconds: Option<i64>,
    #[serde(default)]
    poll_interval: Option<f64>,
    status: String,
    #[serde(default)]
    result_message: Option<String>,
    created_at: DateTime<Utc>,
    #[serde(default)]
    resolved_at: Option<DateTime<Utc>>,
}

/// The state of one plan item kept in `metadata.json` (`mnemo.planVersions[].items`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemState {
    #[serde(skip)]
    version: i32,
    ordinal: i32,
    status: String,
    started_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
    duration_seconds: Option<f64>,
    rebased_from: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlanVersionState {
    version: i32,
    #[serde(default)]
    reason: Option<String>,
    created_at: DateTime<Utc>,
    #[serde(default)]
    items: Vec<ItemState>,
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(anyhow::anyhow!("export: {e}"))
}

//! Smart-wait jobs linked to a task: a wait starts `watching` and ends once, as `resolved`,
//! `timeout`, `cancelled` or `error`. Its end posts `[Wait resolved] <criteria> → <result>` to the
//! task's messages (`[Wait timeout] …` when its `timeout_seconds` ran out and the wait-timeout job
//! ended it), and the task metadata keeps `active_wait_ids`, `last_wait_state` and
//! `last_wait_event_at` (epoch seconds, as the task metadata stores them).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use super::model::{ResolveWait, Wait};
use super::store;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// State of a wait job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitStatus {
    Watching,
    Resolved,
    Timeout,
    Cancelled,
    Error,
}

impl WaitStatus {
    pub const ALL: [WaitStatus; 5] = [
        WaitStatus::Watching,
        WaitStatus::Resolved,
        WaitStatus::Timeout,
        WaitStatus::Cancelled,
        WaitStatus::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WaitStatus::Watching => "watching",
            WaitStatus::Resolved => "resolved",
            WaitStatus::Timeout => "timeout",
            WaitStatus::Cancelled => "cancelled",
            WaitStatus::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// True once the wait has ended.
    pub fn is_final(self) -> bool {
        self != WaitStatus::Watching
    }
}

/// Checks the change of a wait from `from` to `to`: only a watching wait may end, and only into a
/// final status. 409 names what is allowed.
pub fn transition(from: WaitStatus, to: WaitStatus) -> ApiResult<()> {
    if !to.is_final() {
        return Err(ApiError::invalid(
            "status",
            "status must be one of resolved, timeout, cancelled, error",
        ));
    }
    if from.is_final() {
        return Err(ApiError::conflict(format!(
            "the wait already ended as {}; it cannot change to {}",
            from.as_str(),
            to.as_str()
        ))
        .with("current_status", from.as_str())
        .with("allowed", Vec::<String>::new()));
    }
    Ok(())
}

/// The message a wait's end posts to its task (`[Wait resolved] …` style). Without a result message the final
/// status stands in for it.
pub fn resolution_message(
    criteria: &str,
    status: WaitStatus,
    result_message: Option<&str>,
) -> String {
    let result = match result_message.map(str::trim) {
        Some(text) if !text.is_empty() => text,
        _ => status.as_str(),
    };
    format!("[Wait resolved] {criteria} → {result}")
}

/// The `result_message` of a wait whose timeout ran out: `no result within 10 min`.
pub fn timeout_result(timeout_seconds: i64) -> String {
    let waited = chrono::Duration::try_seconds(timeout_seconds).unwrap_or(chrono::Duration::MAX);
    format!("no result within {}", super::sweeper::describe(waited))
}

/// The message posted when a wait's timeout ran out: `[Wait timeout] <criteria> → <result>`.
pub fn timeout_message(criteria: &str, result: &str) -> String {
    format!("[Wait timeout] {criteria} → {result}")
}

/// True once a watching wait created at `created_at` with `timeout_seconds` is past its timeout
/// at `now` (exactly the timeout is not past it). Waits without a timeout never are.
pub fn is_overdue(
    created_at: DateTime<Utc>,
    timeout_seconds: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let Some(timeout) = timeout_seconds else {
        return false;
    };
    chrono::Duration::try_seconds(timeout)
        .and_then(|t| created_at.checked_add_signed(t))
        .is_some_and(|deadline| now > deadline)
}

/// Seconds since the epoch with millisecond precision, as the task metadata keeps `last_wait_event_at`.
fn epoch_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

/// Records a wait event in a task's metadata: a `watching` wait joins `active_wait_ids`, an ended
/// one leaves it; `last_wait_state` and `last_wait_event_at` follow the event. Other keys stay.
pub fn record_in_metadata(
    metadata: &mut Map<String, Value>,
    wait_id: &str,
    status: WaitStatus,
    at: DateTime<Utc>,
) {
    let mut active: Vec<Value> = match metadata.get("active_wait_ids") {
        Some(Value::Array(ids)) => ids.clone(),
        _ => Vec::new(),
    };
    active.retain(|id| id.as_str() != Some(wait_id));
    if status == WaitStatus::Watching {
        active.push(Value::String(wait_id.to_string()));
    }
    metadata.insert("active_wait_ids".into(), Value::Array(active));
    metadata.insert(
        "last_wait_state".into(),
        Value::String(status.as_str().to_string()),
    );
    metadata.insert(
        "last_wait_event_at".into(),
        serde_json::Number::from_f64(epoch_seconds(at)).map_or(Value::Null, Value::Number),
    );
}

/// Checks a new wait's fields; `field` names the first bad one.
pub fn check_new_wait(
    target_type: &str,
    target_id: &str,
    criteria: &str,
    timeout_seconds: Option<i64>,
    poll_interval: Option<f64>,
) -> ApiResult<()> {
    super::parts::check_name("target_type", target_type)?;
    super::parts::check_name("target_id", target_id)?;
    if criteria.trim().is_empty() {
        return Err(ApiError::invalid("criteria", "criteria must not be empty"));
    }
    if criteria.len() > 4000 {
        return Err(ApiError::invalid(
            "criteria",
            "criteria is longer than 4000 bytes",
        ));
    }
    if let Some(t) = timeout_seconds
        && t <= 0
    {
        return Err(ApiError::invalid(
            "timeout_seconds",
            "timeout_seconds must be positive",
        ));
    }
    if let Some(p) = poll_interval
        && !(p.is_finite() && p > 0.0)
    {
        return Err(ApiError::invalid(
            "poll_interval",
            "poll_interval must be a positive number of seconds",
        ));
    }
    Ok(())
}

/// Checks a resolution: its `result_message` is at most 10,000 characters (422 otherwise).
pub fn check_resolution(body: &ResolveWait) -> ApiResult<()> {
    if body
        .result_message
        .as_ref()
        .is_some_and(|m| m.chars().count() > 10_000)
    {
        return Err(ApiError::invalid(
            "result_message",
            "`result_message` is longer than 10000 characters",
        ));
    }
    Ok(())
}

/// Ends wait `wait_id` of task `task_id` as the client asks, under the task's row lock: 404 for
/// no such wait, 409 for a move the wait's state does not allow (a wait that timed out says
/// when). Its end is posted to the task's messages.
pub async fn resolve(
    tx: &mut Scoped,
    task_id: Uuid,
    wait_id: Uuid,
    body: &ResolveWait,
) -> ApiResult<store::WaitEnd> {
    let metadata = store::lock_metadata(tx, task_id).await?;
    let wait = store::lock_wait(tx, task_id, wait_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {task_id} has no wait {wait_id}")))?;
    if wait.status == WaitStatus::Timeout {
        return Err(timed_out(&wait, body.status));
    }
    transition(wait.status, body.status)?;
    let result = body
        .result_message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    let note = resolution_message(&wait.criteria, body.status, result);
    Ok(store::finish_wait(tx, task_id, wait_id, metadata, body.status, result, &note).await?)
}

/// 409 for a wait that already timed out: when, and after how long.
fn timed_out(wait: &Wait, wanted: WaitStatus) -> ApiError {
    // The form the wait's own `resolved_at` is shown in.
    let at = wait
        .resolved_at
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true));
    let when = at
        .as_deref()
        .map(|at| format!(" at {at}"))
        .unwrap_or_default();
    let how = wait
        .result_message
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    ApiError::conflict(format!(
        "the wait timed out{when}{how}; it cannot change to {}",
        wanted.as_str()
    ))
    .with("current_status", WaitStatus::Timeout.as_str())
    .with("timed_out_at", at)
    .with("allowed", Vec::<String>::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    #[test]
    fn only_a_watching_wait_ends_and_only_once() {
        use WaitStatus::*;
        for to in [Resolved, Timeout, Cancelled, Error] {
            assert!(transition(Watching, to).is_ok());
            for from in [Resolved, Timeout, Cancelled, Error] {
                let err = transition(from, to).unwrap_err();
                assert!(
                    matches!(&err, ApiError::Problem(p) if p.status == 409),
                    "{from:?} -> {to:?}"
                );
            }
        }
        let err = transition(Watching, Watching).unwrap_err();
        assert!(matches!(&err, ApiError::Problem(p) if p.status == 422));
    }

    #[test]
    fn status_text_round_trips() {
        for s in WaitStatus::ALL {
            assert_eq!(WaitStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(WaitStatus::parse("done"), None);
    }

    #[test]
    fn the_resolution_message_names_target_outcome_and_result() {
        assert_eq!(
            resolution_message("build finished", WaitStatus::Resolved, Some("exit 0")),
            "[Wait resolved] build finished → exit 0"
        );
        assert_eq!(
            resolution_message("port 80 open", WaitStatus::Timeout, None),
            "[Wait resolved] port 80 open → timeout"
        );
        assert_eq!(
            resolution_message("x", WaitStatus::Error, Some("  ")),
            "[Wait resolved] x → error"
        );
    }

    #[test]
    fn timeouts_read_well_and_count_from_creation() {
        assert_eq!(timeout_result(600), "no result within 10 min");
        assert_eq!(timeout_result(1), "no result within 1 s");
        assert_eq!(
            timeout_message("port 80 open", &timeout_result(7200)),
            "[Wait timeout] port 80 open → no result within 2 h"
        );
        // A timeout past what a duration holds still reads, and never runs out.
        assert!(timeout_result(i64::MAX).starts_with("no result within"));
        let t0 = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let later = |s| t0 + chrono::Duration::seconds(s);
        assert!(!is_overdue(t0, Some(60), later(59)));
        assert!(!is_overdue(t0, Some(60), later(60)));
        assert!(is_overdue(t0, Some(60), later(61)));
        assert!(!is_overdue(t0, None, later(1_000_000)));
        assert!(!is_overdue(t0, Some(i64::MAX), later(1_000_000)));
    }

    #[test]
    fn metadata_tracks_active_waits() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let mut meta = Map::new();
        meta.insert("display".into(), json!(":100"));
        record_in_metadata(&mut meta, "w1", WaitStatus::Watching, t0);
        record_in_metadata(&mut meta, "w2", WaitStatus::Watching, t0);
        record_in_metadata(&mut meta, "w1", WaitStatus::Watching, t0);
        assert_eq!(meta["active_wait_ids"], json!(["w2", "w1"]));
        let t1 = t0 + chrono::Duration::milliseconds(1500);
        record_in_metadata(&mut meta, "w2", WaitStatus::Resolved, t1);
        assert_eq!(meta["active_wait_ids"], json!(["w1"]));
        assert_eq!(meta["last_wait_state"], json!("resolved"));
        assert_eq!(
            meta["last_wait_event_at"].as_f64().unwrap(),
            t1.timestamp() as f64 + 0.5
        );
        assert_eq!(meta["display"], json!(":100"));
        // A damaged value is replaced rather than trusted.
        meta.insert("active_wait_ids".into(), json!("oops"));
        record_in_metadata(&mut meta, "w3", WaitStatus::Cancelled, t1);
        assert_eq!(meta["active_wait_ids"], json!([]));
    }

    #[test]
    fn new_waits_are_checked() {
        assert!(check_new_wait("process", "1234", "exits", Some(60), Some(1.5)).is_ok());
        let field = |r: ApiResult<()>| match r.unwrap_err() {
            ApiError::Problem(p) => p.extensions["field"].as_str().unwrap().to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(check_new_wait("", "1", "c", None, None)),
            "target_type"
        );
        assert_eq!(field(check_new_wait("p", "", "c", None, None)), "target_id");
        assert_eq!(field(check_new_wait("p", "1", " ", None, None)), "criteria");
        assert_eq!(
            field(check_new_wait("p", "1", "c", Some(0), None)),
            "timeout_seconds"
        );
        assert_eq!(
            field(check_new_wait("p", "1", "c", None, Some(f64::NAN))),
            "poll_interval"
        );
    }
}

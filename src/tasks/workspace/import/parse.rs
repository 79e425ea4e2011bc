//! Parsing the files of one unpacked task directory back into a [`Bundle`]: the metadata, plans,
//! logs, snapshots, steps and artifacts, each checked to be storable as given, with errors naming
//! the member (and line) at fault.

use chrono::{DateTime, Datelike, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::{refuse, sha256_hex};
use crate::error::{ApiError, ApiResult};
use crate::extract::unstorable;
use crate::tasks::workspace::bundle::*;

fn member_path(task_dir: &str, file: &str) -> String {
    format!("{ROOT}/{task_dir}/{file}")
}

fn text(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<String> {
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| refuse(&member_path(task_dir, file), "is not UTF-8 text"))?;
    if text.contains('\0') {
        return Err(refuse(
            &member_path(task_dir, file),
            "contains a NUL character (U+0000), which cannot be stored",
        ));
    }
    Ok(text)
}

/// `value` as a `T`, once nothing in it is beyond what PostgreSQL stores as given (NUL characters,
/// numbers past ±1e300: the checks a JSON request body gets); else what is wrong.
fn storable<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    if let Some(err) = unstorable(&value, &mut String::new()) {
        return Err(match err {
            ApiError::Problem(p) => p.detail,
            other => other.to_string(),
        });
    }
    serde_json::from_value(value).map_err(|e| format!("is not valid here: {e}"))
}

fn json<T: DeserializeOwned>(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| format!("is not valid here: {e}"))
        .and_then(storable)
        .map_err(|detail| refuse(&member_path(task_dir, file), detail))
}

/// Each non-empty line of a JSON Lines file; errors name the member and the line.
fn json_lines<T: DeserializeOwned>(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<Vec<T>> {
    let text = text(task_dir, file, bytes)?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = serde_json::from_str(line)
            .map_err(|e| format!("is not valid here: {e}"))
            .and_then(storable)
            .map_err(|detail| {
                refuse(
                    &member_path(task_dir, file),
                    format!("line {}: {detail}", n + 1),
                )
                .with("line", n + 1)
            })?;
        items.push(item);
    }
    Ok(items)
}

fn objects(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<Vec<Value>> {
    let items: Vec<Value> = json_lines(task_dir, file, bytes)?;
    if let Some(n) = items.iter().position(|v| !v.is_object()) {
        return Err(refuse(
            &member_path(task_dir, file),
            format!("entry {} is not a JSON object", n + 1),
        ));
    }
    Ok(items)
}

/// The first of `times` that PostgreSQL cannot store as given: a year before 1 or after 9999
/// (chrono reads `+262142-...` and year 0; RFC 3339 writes four-digit years only).
pub fn unstorable_time<'a>(
    times: impl IntoIterator<Item = Option<&'a DateTime<Utc>>>,
) -> Option<&'a DateTime<Utc>> {
    times
        .into_iter()
        .flatten()
        .find(|t| !(1..=9999).contains(&t.year()))
}

/// The refusal for a time [`unstorable_time`] found; `at` prefixes the detail (`line 3: `).
pub fn time_refused(member: &str, at: &str, time: &DateTime<Utc>) -> ApiError {
    refuse(
        member,
        format!("{at}the time {time:?} is outside the years 1 to 9999, which can be stored"),
    )
}

/// Parses the files of one task directory. Files this layout does not name are ignored.
pub fn parse(task_dir: &str, files: &Files) -> ApiResult<Bundle> {
    let get = |file: &str| files.get(file).map(Vec::as_slice);
    let metadata_bytes = get(METADATA).ok_or_else(|| {
        refuse(
            &member_path(task_dir, METADATA),
            "is missing; every task directory needs one",
        )
    })?;
    let metadata: Metadata = json(task_dir, METADATA, metadata_bytes)?;
    let ts = &metadata.timestamps;
    if let Some(t) = unstorable_time([
        Some(&ts.created_at),
        ts.plan_generated_at.as_ref(),
        ts.execution_started_at.as_ref(),
        ts.synthesis_started_at.as_ref(),
        ts.completed_at.as_ref(),
        Some(&ts.last_updated_at),
        metadata.mnemo.as_ref().and_then(|m| m.archived_at.as_ref()),
    ]) {
        return Err(time_refused(&member_path(task_dir, METADATA), "", t));
    }
    if metadata.version != SCHEMA_VERSION {
        return Err(refuse(
            &member_path(task_dir, METADATA),
            format!(
                "has schema version {:?}; this server reads version {SCHEMA_VERSION}",
                metadata.version
            ),
        ));
    }

    let mut plans: Vec<PlanFile> = Vec::new();
    for (file, bytes) in files {
        if let Some(version) = plan_version_of(file) {
            plans.push(PlanFile {
                version,
                plan: json(task_dir, file, bytes)?,
            });
        }
    }
    plans.sort_by_key(|p| p.version);
    for (i, plan) in plans.iter().enumerate() {
        let expected = i32::try_from(i + 1).unwrap_or(i32::MAX);
        if plan.version != expected {
            return Err(refuse(
                &member_path(task_dir, &plan_file_name(expected)),
                "is missing; plan versions must run 1, 2, 3, ... without gaps",
            ));
        }
    }

    let events = match get(EXECUTION_LOG) {
        Some(bytes) => objects(task_dir, EXECUTION_LOG, bytes)?,
        None => Vec::new(),
    };
    let messages = match get(MESSAGES) {
        Some(bytes) => objects(task_dir, MESSAGES, bytes)?,
        None => Vec::new(),
    };
    let actions = match get(ACTIONS) {
        Some(bytes) => objects(task_dir, ACTIONS, bytes)?,
        None => Vec::new(),
    };
    let waits = match get(WAITS) {
        Some(bytes) => objects(task_dir, WAITS, bytes)?,
        None => Vec::new(),
    };
    let final_answer = match get(FINAL_ANSWER) {
        Some(bytes) => Some(text(task_dir, FINAL_ANSWER, bytes)?),
        None => None,
    };
    let snapshots = parse_snapshots(task_dir, files, &metadata)?;
    let team = match get(TEAM) {
        Some(bytes) => Some(json(task_dir, TEAM, bytes)?),
        None => None,
    };
    let steps: Vec<StepRecord> = match get(HISTORY) {
        Some(bytes) => json_lines(task_dir, HISTORY, bytes)?,
        None => Vec::new(),
    };
    for (n, step) in steps.iter().enumerate() {
        if let Some(t) = unstorable_time([Some(&step.created_at)]) {
            let at = format!("step {}: ", n + 1);
            return Err(time_refused(&member_path(task_dir, HISTORY), &at, t));
        }
    }
    let artifacts = parse_artifacts(task_dir, files, &metadata)?;
    Ok(Bundle {
        metadata,
        plans,
        events,
        messages,
        actions,
        waits,
        final_answer,
        snapshots,
        team,
        steps,
        artifacts,
    })
}

fn parse_snapshots(task_dir: &str, files: &Files, metadata: &Metadata) -> ApiResult<Vec<Snapshot>> {
    if let Some(bytes) = files.get(CONTEXT_INDEX) {
        let index: Vec<SnapshotIndexEntry> = json(task_dir, CONTEXT_INDEX, bytes)?;
        let mut snapshots = Vec::with_capacity(index.len());
        for entry in index {
            if let Some(t) = unstorable_time([Some(&entry.timestamp)]) {
                let at = format!("{}: ", entry.file);
                return Err(time_refused(&member_path(task_dir, CONTEXT_INDEX), &at, t));
            }
            let bytes = files.get(&entry.file).ok_or_else(|| {
                refuse(
                    &member_path(task_dir, CONTEXT_INDEX),
                    format!("names {}, which the archive does not hold", entry.file),
                )
            })?;
            snapshots.push(Snapshot {
                content: text(task_dir, &entry.file, bytes)?,
                label: entry.label,
                is_summarized: entry.is_summarized,
                timestamp: entry.timestamp,
            });
        }
        return Ok(snapshots);
    }
    // Without an index (an archive from another tool): the files in name order, labelled by
    // their names.
    let prefix = format!("{CONTEXT_DIR}/");
    let mut snapshots = Vec::new();
    for (file, bytes) in files.range(prefix.clone()..) {
        let Some(name) = file.strip_prefix(&prefix) else {
            break;
        };
        let Some(stem) = name.strip_suffix(".txt") else {
            continue;
        };
        let label = stem
            .split_once('_')
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .map_or(stem, |(_, rest)| rest);
        snapshots.push(Snapshot {
            label: label.to_string(),
            content: text(task_dir, file, bytes)?,
            is_summarized: false,
            timestamp: metadata.timestamps.created_at,
        });
    }
    Ok(snapshots)
}

fn parse_artifacts(
    task_dir: &str,
    files: &Files,
    metadata: &Metadata,
) -> ApiResult<Vec<ArtifactFile>> {
    let mut artifacts = Vec::new();
    if let Some(bytes) = files.get(ARTIFACT_INDEX) {
        let index: Vec<ArtifactIndexEntry> = json(task_dir, ARTIFACT_INDEX, bytes)?;
        let mut seen = std::collections::HashSet::new();
        for entry in index {
            if let Some(t) = unstorable_time([Some(&entry.created_at)]) {
                let at = format!("artifact {}: ", entry.artifact_id);
                return Err(time_refused(&member_path(task_dir, ARTIFACT_INDEX), &at, t));
            }
            if !seen.insert(entry.artifact_id) {
                return Err(refuse(
                    &member_path(task_dir, ARTIFACT_INDEX),
                    format!("lists artifact {} twice", entry.artifact_id),
                ));
            }
            let member = member_path(task_dir, &entry.file);
            let bytes = files.get(&entry.file).ok_or_else(|| {
                refuse(
                    &member_path(task_dir, ARTIFACT_INDEX),
                    format!("names {}, which the archive does not hold", entry.file),
                )
            })?;
            if u64::try_from(bytes.len()).ok() != Some(entry.size) {
                return Err(refuse(
                    &member,
                    format!("has {} bytes; the index says {}", bytes.len(), entry.size),
                ));
            }
            if sha256_hex(bytes) != entry.sha256.to_ascii_lowercase() {
                return Err(refuse(
                    &member,
                    "does not match the sha256 in artifacts/index.json",
                ));
            }
            artifacts.push(ArtifactFile {
                bytes: bytes.clone(),
                entry,
            });
        }
        return Ok(artifacts);
    }
    // the bare layout: `artifacts/<artifact_id>.<ext>` with no index.
    let prefix = format!("{ARTIFACT_DIR}/");
    for (file, bytes) in files.range(prefix.clone()..) {
        let Some(name) = file.strip_prefix(&prefix) else {
            break;
        };
        let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
        let Ok(artifact_id) = Uuid::parse_str(stem) else {
            return Err(refuse(
                &member_path(task_dir, file),
                "artifact files are named <artifact_id>.<ext> (a UUID) unless artifacts/index.json lists them",
            ));
        };
        let mime_type = match ext {
            "txt" => "text/plain",
            "md" => "text/markdown",
            "json" => "application/json",
            _ => "application/octet-stream",
        };
        artifacts.push(ArtifactFile {
            entry: ArtifactIndexEntry {
                artifact_id,
                file: file.clone(),
                name: None,
                mime_type: mime_type.to_string(),
                size: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
                sha256: sha256_hex(bytes),
                created_at: metadata.timestamps.created_at,
            },
            bytes: bytes.clone(),
        });
    }
    Ok(artifacts)
}

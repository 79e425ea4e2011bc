//! Export: a [`Bundle`] as files in the `task_memory_bank/<task_id>/` layout, packed as a
//! deterministic `.tar.gz` (sorted members, fixed modes, owner 0, one mtime, no gzip name or time),
//! so the same bundle always gives the same bytes and export → import → export compares equal.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde::Serialize;

use super::bundle::*;

/// Mode of files and directories in the archive.
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

fn pretty<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn lines<T: Serialize>(items: &[T]) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = Vec::new();
    for item in items {
        serde_json::to_writer(&mut bytes, item)?;
        bytes.push(b'\n');
    }
    Ok(bytes)
}

/// The files of a bundle, by path relative to the task directory. Empty logs are still written
/// (an empty `execution.log.jsonl` says "nothing happened"); optional files only when present.
pub fn render(bundle: &Bundle) -> Result<Files, serde_json::Error> {
    let mut files = Files::new();
    let mut metadata = bundle.metadata.clone();
    metadata.version = SCHEMA_VERSION.to_string();
    metadata.final_answer_file = bundle
        .final_answer
        .as_ref()
        .map(|_| FINAL_ANSWER.to_string());
    files.insert(METADATA.into(), pretty(&metadata)?);
    for plan in &bundle.plans {
        files.insert(plan_file_name(plan.version), pretty(&plan.plan)?);
    }
    files.insert(EXECUTION_LOG.into(), lines(&bundle.events)?);
    files.insert(MESSAGES.into(), lines(&bundle.messages)?);
    if !bundle.actions.is_empty() {
        files.insert(ACTIONS.into(), lines(&bundle.actions)?);
    }
    if !bundle.waits.is_empty() {
        files.insert(WAITS.into(), lines(&bundle.waits)?);
    }
    if let Some(answer) = &bundle.final_answer {
        files.insert(FINAL_ANSWER.into(), answer.clone().into_bytes());
    }
    if !bundle.snapshots.is_empty() {
        let mut index = Vec::with_capacity(bundle.snapshots.len());
        for (i, snapshot) in bundle.snapshots.iter().enumerate() {
            let file = snapshot_file_name(i, &snapshot.label);
            files.insert(file.clone(), snapshot.content.clone().into_bytes());
            index.push(SnapshotIndexEntry {
                file,
                label: snapshot.label.clone(),
                is_summarized: snapshot.is_summarized,
                timestamp: snapshot.timestamp,
            });
        }
        files.insert(CONTEXT_INDEX.into(), pretty(&index)?);
    }
    if let Some(team) = &bundle.team {
        files.insert(TEAM.into(), pretty(team)?);
    }
    files.insert(HISTORY.into(), lines(&bundle.steps)?);
    if !bundle.artifacts.is_empty() {
        let mut index = Vec::with_capacity(bundle.artifacts.len());
        for artifact in &bundle.artifacts {
            let mut entry = artifact.entry.clone();
            entry.file = artifact_file_name(entry.artifact_id, &entry.mime_type);
            files.insert(entry.file.clone(), artifact.bytes.clone());
            index.push(entry);
        }
        files.insert(ARTIFACT_INDEX.into(), pretty(&index)?);
    }
    Ok(files)
}

/// Packs files under `task_memory_bank/<task_dir>/` as a `.tar.gz`. Directories come first as
/// their own members; everything is sorted by path; every member has owner 0, a fixed mode and
/// `mtime` (seconds since the epoch).
pub fn archive(task_dir: &str, files: &Files, mtime: u64) -> std::io::Result<Vec<u8>> {
    let encoder = GzEncoder::new(Vec::new(), Compression::new(6));
    let mut builder = tar::Builder::new(encoder);
    let base = format!("{ROOT}/{task_dir}");
    let mut dirs = std::collections::BTreeSet::new();
    dirs.insert(format!("{ROOT}/"));
    dirs.insert(format!("{base}/"));
    for path in files.keys() {
        if let Some((dir, _)) = path.rsplit_once('/') {
            dirs.insert(format!("{base}/{dir}/"));
        }
    }
    for dir in &dirs {
        let header = header(dir, tar::EntryType::Directory, DIR_MODE, 0, mtime)?;
        builder.append(&header, std::io::empty())?;
    }
    for (path, bytes) in files {
        let full = format!("{base}/{path}");
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let header = header(&full, tar::EntryType::Regular, FILE_MODE, size, mtime)?;
        builder.append(&header, bytes.as_slice())?;
    }
    let mut encoder = builder.into_inner()?;
    encoder.flush()?;
    encoder.finish()
}

/// A ustar header (long paths go into the prefix field, so no GNU or pax extension members are
/// needed and the importer can refuse those outright).
fn header(
    path: &str,
    kind: tar::EntryType,
    mode: u32,
    size: u64,
    mtime: u64,
) -> std::io::Result<tar::Header> {
    let mut header = tar::Header::new_ustar();
    header.set_path(path)?;
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(mtime);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    Ok(header)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tasks::workspace::parts::Part;
    use chrono::TimeZone;
    use serde_json::json;
    use uuid::Uuid;

    pub(crate) fn sample() -> Bundle {
        let t = |s: i64| chrono::Utc.timestamp_opt(1_780_000_000 + s, 0).unwrap();
        let task_id = Uuid::now_v7();
        let artifact_id = Uuid::now_v7();
        Bundle {
            metadata: Metadata {
                parent_task_id: task_id.to_string(),
                original_user_task: Some("Deploy coursefolio".into()),
                task_status: "COMPLETED_SUCCESS".into(),
                final_answer_file: None,
                error_summary: None,
                timestamps: Timestamps {
                    created_at: t(0),
                    plan_generated_at: Some(t(1)),
                    execution_started_at: Some(t(2)),
                    synthesis_started_at: Some(t(3)),
                    completed_at: Some(t(4)),
                    last_updated_at: t(5),
                },
                version: SCHEMA_VERSION.into(),
                mnemo: Some(MnemoFields {
                    name: "Deploy".into(),
                    status: "completed".into(),
                    metadata: json!({"display": ":100"}),
                    running_summary: None,
                    summary_message_count: 0,
                    active_plan_version: 2,
                    archived_at: None,
                    plan_versions: vec![json!({"version": 1}), json!({"version": 2})],
                }),
            },
            plans: vec![
                PlanFile {
                    version: 1,
                    plan: json!(["build", "push"]),
                },
                PlanFile {
                    version: 2,
                    plan: json!(["build", "push", "ssh"]),
                },
            ],
            events: vec![
                json!({"timestamp": t(2), "stage": 1, "step_narrative": "built", "status": "COMPLETED"}),
            ],
            messages: vec![
                json!({"role": "agent", "content": "Step 1 done", "msg_type": "progress"}),
            ],
            actions: vec![
                json!({"plan_version": 1, "ordinal": 1, "action_type": "cli", "logs": []}),
            ],
            waits: vec![json!({"wait_id": "w1", "status": "watching"})],
            final_answer: Some("# Done\n".into()),
            snapshots: vec![
                Snapshot {
                    label: "Initial context".into(),
                    content: "start".into(),
                    is_summarized: false,
                    timestamp: t(1),
                },
                Snapshot {
                    label: "After summarization".into(),
                    content: "short".into(),
                    is_summarized: true,
                    timestamp: t(3),
                },
            ],
            team: Some(json!({"agents": ["planner", "coder"]})),
            steps: vec![StepRecord {
                step_id: "step_1".into(),
                agent_name: "coder".into(),
                parts: vec![
                    Part::Text {
                        text: "building".into(),
                    },
                    Part::Artifact {
                        artifact_id,
                        uri: format!("mnemo://tasks/{task_id}/artifacts/{artifact_id}"),
                        mime_type: "text/plain".into(),
                    },
                ],
                created_at: t(2),
            }],
            artifacts: vec![ArtifactFile {
                entry: ArtifactIndexEntry {
                    artifact_id,
                    file: String::new(),
                    name: Some("build.log".into()),
                    mime_type: "text/plain".into(),
                    size: 5,
                    sha256: "x".into(),
                    created_at: t(2),
                },
                bytes: b"hello".to_vec(),
            }],
        }
    }

    #[test]
    fn render_writes_the_layout() {
        let bundle = sample();
        let files = render(&bundle).unwrap();
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        let artifact = format!("artifacts/{}.txt", bundle.artifacts[0].entry.artifact_id);
        for expected in [
            "metadata.json",
            "plan.json",
            "plan_v2.json",
            "execution.log.jsonl",
            "messages.jsonl",
            "actions.jsonl",
            "waits.jsonl",
            "final_answer.md",
            "context_history/00_initial_context.txt",
            "context_history/01_after_summarization.txt",
            "context_history/index.json",
            "team.json",
            "history.jsonl",
            "artifacts/index.json",
            artifact.as_str(),
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        let metadata: serde_json::Value = serde_json::from_slice(&files["metadata.json"]).unwrap();
        assert_eq!(metadata["version"], "1.0");
        assert_eq!(metadata["finalAnswerFile"], "final_answer.md");
        assert_eq!(metadata["taskStatus"], "COMPLETED_SUCCESS");
        assert!(metadata["timestamps"]["planGeneratedAt"].is_string());
        assert_eq!(
            files["history.jsonl"]
                .iter()
                .filter(|b| **b == b'\n')
                .count(),
            1
        );
        assert_eq!(files[artifact.as_str()], b"hello");
    }

    #[test]
    fn archives_are_deterministic_and_rooted() {
        let bundle = sample();
        let files = render(&bundle).unwrap();
        let id = bundle.metadata.parent_task_id.clone();
        let a = archive(&id, &files, 1_780_000_005).unwrap();
        let b = archive(&id, &render(&bundle).unwrap(), 1_780_000_005).unwrap();
        assert_eq!(a, b);
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(a.as_slice()));
        let mut paths = Vec::new();
        for entry in tar.entries().unwrap() {
            let entry = entry.unwrap();
            assert_eq!(entry.header().mtime().unwrap(), 1_780_000_005);
            paths.push(entry.path().unwrap().to_string_lossy().into_owned());
        }
        assert_eq!(paths[0], "task_memory_bank/");
        assert_eq!(paths[1], format!("task_memory_bank/{id}/"));
        assert!(paths.iter().all(|p| p.starts_with("task_memory_bank/")));
        assert!(paths.contains(&format!("task_memory_bank/{id}/context_history/")));
        assert!(paths.contains(&format!("task_memory_bank/{id}/metadata.json")));
    }
}

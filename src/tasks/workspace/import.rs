//! Import: reads a `.tar.gz` in the `task_memory_bank/<task_id>/` layout safely and parses it
//! back into a [`Bundle`]. Nothing touches a disk: members are read into memory, and each header
//! is checked (type, path, declared size against the caps) before a byte of its data is read, so
//! a member claiming 1 GB is refused from its header alone.
//!
//! Refused with 422 naming the member: paths with `..`, `.` or empty components, absolute paths,
//! backslashes or NUL; anything but regular files and directories (symlinks, hard links, devices,
//! FIFOs, sparse files, and GNU/pax extension members, which this layout never needs); members or
//! a total past the caps; more members than allowed; anything outside one
//! `task_memory_bank/<task_id>/` directory; duplicate members.

use std::io::Read;

use flate2::read::GzDecoder;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::bundle::*;
use crate::error::{ApiError, ApiResult};

/// Caps on what an archive may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest member, in bytes.
    pub max_member_bytes: u64,
    /// Largest sum of member sizes, in bytes.
    pub max_total_bytes: u64,
    /// Most members (directories included).
    pub max_members: usize,
}

/// 422 naming the member at fault.
pub fn refuse(member: &str, detail: impl std::fmt::Display) -> ApiError {
    ApiError::invalid("archive", format!("archive member {member:?}: {detail}"))
        .with("member", member)
}

fn broken(detail: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(
        "archive",
        format!("the body is not a readable .tar.gz archive: {detail}"),
    )
}

/// A member path split into its components, after the checks every path passes.
pub(crate) fn components(member: &str) -> Result<Vec<&str>, &'static str> {
    if member.contains('\0') || member.contains('\\') {
        return Err("the path contains a NUL or a backslash");
    }
    if member.starts_with('/') {
        return Err("absolute paths are not accepted");
    }
    let trimmed = member.strip_prefix("./").unwrap_or(member);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let parts: Vec<&str> = trimmed.split('/').collect();
    for part in &parts {
        match *part {
            ".." => return Err("path traversal (`..`) is not accepted"),
            "" | "." => return Err("empty or `.` path components are not accepted"),
            _ => {}
        }
    }
    Ok(parts)
}

fn safe_task_dir(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// Reads the archive into the task directory's name and its files (paths relative to it).
pub fn unpack(archive: &[u8], limits: &Limits) -> ApiResult<(String, Files)> {
    let mut tar = tar::Archive::new(GzDecoder::new(archive));
    // Raw entries: the tar crate would otherwise read GNU long-name and pax members whole, before
    // any cap could be applied. Those member types are refused below instead.
    let entries = tar.entries().map_err(broken)?.raw(true);
    let mut task_dir: Option<String> = None;
    let mut files = Files::new();
    let mut members = 0usize;
    let mut total = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(broken)?;
        let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        members += 1;
        if members > limits.max_members {
            return Err(refuse(
                &member,
                format!("the archive has more than {} members", limits.max_members),
            )
            .with("limit", limits.max_members));
        }
        let kind = entry.header().entry_type();
        let is_dir = kind.is_dir();
        if !(kind.is_file() || is_dir) {
            let what = if kind.is_symlink() {
                "a symbolic link"
            } else if kind.is_hard_link() {
                "a hard link"
            } else if kind.is_character_special() || kind.is_block_special() {
                "a device"
            } else if kind.is_fifo() {
                "a FIFO"
            } else {
                "not a regular file or directory"
            };
            return Err(refuse(
                &member,
                format!("is {what}; only regular files and directories are accepted"),
            ));
        }
        if std::str::from_utf8(&entry.path_bytes()).is_err() {
            return Err(refuse(&member, "the path is not UTF-8"));
        }
        let parts = components(&member).map_err(|why| refuse(&member, why))?;
        let size = entry.header().size().map_err(|e| refuse(&member, e))?;
        if size > limits.max_member_bytes {
            return Err(refuse(
                &member,
                format!(
                    "is {size} bytes; a member may have at most {} bytes",
                    limits.max_member_bytes
                ),
            )
            .with("limit_bytes", limits.max_member_bytes));
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(refuse(
                &member,
                format!(
                    "the members add up to more than {} bytes",
                    limits.max_total_bytes
                ),
            )
            .with("limit_bytes", limits.max_total_bytes));
        }
        if parts[0] != ROOT {
            return Err(refuse(&member, format!("is outside {ROOT}/")));
        }
        let Some(dir) = parts.get(1) else {
            if is_dir {
                continue;
            }
            return Err(refuse(&member, format!("is outside {ROOT}/<task_id>/")));
        };
        if !safe_task_dir(dir) {
            return Err(refuse(
                &member,
                "the task directory name must be letters, digits, - and _",
            ));
        }
        match &task_dir {
            Some(seen) if seen != dir => {
                return Err(refuse(
                    &member,
                    format!(
                        "the archive holds a second task ({dir} besides {seen}); import one task at a time"
                    ),
                ));
            }
            Some(_) => {}
            None => task_dir = Some((*dir).to_string()),
        }
        if parts.len() == 2 {
            if is_dir {
                continue;
            }
            return Err(refuse(&member, "the task directory must be a directory"));
        }
        if is_dir {
            continue;
        }
        let relative = parts[2..].join("/");
        // The declared size bounds the read; `take` stops a lying header from reading further.
        let capacity = usize::try_from(size).unwrap_or(0);
        let mut bytes = Vec::with_capacity(capacity);
        (&mut entry)
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(|e| refuse(&member, format!("cannot be read: {e}")))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) != size {
            return Err(refuse(&member, "the archive ends inside this member"));
        }
        if files.insert(relative, bytes).is_some() {
            return Err(refuse(&member, "appears twice in the archive"));
        }
    }
    let task_dir = task_dir.ok_or_else(|| {
        ApiError::invalid(
            "archive",
            format!("the archive holds no {ROOT}/<task_id>/ directory"),
        )
    })?;
    Ok((task_dir, files))
}

fn member_path(task_dir: &str, file: &str) -> String {
    format!("{ROOT}/{task_dir}/{file}")
}

fn text(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| refuse(&member_path(task_dir, file), "is not UTF-8 text"))
}

fn json<T: DeserializeOwned>(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        refuse(
            &member_path(task_dir, file),
            format!("is not valid here: {e}"),
        )
    })
}

/// Each non-empty line of a JSON Lines file; errors name the member and the line.
fn json_lines<T: DeserializeOwned>(task_dir: &str, file: &str, bytes: &[u8]) -> ApiResult<Vec<T>> {
    let text = text(task_dir, file, bytes)?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = serde_json::from_str(line).map_err(|e| {
            refuse(
                &member_path(task_dir, file),
                format!("line {} is not valid here: {e}", n + 1),
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

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

/// Rewrites every `mnemo://tasks/<old>/...` reference in the steps to the new task id, so an
/// import under a new id keeps its artifact parts valid.
pub fn retarget_steps(steps: &mut [StepRecord], old: &str, new: Uuid) {
    let from = format!("mnemo://tasks/{old}/");
    let to = format!("mnemo://tasks/{new}/");
    for step in steps {
        for part in &mut step.parts {
            if let super::parts::Part::Artifact { uri, .. } = part {
                if let Some(rest) = uri.strip_prefix(&from) {
                    *uri = format!("{to}{rest}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::workspace::export::{archive, render, tests::sample};
    use std::io::Write;

    const LIMITS: Limits = Limits {
        max_member_bytes: 1 << 20,
        max_total_bytes: 4 << 20,
        max_members: 100,
    };

    fn member(err: ApiError) -> String {
        match err {
            ApiError::Problem(p) => {
                assert_eq!(p.status, 422, "{}", p.detail);
                p.extensions
                    .get("member")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            }
            other => panic!("{other:?}"),
        }
    }

    /// A raw archive with hand-written headers (the tar builder refuses hostile paths).
    fn hostile(entries: &[(&str, tar::EntryType, u64, &[u8])], truncate: bool) -> Vec<u8> {
        let mut raw = Vec::new();
        for (path, kind, size, data) in entries {
            let mut header = tar::Header::new_ustar();
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_entry_type(*kind);
            header.set_size(*size);
            header.set_mode(0o644);
            if kind.is_symlink() {
                header.set_link_name("/etc/passwd").unwrap();
            }
            header.set_cksum();
            raw.extend_from_slice(header.as_bytes());
            raw.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            raw.extend(std::iter::repeat_n(0u8, pad));
        }
        if !truncate {
            raw.extend(std::iter::repeat_n(0u8, 1024));
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn export_then_import_gives_the_same_bundle_and_bytes() {
        let mut bundle = sample();
        // What render fills in, so the bundles compare equal.
        bundle.metadata.final_answer_file = Some(FINAL_ANSWER.into());
        let sha = sha256_hex(&bundle.artifacts[0].bytes);
        let entry = &mut bundle.artifacts[0].entry;
        entry.file = artifact_file_name(entry.artifact_id, &entry.mime_type);
        entry.sha256 = sha;
        let id = bundle.metadata.parent_task_id.clone();
        let bytes = archive(&id, &render(&bundle).unwrap(), 7).unwrap();
        let (dir, files) = unpack(&bytes, &LIMITS).unwrap();
        assert_eq!(dir, id);
        let back = parse(&dir, &files).unwrap();
        assert_eq!(back, bundle);
        let again = archive(&dir, &render(&back).unwrap(), 7).unwrap();
        assert_eq!(again, bytes);
    }

    #[test]
    fn hostile_paths_are_refused_naming_the_member() {
        use tar::EntryType as T;
        let cases: Vec<(&str, T)> = vec![
            ("task_memory_bank/t1/../../etc/passwd", T::Regular),
            ("/etc/passwd", T::Regular),
            ("task_memory_bank/t1/./metadata.json", T::Regular),
            ("task_memory_bank/t1//metadata.json", T::Regular),
            ("task_memory_bank/t1/a\\b", T::Regular),
            ("other/t1/metadata.json", T::Regular),
            ("task_memory_bank/metadata.json", T::Regular),
            ("task_memory_bank/t1/link", T::Symlink),
            ("task_memory_bank/t1/hard", T::Link),
            ("task_memory_bank/t1/dev", T::Char),
            ("task_memory_bank/t1/blk", T::Block),
            ("task_memory_bank/t1/fifo", T::Fifo),
            ("task_memory_bank/t1/longname", T::GNULongName),
            ("task_memory_bank/t1/pax", T::XHeader),
            ("task_memory_bank/t.1/metadata.json", T::Regular),
        ];
        for (path, kind) in cases {
            let bytes = hostile(&[(path, kind, 0, b"")], false);
            assert_eq!(member(unpack(&bytes, &LIMITS).unwrap_err()), path, "{path}");
        }
    }

    #[test]
    fn a_huge_member_is_refused_from_its_header() {
        // The header claims 1 GiB; the archive holds none of it, so reading would fail
        // differently: the refusal must come from the size check.
        let path = "task_memory_bank/t1/artifacts/big.bin";
        let bytes = hostile(&[(path, tar::EntryType::Regular, 1 << 30, b"")], true);
        let err = unpack(&bytes, &LIMITS).unwrap_err();
        let ApiError::Problem(p) = &err else { panic!() };
        assert!(p.detail.contains("1073741824 bytes"), "{}", p.detail);
        assert_eq!(member(err), path);
    }

    #[test]
    fn totals_members_and_second_tasks_are_capped() {
        let data = vec![b'x'; 600 << 10];
        let entries: Vec<(String, tar::EntryType, u64, &[u8])> = (0..8)
            .map(|i| {
                (
                    format!("task_memory_bank/t1/f{i}"),
                    tar::EntryType::Regular,
                    data.len() as u64,
                    data.as_slice(),
                )
            })
            .collect();
        let refs: Vec<(&str, tar::EntryType, u64, &[u8])> = entries
            .iter()
            .map(|(p, k, s, d)| (p.as_str(), *k, *s, *d))
            .collect();
        let bytes = hostile(&refs, false);
        assert_eq!(
            member(unpack(&bytes, &LIMITS).unwrap_err()),
            "task_memory_bank/t1/f6"
        );
        let few = Limits {
            max_members: 2,
            ..LIMITS
        };
        assert_eq!(
            member(unpack(&bytes, &few).unwrap_err()),
            "task_memory_bank/t1/f2"
        );
        let two = hostile(
            &[
                ("task_memory_bank/t1/a", tar::EntryType::Regular, 1, b"a"),
                ("task_memory_bank/t2/a", tar::EntryType::Regular, 1, b"a"),
            ],
            false,
        );
        assert_eq!(
            member(unpack(&two, &LIMITS).unwrap_err()),
            "task_memory_bank/t2/a"
        );
        let dup = hostile(
            &[
                ("task_memory_bank/t1/a", tar::EntryType::Regular, 1, b"a"),
                ("./task_memory_bank/t1/a", tar::EntryType::Regular, 1, b"b"),
            ],
            false,
        );
        assert_eq!(
            member(unpack(&dup, &LIMITS).unwrap_err()),
            "./task_memory_bank/t1/a"
        );
    }

    #[test]
    fn garbage_and_empty_archives_are_422() {
        for bytes in [b"not gzip".to_vec(), hostile(&[], false)] {
            let err = unpack(&bytes, &LIMITS).unwrap_err();
            assert!(matches!(&err, ApiError::Problem(p) if p.status == 422));
        }
    }

    #[test]
    fn bad_contents_name_the_member() {
        let bundle = sample();
        let id = bundle.metadata.parent_task_id.clone();
        let mut files = render(&bundle).unwrap();
        files.insert(HISTORY.into(), b"{\"step_id\": 1}\n".to_vec());
        let err = parse(&id, &files).unwrap_err();
        assert_eq!(member(err), format!("task_memory_bank/{id}/history.jsonl"));

        let mut files = render(&bundle).unwrap();
        files.remove("plan.json");
        assert_eq!(
            member(parse(&id, &files).unwrap_err()),
            format!("task_memory_bank/{id}/plan.json")
        );

        let mut files = render(&bundle).unwrap();
        let artifact = artifact_file_name(
            bundle.artifacts[0].entry.artifact_id,
            &bundle.artifacts[0].entry.mime_type,
        );
        files.insert(artifact.clone(), b"hellO".to_vec());
        assert_eq!(
            member(parse(&id, &files).unwrap_err()),
            format!("task_memory_bank/{id}/{artifact}")
        );

        let mut files = render(&bundle).unwrap();
        let mut meta: Value = serde_json::from_slice(&files[METADATA]).unwrap();
        meta["version"] = "2.0".into();
        files.insert(METADATA.into(), serde_json::to_vec(&meta).unwrap());
        assert_eq!(
            member(parse(&id, &files).unwrap_err()),
            format!("task_memory_bank/{id}/metadata.json")
        );
    }

    #[test]
    fn archives_from_other_tools_parse_without_indexes() {
        let artifact = Uuid::now_v7();
        let mut files = Files::new();
        files.insert(
            METADATA.into(),
            br#"{"parentTaskId": "abc", "taskStatus": "RECEIVED", "version": "1.0",
                "timestamps": {"createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"}}"#
                .to_vec(),
        );
        files.insert(
            "context_history/00_initial_context.txt".into(),
            b"ctx".to_vec(),
        );
        files.insert("context_history/notes.md".into(), b"ignored".to_vec());
        files.insert(format!("artifacts/{artifact}.txt"), b"log".to_vec());
        let bundle = parse("abc", &files).unwrap();
        assert!(bundle.metadata.mnemo.is_none());
        assert_eq!(bundle.snapshots.len(), 1);
        assert_eq!(bundle.snapshots[0].label, "initial_context");
        assert_eq!(bundle.artifacts[0].entry.artifact_id, artifact);
        assert_eq!(bundle.artifacts[0].entry.mime_type, "text/plain");
    }

    #[test]
    fn steps_follow_a_new_task_id() {
        let mut bundle = sample();
        let old = bundle.metadata.parent_task_id.clone();
        let new = Uuid::now_v7();
        retarget_steps(&mut bundle.steps, &old, new);
        let super::super::parts::Part::Artifact { uri, .. } = &bundle.steps[0].parts[1] else {
            panic!()
        };
        assert!(uri.starts_with(&format!("mnemo://tasks/{new}/artifacts/")));
    }
}

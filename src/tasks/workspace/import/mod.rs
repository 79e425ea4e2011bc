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

mod parse;

use std::io::Read;

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::bundle::*;
use super::model::ImportResult;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::tasks::TasksConfig;

pub use parse::{parse, time_refused, unstorable_time};

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

/// An archive unpacked and parsed, its task id chosen, ready to store.
pub struct Prepared {
    task_dir: String,
    bundle: Bundle,
    result: ImportResult,
    caps: super::transfer::ImportCaps,
}

/// Unpacks and parses an uploaded archive within the task settings' caps (413 or 422 naming the
/// member at fault), and picks the new task's id: the archive's own with `keep_id` (422 when it
/// is not a UUID), else a new one. The archive's bytes are let go once unpacked.
pub fn prepare(config: &TasksConfig, archive: bytes::Bytes, keep_id: bool) -> ApiResult<Prepared> {
    let limits = Limits {
        max_member_bytes: u64::try_from(config.artifact_max_bytes).unwrap_or(u64::MAX),
        max_total_bytes: u64::try_from(config.import_max_bytes).unwrap_or(u64::MAX),
        max_members: config.import_max_members,
    };
    let (task_dir, files) = unpack(&archive, &limits)?;
    drop(archive);
    let bundle = parse(&task_dir, &files)?;
    drop(files);
    let source_task_id = bundle.metadata.parent_task_id.clone();
    let task_id = if keep_id {
        Uuid::parse_str(&source_task_id).map_err(|_| {
            ApiError::invalid(
                "keep_id",
                format!(
                    "the archive's task id {source_task_id:?} is not a UUID; import it without keep_id"
                ),
            )
        })?
    } else {
        Uuid::now_v7()
    };
    let result = ImportResult {
        task_id,
        source_task_id,
        plan_versions: bundle.plans.len(),
        events: bundle.events.len(),
        messages: bundle.messages.len(),
        snapshots: bundle.snapshots.len(),
        steps: bundle.steps.len(),
        artifacts: bundle.artifacts.len(),
    };
    let caps = super::transfer::ImportCaps {
        max_plan_steps: config.max_plan_steps,
        max_parts: config.step_max_parts,
    };
    Ok(Prepared {
        task_dir,
        bundle,
        result,
        caps,
    })
}

/// Stores a prepared archive as a new task of the caller; answers what was imported.
pub async fn store(tx: &mut Scoped, prepared: Prepared) -> ApiResult<ImportResult> {
    let Prepared {
        task_dir,
        bundle,
        result,
        caps,
    } = prepared;
    super::transfer::store(tx, &task_dir, bundle, result.task_id, caps).await?;
    Ok(result)
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

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Rewrites every `mnemo://tasks/<old>/...` reference in the steps to the new task id, so an
/// import under a new id keeps its artifact parts valid.
pub fn retarget_steps(steps: &mut [StepRecord], old: &str, new: Uuid) {
    let from = format!("mnemo://tasks/{old}/");
    let to = format!("mnemo://tasks/{new}/");
    for step in steps {
        for part in &mut step.parts {
            if let super::parts::Part::Artifact { uri, .. } = part
                && let Some(rest) = uri.strip_prefix(&from)
            {
                *uri = format!("{to}{rest}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::workspace::export::{archive, render, tests::sample};
    use serde_json::Value;
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
    fn values_that_cannot_be_stored_name_the_member() {
        let bundle = sample();
        let id = bundle.metadata.parent_task_id.clone();
        let at = |file: &str| format!("task_memory_bank/{id}/{file}");
        let mut files = render(&bundle).unwrap();
        files.insert(FINAL_ANSWER.into(), b"done\0".to_vec());
        assert_eq!(member(parse(&id, &files).unwrap_err()), at(FINAL_ANSWER));

        let mut files = render(&bundle).unwrap();
        files.insert(TEAM.into(), br#"{"model": "a\u0000b"}"#.to_vec());
        assert_eq!(member(parse(&id, &files).unwrap_err()), at(TEAM));

        let mut files = render(&bundle).unwrap();
        files.insert(TEAM.into(), br#"{"model": 1e308}"#.to_vec());
        assert_eq!(member(parse(&id, &files).unwrap_err()), at(TEAM));

        for time in ["+262142-12-31T23:59:59Z", "0000-01-01T00:00:00Z"] {
            let mut files = render(&bundle).unwrap();
            let mut meta: Value = serde_json::from_slice(&files[METADATA]).unwrap();
            meta["timestamps"]["lastUpdatedAt"] = time.into();
            files.insert(METADATA.into(), serde_json::to_vec(&meta).unwrap());
            let err = parse(&id, &files).unwrap_err();
            assert!(err.to_string().contains("years 1 to 9999"), "{err}");
            assert_eq!(member(err), at(METADATA));
        }

        let mut files = render(&bundle).unwrap();
        let step = String::from_utf8(files[HISTORY].clone()).unwrap();
        let mut step: Value = serde_json::from_str(step.lines().next().unwrap()).unwrap();
        step["created_at"] = "+10000-01-01T00:00:00Z".into();
        files.insert(HISTORY.into(), serde_json::to_vec(&step).unwrap());
        assert_eq!(member(parse(&id, &files).unwrap_err()), at(HISTORY));
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

/// Properties of the importer on generated bundles and on archives and files mutated every way
/// the generators know: whatever the bytes, the answer is a bundle or a 4xx, never a panic.
#[cfg(test)]
mod properties {
    use super::*;
    use crate::tasks::workspace::export::{archive, render, tests::sample};
    use crate::tasks::workspace::parts::Part;
    use chrono::{DateTime, TimeZone, Utc};
    use proptest::prelude::*;
    use serde_json::Value;
    use std::io::Write;

    const LIMITS: Limits = Limits {
        max_member_bytes: 1 << 20,
        max_total_bytes: 4 << 20,
        max_members: 200,
    };

    /// A bundle, or a refusal a client caused (4xx problem, never a 500).
    fn check<T: std::fmt::Debug>(result: &ApiResult<T>) -> Result<(), TestCaseError> {
        match result {
            Ok(_) => Ok(()),
            Err(ApiError::Problem(p)) => {
                prop_assert!((400..500).contains(&p.status), "{} {}", p.status, p.detail);
                Ok(())
            }
            Err(ApiError::Internal(e)) => Err(TestCaseError::fail(format!("internal: {e:#}"))),
        }
    }

    fn import(bytes: &[u8]) -> Result<(), TestCaseError> {
        let unpacked = unpack(bytes, &LIMITS);
        check(&unpacked)?;
        if let Ok((dir, files)) = unpacked {
            check(&parse(&dir, &files))?;
        }
        Ok(())
    }

    fn gzip(raw: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(raw).expect("writing to memory");
        gz.finish().expect("writing to memory")
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut raw)
            .expect("an archive this test wrote");
        raw
    }

    /// Any text PostgreSQL stores: everything but NUL (which the importer refuses).
    fn text() -> impl Strategy<Value = String> {
        any::<String>().prop_map(|s| s.replace('\0', ""))
    }

    /// Any JSON PostgreSQL stores as given (no NUL, magnitudes within ±1e300).
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("storable", |f| f.is_finite() && f.abs() <= 1e300)
                .prop_map(Value::from),
            "[^\u{0}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[^\u{0}]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[^\u{0}]{0,6}", json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    fn time() -> impl Strategy<Value = DateTime<Utc>> {
        (0i64..4_000_000_000, 0u32..1_000_000_000).prop_map(|(s, ns)| {
            Utc.timestamp_opt(s, ns)
                .single()
                .unwrap_or(DateTime::UNIX_EPOCH)
        })
    }

    fn uuid() -> impl Strategy<Value = Uuid> {
        any::<u128>().prop_map(Uuid::from_u128)
    }

    fn part() -> impl Strategy<Value = Part> {
        prop_oneof![
            text().prop_map(|text| Part::Text { text }),
            ("[^\u{0}]{0,10}", "[^\u{0}]{0,10}", json()).prop_map(
                |(tool_call_id, tool_name, arguments)| {
                    Part::ToolCall {
                        tool_call_id,
                        tool_name,
                        arguments,
                    }
                }
            ),
            ("[^\u{0}]{0,10}", json(), any::<bool>()).prop_map(
                |(tool_call_id, output, is_error)| {
                    Part::ToolResult {
                        tool_call_id,
                        output,
                        is_error,
                    }
                }
            ),
            (uuid(), "[^\u{0}]{0,20}", "[^\u{0}]{0,10}").prop_map(
                |(artifact_id, uri, mime_type)| {
                    Part::Artifact {
                        artifact_id,
                        uri,
                        mime_type,
                    }
                }
            ),
        ]
    }

    fn artifact() -> impl Strategy<Value = ArtifactFile> {
        (
            uuid(),
            prop::option::of(text()),
            prop::sample::select(
                &[
                    "text/plain",
                    "text/markdown",
                    "application/json",
                    "image/png",
                    "text/csv; charset=utf-8",
                    "",
                ][..],
            ),
            prop::collection::vec(any::<u8>(), 0..64),
            time(),
        )
            .prop_map(
                |(artifact_id, name, mime_type, bytes, created_at)| ArtifactFile {
                    entry: ArtifactIndexEntry {
                        artifact_id,
                        file: artifact_file_name(artifact_id, mime_type),
                        name,
                        mime_type: mime_type.to_string(),
                        size: bytes.len() as u64,
                        sha256: sha256_hex(&bytes),
                        created_at,
                    },
                    bytes,
                },
            )
    }

    /// A bundle as an export writes it (so it compares equal after the round trip).
    fn bundle() -> impl Strategy<Value = Bundle> {
        let metadata = (
            uuid(),
            prop::option::of(text()),
            "[^\u{0}]{0,12}",
            prop::option::of(object()),
            (
                time(),
                prop::option::of(time()),
                prop::option::of(time()),
                time(),
            ),
            prop::option::of((
                text(),
                "[^\u{0}]{0,10}",
                json(),
                prop::option::of(text()),
                any::<i32>(),
                any::<i32>(),
                prop::option::of(time()),
                prop::collection::vec(json(), 0..3),
            )),
        )
            .prop_map(|(id, task, status, error, (c, p, e, l), mnemo)| Metadata {
                parent_task_id: id.to_string(),
                original_user_task: task,
                task_status: status,
                final_answer_file: None,
                error_summary: error,
                timestamps: Timestamps {
                    created_at: c,
                    plan_generated_at: p,
                    execution_started_at: e,
                    synthesis_started_at: None,
                    completed_at: None,
                    last_updated_at: l,
                },
                version: SCHEMA_VERSION.to_string(),
                mnemo: mnemo.map(
                    |(name, status, metadata, summary, count, active, archived, versions)| {
                        MnemoFields {
                            name,
                            status,
                            metadata,
                            running_summary: summary,
                            summary_message_count: count,
                            active_plan_version: active,
                            archived_at: archived,
                            plan_versions: versions,
                        }
                    },
                ),
            });
        let step = (
            "[^\u{0}]{0,12}",
            "[^\u{0}]{0,12}",
            prop::collection::vec(part(), 0..4),
            time(),
        )
            .prop_map(|(step_id, agent_name, parts, created_at)| StepRecord {
                step_id,
                agent_name,
                parts,
                created_at,
            });
        let snapshot = (text(), text(), any::<bool>(), time()).prop_map(
            |(label, content, is_summarized, timestamp)| Snapshot {
                label,
                content,
                is_summarized,
                timestamp,
            },
        );
        (
            metadata,
            prop::collection::vec(json(), 0..4),
            (
                prop::collection::vec(object(), 0..3),
                prop::collection::vec(object(), 0..3),
                prop::collection::vec(object(), 0..3),
                prop::collection::vec(object(), 0..3),
            ),
            prop::option::of(text()),
            prop::collection::vec(snapshot, 0..4),
            prop::option::of(json()),
            prop::collection::vec(step, 0..3),
            prop::collection::vec(artifact(), 0..3),
        )
            .prop_map(
                |(
                    mut metadata,
                    plans,
                    (events, messages, actions, waits),
                    final_answer,
                    snapshots,
                    team,
                    steps,
                    mut artifacts,
                )| {
                    artifacts.sort_by_key(|a| a.entry.artifact_id);
                    artifacts.dedup_by_key(|a| a.entry.artifact_id);
                    // What render writes into the metadata.
                    metadata.final_answer_file =
                        final_answer.as_ref().map(|_| FINAL_ANSWER.to_string());
                    // `null` reads back as an absent error summary.
                    if metadata.error_summary == Some(Value::Null) {
                        metadata.error_summary = None;
                    }
                    Bundle {
                        metadata,
                        plans: plans
                            .into_iter()
                            .enumerate()
                            .map(|(i, plan)| PlanFile {
                                version: i32::try_from(i + 1).unwrap_or(i32::MAX),
                                plan,
                            })
                            .collect(),
                        events,
                        messages,
                        actions,
                        waits,
                        final_answer,
                        snapshots,
                        team,
                        steps,
                        artifacts,
                    }
                },
            )
    }

    /// One change to an archive's tar stream.
    #[derive(Debug, Clone)]
    enum Mutation {
        /// XOR a byte anywhere.
        Flip(prop::sample::Index, u8),
        /// Cut the stream short.
        Truncate(prop::sample::Index),
        /// Insert bytes anywhere.
        Insert(prop::sample::Index, Vec<u8>),
        /// Overwrite bytes of a member header (name, mode, size, type, link, magic, prefix...)
        /// and fix its checksum, so the change gets past the tar reader.
        Header(prop::sample::Index, u16, Vec<u8>),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            1 => (any::<prop::sample::Index>(), 1u8..).prop_map(|(i, b)| Mutation::Flip(i, b)),
            1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
            1 => (any::<prop::sample::Index>(), prop::collection::vec(any::<u8>(), 1..600))
                .prop_map(|(i, b)| Mutation::Insert(i, b)),
            4 => (
                any::<prop::sample::Index>(),
                0u16..500,
                prop_oneof![
                    prop::collection::vec(any::<u8>(), 1..12),
                    // Meaningful values: digits for sizes, type flags, path pieces.
                    "[0-7 ]{1,11}".prop_map(String::into_bytes),
                    prop::sample::select(&["0", "1", "2", "3", "5", "6", "7", "L", "x", "g", "S"][..])
                        .prop_map(|s| s.as_bytes().to_vec()),
                    prop::sample::select(&["../", "/", "./", "a\\b", "\0", "task_memory_bank/", "x/"][..])
                        .prop_map(|s| s.as_bytes().to_vec()),
                ],
            )
                .prop_map(|(h, at, b)| Mutation::Header(h, at, b)),
        ]
    }

    fn mutate(raw: &mut Vec<u8>, headers: &[usize], mutation: &Mutation) {
        match mutation {
            Mutation::Flip(i, b) if !raw.is_empty() => {
                let at = i.index(raw.len());
                raw[at] ^= b;
            }
            Mutation::Truncate(i) => raw.truncate(i.index(raw.len() + 1)),
            Mutation::Insert(i, bytes) => {
                let at = i.index(raw.len() + 1);
                raw.splice(at..at, bytes.iter().copied());
            }
            Mutation::Header(h, at, bytes) if !headers.is_empty() => {
                let start = headers[h.index(headers.len())];
                if start + 512 > raw.len() {
                    return;
                }
                let block = &mut raw[start..start + 512];
                let at = usize::from(*at).min(511);
                let end = (at + bytes.len()).min(512);
                block[at..end].copy_from_slice(&bytes[..end - at]);
                let mut header = tar::Header::new_old();
                header.as_mut_bytes().copy_from_slice(block);
                header.set_cksum();
                block.copy_from_slice(header.as_bytes());
            }
            _ => {}
        }
    }

    /// A real export of the sample task: its gzip bytes, its tar stream and its headers' offsets.
    fn exported() -> (Vec<u8>, Vec<u8>, Vec<usize>) {
        let bundle = sample();
        let files = render(&bundle).expect("the sample renders");
        let bytes = archive(&bundle.metadata.parent_task_id, &files, 7).expect("it packs");
        let raw = gunzip(&bytes);
        let mut headers = Vec::new();
        let mut tar = tar::Archive::new(raw.as_slice());
        for entry in tar.entries().expect("it reads back") {
            let entry = entry.expect("it reads back");
            headers.push(usize::try_from(entry.raw_header_position()).unwrap_or(0));
        }
        (bytes, raw, headers)
    }

    /// One change to a task directory's files.
    #[derive(Debug, Clone)]
    enum FileChange {
        Remove(prop::sample::Index),
        Bytes(prop::sample::Index, Vec<u8>),
        Json(prop::sample::Index, Value),
        /// Set a key of a JSON file (or of one line of a JSON Lines file) to any value.
        Field(prop::sample::Index, prop::sample::Index, String, Value),
        Add(String, Vec<u8>),
    }

    fn file_change() -> impl Strategy<Value = FileChange> {
        let index = any::<prop::sample::Index>;
        prop_oneof![
            1 => index().prop_map(FileChange::Remove),
            1 => (index(), prop::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(i, b)| FileChange::Bytes(i, b)),
            1 => (index(), json()).prop_map(|(i, v)| FileChange::Json(i, v)),
            4 => (
                index(),
                index(),
                prop::sample::select(
                    &[
                        "version", "parentTaskId", "taskStatus", "timestamps", "mnemo", "file",
                        "artifactId", "size", "sha256", "label", "isSummarized", "timestamp",
                        "step_id", "parts", "created_at", "mimeType", "x",
                    ][..],
                )
                .prop_map(str::to_string),
                json(),
            )
                .prop_map(|(i, line, key, v)| FileChange::Field(i, line, key, v)),
            1 => (
                prop::sample::select(
                    &[
                        "plan_v3.json", "plan_v9.json", "plan_v0.json", "context_history/index.json",
                        "artifacts/index.json", "artifacts/nope.bin", "context_history/07_x.txt",
                        "team.json", "history.jsonl", "waits.jsonl",
                    ][..],
                ),
                prop::collection::vec(any::<u8>(), 0..40),
            )
                .prop_map(|(name, b)| FileChange::Add(name.to_string(), b)),
        ]
    }

    fn change(files: &mut Files, change: &FileChange) {
        let names: Vec<String> = files.keys().cloned().collect();
        let pick = |i: &prop::sample::Index| names[i.index(names.len())].clone();
        match change {
            _ if names.is_empty() => {}
            FileChange::Remove(i) => {
                files.remove(&pick(i));
            }
            FileChange::Bytes(i, bytes) => {
                files.insert(pick(i), bytes.clone());
            }
            FileChange::Json(i, value) => {
                let bytes = serde_json::to_vec(value).unwrap_or_default();
                files.insert(pick(i), bytes);
            }
            FileChange::Field(i, line, key, value) => {
                let name = pick(i);
                let text = String::from_utf8_lossy(&files[&name]).into_owned();
                let mut lines: Vec<String> = if name.ends_with(".jsonl") {
                    text.lines().map(str::to_string).collect()
                } else {
                    vec![text]
                };
                if lines.is_empty() {
                    return;
                }
                let n = line.index(lines.len());
                let Ok(mut doc) = serde_json::from_str::<Value>(&lines[n]) else {
                    return;
                };
                // Into the first object found: the document, or the first element of an array.
                let target = match &mut doc {
                    Value::Array(items) => items.first_mut(),
                    other => Some(other),
                };
                if let Some(Value::Object(map)) = target {
                    map.insert(key.clone(), value.clone());
                }
                lines[n] = serde_json::to_string(&doc).unwrap_or_default();
                files.insert(name, lines.join("\n").into_bytes());
            }
            FileChange::Add(name, bytes) => {
                files.insert(name.clone(), bytes.clone());
            }
        }
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        /// Any bundle exports and imports back equal, and exports again to the same bytes.
        #[test]
        fn a_valid_export_round_trips(bundle in bundle()) {
            let id = bundle.metadata.parent_task_id.clone();
            let files = render(&bundle).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let bytes = archive(&id, &files, 1_780_000_000)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let (dir, unpacked) = unpack(&bytes, &LIMITS)
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(&dir, &id);
            prop_assert_eq!(&unpacked, &files);
            let back = parse(&dir, &unpacked).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(&back, &bundle);
            let again = archive(&dir, &render(&back).map_err(|e| TestCaseError::fail(e.to_string()))?, 1_780_000_000)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(again, bytes);
        }

        /// Arbitrary bytes, raw or gzipped, are refused with a 4xx.
        #[test]
        fn arbitrary_bytes_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            import(&bytes)?;
            import(&gzip(&bytes))?;
        }

        /// A real export changed in its tar stream (bytes, lengths, header fields with a good
        /// checksum) or in its gzip bytes imports or is refused with a 4xx.
        #[test]
        fn mutated_archives_import_or_are_refused(
            mutations in prop::collection::vec(mutation(), 1..4),
            gzip_flip in prop::option::weighted(0.1, (any::<prop::sample::Index>(), 1u8..)),
        ) {
            let (bytes, mut raw, headers) = exported();
            for m in &mutations {
                mutate(&mut raw, &headers, m);
            }
            import(&gzip(&raw))?;
            if let Some((i, b)) = gzip_flip {
                let mut bytes = bytes;
                let at = i.index(bytes.len());
                bytes[at] ^= b;
                import(&bytes)?;
            }
        }

        /// A real export's files changed (removed, replaced, a JSON field set to anything, files
        /// added) parse or are refused with a 4xx; so does the archive they pack into.
        #[test]
        fn mutated_files_parse_or_are_refused(changes in prop::collection::vec(file_change(), 1..4)) {
            let bundle = sample();
            let id = bundle.metadata.parent_task_id.clone();
            let mut files = render(&bundle).map_err(|e| TestCaseError::fail(e.to_string()))?;
            for c in &changes {
                change(&mut files, c);
            }
            check(&parse(&id, &files))?;
            if let Ok(bytes) = archive(&id, &files, 7) {
                import(&bytes)?;
            }
        }
    }
}

//! Reading the archive on the blocking thread: each member header checked against the layout,
//! the order and the caps before its data is read, then the member parsed into checked records
//! (memories, notes, conversations, whole tasks) for the writer.

use std::collections::HashSet;
use std::io::Read;

use flate2::read::GzDecoder;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::{
    Item, Limits, MANIFEST_MAX_BYTES, MEMORY_RECORD_MAX_BYTES, SEGMENT_MAX_BYTES, at_record,
    broken, refuse, too_large,
};
use crate::conversations::transfer as conversations;
use crate::error::{ApiError, ApiResult};
use crate::memories::transfer::{self as memories, MemoryRecord};
use crate::notes::transfer as notes;
use crate::rights::layout::*;
use crate::tasks::workspace::import as task_import;

/// Reads the archive from `reader` and hands each checked item to `send` (false: stop reading).
pub(super) fn read_archive(
    reader: impl Read,
    limits: &Limits,
    alive: impl Fn() -> bool,
    mut send: impl FnMut(Item) -> bool,
) -> ApiResult<()> {
    let mut tar = tar::Archive::new(GzDecoder::new(reader));
    let entries = tar.entries().map_err(broken)?.raw(true);
    let mut state = ReadState::default();
    for entry in entries {
        if !alive() {
            // The request was answered already (a refusal): stop reading.
            return Ok(());
        }
        let mut entry = entry.map_err(broken)?;
        let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        let is_dir = kind.is_dir();
        if !(kind.is_file() || is_dir) {
            return Err(refuse(
                &member,
                "only regular files and directories are accepted (no links, devices or extension headers)",
            ));
        }
        if std::str::from_utf8(&entry.path_bytes()).is_err() {
            return Err(refuse(&member, "the path is not UTF-8"));
        }
        let parts = task_import::components(&member).map_err(|why| refuse(&member, why))?;
        let size = entry.header().size().map_err(|e| refuse(&member, e))?;
        state.unpacked = state.unpacked.saturating_add(size);
        if state.unpacked > limits.unpacked_bytes {
            return Err(too_large(
                &member,
                format!(
                    "the members add up to more than {} bytes (MNEMO_ACCOUNT_IMPORT_MAX_UNPACKED_BYTES)",
                    limits.unpacked_bytes
                ),
                limits.unpacked_bytes,
            ));
        }
        if is_dir {
            if !is_layout_dir(&parts) {
                return Err(refuse(
                    &member,
                    "the directory is not part of the export layout",
                ));
            }
            continue;
        }
        let what = classify(&parts).map_err(|why| refuse(&member, why))?;
        state.place(&member, &what)?;
        if state
            .task
            .as_ref()
            .is_some_and(|t| !matches!(&what, Member::TaskFile { dir, .. } if *dir == t.dir))
            && let Some(task) = state.task.take()
            && !send(finish_task(task)?)
        {
            return Ok(());
        }
        let cap = match &what {
            Member::Manifest => MANIFEST_MAX_BYTES,
            Member::MemoryRecord(_) => MEMORY_RECORD_MAX_BYTES,
            Member::MemoryContent(_) => limits.memory_bytes,
            Member::Segment(_) => SEGMENT_MAX_BYTES,
            Member::TaskFile { .. } => limits.task_member_bytes,
        };
        if size > cap {
            return Err(too_large(
                &member,
                format!("is {size} bytes; a member of its kind may have at most {cap} bytes"),
                cap,
            ));
        }
        let capacity = usize::try_from(size).unwrap_or(0);
        let mut bytes = Vec::with_capacity(capacity);
        (&mut entry)
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(|e| refuse(&member, format!("cannot be read: {e}")))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) != size {
            return Err(refuse(&member, "the archive ends inside this member"));
        }
        let item = match what {
            Member::Manifest => Some(Item::Manifest(read_manifest(&member, &bytes)?)),
            Member::MemoryRecord(id) => {
                let record: MemoryRecord = record(&member, None, &bytes)?;
                if record.id != id {
                    return Err(refuse(
                        &member,
                        format!("holds memory {}, not {id}", record.id),
                    ));
                }
                state.pending_memory = Some((member, record));
                None
            }
            Member::MemoryContent(_) => {
                let Some((record_member, record)) = state.pending_memory.take() else {
                    return Err(refuse(&member, "is not preceded by its memory record"));
                };
                let content = String::from_utf8(bytes)
                    .map_err(|_| refuse(&member, "memory content must be UTF-8 text"))?;
                memories::check(
                    &record,
                    &content,
                    usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                )
                .map_err(|e| at_record(&record_member, None, e))?;
                Some(Item::Memory {
                    member: record_member,
                    record: Box::new(record),
                    content,
                })
            }
            Member::Segment(kind) => Some(read_segment(kind, member, &bytes, limits)?),
            Member::TaskFile { dir, path } => {
                let task = state.task.get_or_insert_with(|| OpenTask {
                    dir: dir.clone(),
                    files: TaskFiles::new(),
                    bytes: 0,
                });
                task.bytes = task.bytes.saturating_add(size);
                if task.bytes > limits.task_bytes {
                    return Err(too_large(
                        &member,
                        format!(
                            "the files of task {dir} add up to more than {} bytes (MNEMO_TASKS_IMPORT_MAX_BYTES)",
                            limits.task_bytes
                        ),
                        limits.task_bytes,
                    ));
                }
                if task.files.len() >= limits.task_members {
                    return Err(too_large(
                        &member,
                        format!(
                            "task {dir} has more than {} files (MNEMO_TASKS_IMPORT_MAX_MEMBERS)",
                            limits.task_members
                        ),
                        limits.task_bytes,
                    ));
                }
                if task.files.insert(path, bytes).is_some() {
                    return Err(refuse(&member, "appears twice in the archive"));
                }
                None
            }
        };
        if let Some(item) = item
            && !send(item)
        {
            return Ok(());
        }
    }
    if let Some((member, _)) = state.pending_memory {
        return Err(refuse(
            &member,
            "the archive ends before this memory's content",
        ));
    }
    if !state.seen_manifest {
        return Err(ApiError::invalid(
            "archive",
            format!("the archive holds no {MANIFEST}"),
        ));
    }
    if let Some(task) = state.task.take() {
        send(finish_task(task)?);
    }
    Ok(())
}

struct OpenTask {
    dir: String,
    files: TaskFiles,
    bytes: u64,
}

#[derive(Default)]
struct ReadState {
    unpacked: u64,
    seen_manifest: bool,
    /// The kind of the last file member.
    kind: Option<Kind>,
    pending_memory: Option<(String, MemoryRecord)>,
    memories: HashSet<Uuid>,
    task: Option<OpenTask>,
    done_tasks: HashSet<String>,
}

impl ReadState {
    /// Checks that `what` may come now: manifest first, kinds in layout order, a memory's content
    /// right after its record, each memory and each task directory once and in one piece.
    fn place(&mut self, member: &str, what: &Member) -> ApiResult<()> {
        if !self.seen_manifest && *what != Member::Manifest {
            return Err(refuse(
                member,
                format!("the archive must begin with {MANIFEST}"),
            ));
        }
        if *what == Member::Manifest && self.seen_manifest {
            return Err(refuse(member, "appears twice in the archive"));
        }
        if let Some((record_member, record)) = &self.pending_memory {
            if *what != Member::MemoryContent(record.id) {
                return Err(refuse(
                    member,
                    format!(
                        "{record_member} must be followed at once by {}",
                        memory_content_name(record.id)
                    ),
                ));
            }
        } else if let Member::MemoryContent(id) = what {
            return Err(refuse(
                member,
                format!("is not preceded by {}", memory_record_name(*id)),
            ));
        }
        let kind = what.kind();
        if let Some(last) = self.kind
            && kind < last
        {
            return Err(refuse(
                member,
                "is out of order: members come as manifest, memories, notes, note revisions, \
                     sessions, messages, session batches, tasks",
            ));
        }
        self.kind = Some(kind);
        match what {
            Member::Manifest => self.seen_manifest = true,
            Member::MemoryRecord(id) if !self.memories.insert(*id) => {
                return Err(refuse(
                    member,
                    format!("memory {id} appears twice in the archive"),
                ));
            }
            Member::TaskFile { dir, .. }
                if self.task.as_ref().is_none_or(|t| t.dir != *dir)
                    && !self.done_tasks.insert(dir.clone()) =>
            {
                return Err(refuse(
                    member,
                    format!("the files of task {dir} must come together, and the task once"),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

fn finish_task(task: OpenTask) -> ApiResult<Item> {
    let dir = task.dir;
    let bundle = task_import::parse(&dir, &task.files)?;
    let id =
        Uuid::parse_str(&dir).map_err(|_| refuse(&dir, "the task directory is not a task id"))?;
    if bundle.metadata.parent_task_id != dir {
        return Err(refuse(
            &format!(
                "{}/{dir}/metadata.json",
                crate::tasks::workspace::bundle::ROOT
            ),
            format!(
                "names task {:?}, but its directory is {dir}",
                bundle.metadata.parent_task_id
            ),
        ));
    }
    Ok(Item::Task {
        dir,
        id,
        bundle: Box::new(bundle),
    })
}

fn read_manifest(member: &str, bytes: &[u8]) -> ApiResult<Manifest> {
    let manifest: Manifest = serde_json::from_slice(bytes)
        .map_err(|e| refuse(member, format!("is not a manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(refuse(
            member,
            format!("format is {:?}, not {FORMAT:?}", manifest.format),
        ));
    }
    if manifest.version != VERSION {
        return Err(refuse(
            member,
            format!(
                "has format version {}; this server reads version {VERSION}",
                manifest.version
            ),
        ));
    }
    Ok(manifest)
}

/// One JSON record: storable as given (no NUL characters, numbers that read back), then of
/// type `T` with no unknown fields.
fn record<T: DeserializeOwned>(member: &str, line: Option<usize>, bytes: &[u8]) -> ApiResult<T> {
    let fail = |detail: String| at_record(member, line, ApiError::invalid("archive", detail));
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| fail(format!("is not JSON: {e}")))?;
    if let Some(err) = crate::extract::unstorable(&value, &mut String::new()) {
        return Err(at_record(member, line, err));
    }
    serde_json::from_value(value).map_err(|e| fail(format!("is not a valid record: {e}")))
}

fn lines<T: DeserializeOwned>(
    member: &str,
    bytes: &[u8],
    check: impl Fn(&T) -> ApiResult<()>,
) -> ApiResult<Vec<T>> {
    let text = std::str::from_utf8(bytes).map_err(|_| refuse(member, "is not UTF-8 text"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item: T = record(member, Some(n + 1), line.as_bytes())?;
        check(&item).map_err(|e| at_record(member, Some(n + 1), e))?;
        out.push(item);
    }
    Ok(out)
}

fn read_segment(kind: Kind, member: String, bytes: &[u8], limits: &Limits) -> ApiResult<Item> {
    let max = limits.notes_bytes;
    Ok(match kind {
        Kind::Notes => {
            let records = lines(&member, bytes, |r| notes::check_notes(r, max))?;
            Item::Notes(member, records)
        }
        Kind::NoteRevisions => {
            let records = lines(&member, bytes, |r| notes::check_revision(r, max))?;
            Item::Revisions(member, records)
        }
        Kind::Sessions => {
            let records = lines(&member, bytes, conversations::check_session)?;
            Item::Sessions(member, records)
        }
        Kind::Messages => {
            let records = lines(&member, bytes, conversations::check_message)?;
            Item::Messages(member, records)
        }
        Kind::SessionBatches => {
            let records = lines(&member, bytes, conversations::check_batch)?;
            Item::Batches(member, records)
        }
        Kind::Manifest | Kind::Memories | Kind::Tasks => {
            return Err(refuse(&member, "is not a JSON Lines member"));
        }
    })
}

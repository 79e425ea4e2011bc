//! The account archive: a `.tar.gz` whose members come in a fixed order.
//!
//! ```text
//! mnemo_export/manifest.json                 format, version, created_at, tenant, user, counts
//! mnemo_export/memories/<id>.json            one memory's row ...
//! mnemo_export/memories/<id>.txt             ... followed at once by its content
//! mnemo_export/notes/NNNNNN.jsonl            notes rows, one per line
//! mnemo_export/note_revisions/NNNNNN.jsonl   kept revisions
//! mnemo_export/sessions/NNNNNN.jsonl         chat sessions
//! mnemo_export/messages/NNNNNN.jsonl         chat messages, in the order they were archived
//! mnemo_export/session_batches/NNNNNN.jsonl  archive batches
//! task_memory_bank/<task_id>/...             each task in the per-task export layout
//! ```
//!
//! JSON Lines files hold at most [`SEGMENT_LINES`] lines and about [`SEGMENT_BYTES`] bytes each,
//! so no member grows with the account; a memory's content is one member of at most the memory
//! size limit, and a task's files are the per-task bundle.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Top directory of everything that is not a task.
pub const ROOT: &str = "mnemo_export";
/// The `format` member of the manifest.
pub const FORMAT: &str = "mnemo-account-export";
/// The archive format version this server writes and reads.
pub const VERSION: u32 = 1;
pub const MANIFEST: &str = "mnemo_export/manifest.json";

/// Most lines in one JSON Lines member.
pub const SEGMENT_LINES: usize = 1000;
/// A JSON Lines member is closed once it holds this many bytes.
pub const SEGMENT_BYTES: usize = 8 * 1024 * 1024;

/// What an archive holds, by kind. The manifest carries it, an import checks it against what it
/// read, and an import answers with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AccountCounts)]
pub struct Counts {
    pub memories: u64,
    pub notes: u64,
    pub note_revisions: u64,
    pub sessions: u64,
    pub messages: u64,
    pub session_batches: u64,
    pub tasks: u64,
}

/// `mnemo_export/manifest.json`, the first member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `mnemo-account-export`.
    pub format: String,
    /// Format version (1).
    pub version: u32,
    pub created_at: DateTime<Utc>,
    /// Whose data this is (an import may restore it into another account).
    pub tenant_id: String,
    pub user_id: String,
    pub counts: Counts,
}

/// The kinds of members, in the order they must appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Manifest,
    Memories,
    Notes,
    NoteRevisions,
    Sessions,
    Messages,
    SessionBatches,
    Tasks,
}

impl Kind {
    /// The directory of a JSON Lines kind.
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Manifest => "",
            Kind::Memories => "memories",
            Kind::Notes => "notes",
            Kind::NoteRevisions => "note_revisions",
            Kind::Sessions => "sessions",
            Kind::Messages => "messages",
            Kind::SessionBatches => "session_batches",
            Kind::Tasks => crate::tasks::workspace::bundle::ROOT,
        }
    }

    fn of_dir(dir: &str) -> Option<Kind> {
        [
            Kind::Notes,
            Kind::NoteRevisions,
            Kind::Sessions,
            Kind::Messages,
            Kind::SessionBatches,
        ]
        .into_iter()
        .find(|k| k.dir() == dir)
    }
}

/// The name of JSON Lines member `n` (1-based) of `kind`.
pub fn segment_name(kind: Kind, n: usize) -> String {
    format!("{ROOT}/{}/{n:06}.jsonl", kind.dir())
}

pub fn memory_record_name(id: Uuid) -> String {
    format!("{ROOT}/memories/{id}.json")
}

pub fn memory_content_name(id: Uuid) -> String {
    format!("{ROOT}/memories/{id}.txt")
}

/// What a file member is, from its path components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    Manifest,
    MemoryRecord(Uuid),
    MemoryContent(Uuid),
    Segment(Kind),
    /// A file of task `dir`, at `path` relative to the task directory.
    TaskFile {
        dir: String,
        path: String,
    },
}

impl Member {
    pub fn kind(&self) -> Kind {
        match self {
            Member::Manifest => Kind::Manifest,
            Member::MemoryRecord(_) | Member::MemoryContent(_) => Kind::Memories,
            Member::Segment(kind) => *kind,
            Member::TaskFile { .. } => Kind::Tasks,
        }
    }
}

fn uuid_stem(name: &str, ext: &str) -> Option<Uuid> {
    let stem = name.strip_suffix(ext)?;
    // Only the hyphenated lowercase form the export writes.
    Uuid::parse_str(stem)
        .ok()
        .filter(|id| id.hyphenated().to_string() == stem)
}

fn segment_number(name: &str) -> bool {
    name.strip_suffix(".jsonl")
        .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Classifies the components of a file member (already checked: no `..`, `.` or empty parts).
/// `Err` says why the path is not part of the layout.
pub fn classify(parts: &[&str]) -> Result<Member, String> {
    let task_root = crate::tasks::workspace::bundle::ROOT;
    match parts {
        [ROOT, "manifest.json"] => Ok(Member::Manifest),
        [ROOT, "memories", name] => {
            if let Some(id) = uuid_stem(name, ".json") {
                Ok(Member::MemoryRecord(id))
            } else if let Some(id) = uuid_stem(name, ".txt") {
                Ok(Member::MemoryContent(id))
            } else {
                Err("memory files are named <memory_id>.json and <memory_id>.txt".into())
            }
        }
        [ROOT, dir, name] => match Kind::of_dir(dir) {
            Some(kind) if segment_number(name) => Ok(Member::Segment(kind)),
            Some(_) => Err(format!("files under {ROOT}/{dir}/ are named NNNNNN.jsonl")),
            None => Err(format!("{ROOT}/{dir}/ is not part of the export layout")),
        },
        [root, dir, rest @ ..] if *root == task_root && !rest.is_empty() => {
            if uuid_stem(dir, "").is_none() {
                return Err(format!("task directories are named {task_root}/<task_id>/"));
            }
            Ok(Member::TaskFile {
                dir: (*dir).to_string(),
                path: rest.join("/"),
            })
        }
        _ => Err("the path is not part of the export layout".into()),
    }
}

/// Whether a directory member's components lie on the layout (directories carry nothing).
pub fn is_layout_dir(parts: &[&str]) -> bool {
    let task_root = crate::tasks::workspace::bundle::ROOT;
    match parts {
        [ROOT] | [ROOT, "memories"] => true,
        [ROOT, dir] => Kind::of_dir(dir).is_some(),
        [root, dir, ..] if *root == task_root => uuid_stem(dir, "").is_some(),
        [root] => *root == task_root,
        _ => false,
    }
}

/// The files of one task directory, relative to it.
pub type TaskFiles = BTreeMap<String, Vec<u8>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_classified_strictly() {
        let id = Uuid::now_v7();
        let record = memory_record_name(id);
        let parts: Vec<&str> = record.split('/').collect();
        assert_eq!(classify(&parts), Ok(Member::MemoryRecord(id)));
        let content = memory_content_name(id);
        let parts: Vec<&str> = content.split('/').collect();
        assert_eq!(classify(&parts), Ok(Member::MemoryContent(id)));
        let seg = segment_name(Kind::Messages, 3);
        assert_eq!(seg, "mnemo_export/messages/000003.jsonl");
        let parts: Vec<&str> = seg.split('/').collect();
        assert_eq!(classify(&parts), Ok(Member::Segment(Kind::Messages)));
        let task = format!("task_memory_bank/{id}/context_history/00_x.txt");
        let parts: Vec<&str> = task.split('/').collect();
        assert_eq!(
            classify(&parts),
            Ok(Member::TaskFile {
                dir: id.to_string(),
                path: "context_history/00_x.txt".into()
            })
        );
        for bad in [
            "mnemo_export/other.json",
            "mnemo_export/notes/1.jsonl",
            "mnemo_export/secrets/000001.jsonl",
            "mnemo_export/memories/abc.json",
            "task_memory_bank/not-a-uuid/metadata.json",
            &format!("task_memory_bank/{id}"),
            "elsewhere/manifest.json",
        ] {
            let parts: Vec<&str> = bad.split('/').collect();
            assert!(classify(&parts).is_err(), "{bad}");
        }
        let upper = format!(
            "mnemo_export/memories/{}.json",
            id.to_string().to_uppercase()
        );
        let parts: Vec<&str> = upper.split('/').collect();
        assert!(classify(&parts).is_err());
    }

    #[test]
    fn kinds_are_ordered_parents_first() {
        assert!(Kind::Manifest < Kind::Memories);
        assert!(Kind::Notes < Kind::NoteRevisions);
        assert!(Kind::Sessions < Kind::Messages);
        assert!(Kind::Messages < Kind::SessionBatches);
        assert!(Kind::SessionBatches < Kind::Tasks);
    }
}

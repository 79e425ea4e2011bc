//! Request and response types of the notes API and of the `manage_long_term_memory` tool.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// What `manage_long_term_memory` (and `POST .../notes/operations`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Return the current notes (the default).
    #[default]
    Read,
    /// Replace the whole notes with `content`.
    Overwrite,
    /// Add `content` at the end, on a new line.
    Append,
    /// Add `content` at the beginning.
    Prepend,
    /// Remove the section `section_header` names, subsections included.
    DeleteSectionByHeader,
    /// Replace the body of the section `section_header` names (or the whole section when `content`
    /// starts with a heading); with `upsert`, add it at the end when none matches.
    ReplaceSectionByHeader,
    /// Clear the notes (the history keeps the old text).
    DeleteAllNotes,
}

impl Operation {
    /// The name used on the wire and in revisions.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Overwrite => "overwrite",
            Operation::Append => "append",
            Operation::Prepend => "prepend",
            Operation::DeleteSectionByHeader => "delete_section_by_header",
            Operation::ReplaceSectionByHeader => "replace_section_by_header",
            Operation::DeleteAllNotes => "delete_all_notes",
        }
    }

    pub fn needs_content(self) -> bool {
        matches!(
            self,
            Operation::Overwrite
                | Operation::Append
                | Operation::Prepend
                | Operation::ReplaceSectionByHeader
        )
    }

    pub fn needs_section_header(self) -> bool {
        matches!(
            self,
            Operation::DeleteSectionByHeader | Operation::ReplaceSectionByHeader
        )
    }
}

/// Input of the `manage_long_term_memory` tool, as the design defines it (plus `upsert`).
///
/// Sections are Markdown headings found by a CommonMark parser: ATX (`## Title`) and setext
/// (underlined) headings count, `#` lines inside code blocks do not, and only top-level headings
/// (not inside quotes or lists) count. A section runs from its heading to just before the next
/// heading of the same or a higher level, so it contains its subsections. `section_header` matches
/// the heading text trimmed and case-insensitively; written with leading `#`s (`## Preferences`) the
/// level must match too. No match: 404 listing the headings; several: 409 listing them.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"operation": "replace_section_by_header", "section_header": "## Preferences", "content": "- tea, no sugar\n- answers in French\n", "upsert": true}))]
pub struct NotesOperationRequest {
    /// `read` (default), `overwrite`, `append`, `prepend`, `delete_section_by_header`,
    /// `replace_section_by_header` or `delete_all_notes`.
    #[serde(default)]
    #[schema(default = "read")]
    pub operation: Operation,
    /// The text to write; required by `overwrite`, `append`, `prepend` and
    /// `replace_section_by_header`, refused (when non-empty) by the other operations. `overwrite`
    /// stores it exactly; the other writes give it a final line break when it lacks one.
    #[serde(default)]
    pub content: Option<String>,
    /// The heading naming the section (`Preferences` or `## Preferences`); required by
    /// `delete_section_by_header` and `replace_section_by_header`, refused by the others.
    #[serde(default)]
    pub section_header: Option<String>,
    /// Only for `replace_section_by_header`: when no heading matches, add the section at the end
    /// (heading level from `section_header`'s `#`s, else 2) instead of answering 404.
    #[serde(default)]
    pub upsert: bool,
}

/// The result of an operation: the notes as they are now, their version and a one-line outcome.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"agent_name": "assistant", "operation": "append", "notes": "- likes tea\n", "version": 4, "size_bytes": 12, "changed": true, "outcome": "appended 11 chars; notes now 12 B", "updated_at": "2026-11-21T22:00:00Z"}))]
pub struct NotesOperationResponse {
    pub agent_name: String,
    /// The operation done: one of the tool's operations, or `restore`.
    pub operation: String,
    /// The whole notes after the operation.
    pub notes: String,
    /// Version of `notes` (also the `ETag`); 0 when never written. Every write adds one.
    pub version: i64,
    /// Size of `notes` in bytes (UTF-8).
    pub size_bytes: usize,
    /// False for `read`.
    pub changed: bool,
    /// One line for people and models: `appended 42 chars; notes now 1.2 KB`.
    pub outcome: String,
    /// When the notes last changed; null when never written.
    pub updated_at: Option<DateTime<Utc>>,
}

/// The notes of one agent for the caller.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Notes {
    pub agent_name: String,
    /// Markdown; empty when never written.
    pub notes: String,
    /// 0 when never written; the `ETag` is this number in quotes.
    pub version: i64,
    pub size_bytes: usize,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Body of `PUT .../notes`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PutNotes {
    /// The new notes, replacing the old ones entirely.
    pub notes: String,
}

/// One kept revision, without its text.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct RevisionSummary {
    /// The version this revision produced.
    pub version: i64,
    /// The operation that produced it (`append`, `restore`, ...).
    pub operation: String,
    /// For `restore`: the version whose text was restored.
    pub restored_from: Option<i64>,
    pub size_bytes: i32,
    pub created_at: DateTime<Utc>,
}

/// One kept revision with the notes as they were at that version.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct Revision {
    pub version: i64,
    pub operation: String,
    pub restored_from: Option<i64>,
    pub size_bytes: i32,
    pub created_at: DateTime<Utc>,
    pub notes: String,
}

/// A page of revisions, newest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RevisionPage {
    pub items: Vec<RevisionSummary>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Paging of the revision list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RevisionListQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

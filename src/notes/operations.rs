//! What each notes operation does to the text, its checks and its one-line outcome. Pure: no I/O.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::model::{NotesOperationRequest, Operation};
use super::sections::{self, SectionError};
use crate::error::ApiError;

/// A computed write: the new notes and the outcome line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub notes: String,
    pub outcome: String,
}

/// Checks an agent name: `[A-Za-z0-9._-]{1,64}`.
pub fn validate_agent_name(name: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "agent_name",
            "`agent_name` must be 1 to 64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`",
        ))
    }
}

/// Checks which fields the operation needs and which it does not use (422 naming the field).
pub fn validate_request(request: &NotesOperationRequest) -> Result<(), ApiError> {
    let op = request.operation;
    let name = op.as_str();
    if op.needs_content() && request.content.is_none() {
        return Err(ApiError::invalid(
            "content",
            format!("`content` is required for `{name}`"),
        ));
    }
    if !op.needs_content() && request.content.as_deref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::invalid(
            "content",
            format!("`{name}` takes no `content`"),
        ));
    }
    let header = request.section_header.as_deref().map(str::trim);
    if op.needs_section_header() && header.is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            "section_header",
            format!("`section_header` is required for `{name}`"),
        ));
    }
    if !op.needs_section_header() && header.is_some_and(|h| !h.is_empty()) {
        return Err(ApiError::invalid(
            "section_header",
            format!(
                "`{name}` takes no `section_header`: only delete_section_by_header and \
                 replace_section_by_header work on a section (use replace_section_by_header to \
                 rewrite one)"
            ),
        ));
    }
    if request.upsert && op != Operation::ReplaceSectionByHeader {
        return Err(ApiError::invalid(
            "upsert",
            "`upsert` is only used by replace_section_by_header",
        ));
    }
    Ok(())
}

/// Computes a write operation on `current`; `Read` is not a write and is refused here.
/// Fails with 422 when the result would grow past `max_bytes` (nothing is written).
pub fn apply(
    current: &str,
    request: &NotesOperationRequest,
    max_bytes: usize,
) -> Result<Change, ApiError> {
    validate_request(request)?;
    let content = request.content.as_deref().unwrap_or_default();
    let header = request.section_header.as_deref().unwrap_or_default();
    let (notes, action) = match request.operation {
        Operation::Read => {
            return Err(ApiError::invalid("operation", "`read` changes nothing"));
        }
        Operation::Overwrite => (
            content.to_owned(),
            format!("overwrote notes (was {})", human_size(current.len())),
        ),
        Operation::Append => (
            sections::append(current, content),
            format!("appended {}", chars(content.chars().count())),
        ),
        Operation::Prepend => (
            sections::prepend(current, content),
            format!("prepended {}", chars(content.chars().count())),
        ),
        Operation::DeleteAllNotes => (
            String::new(),
            format!("deleted all notes (was {})", human_size(current.len())),
        ),
        Operation::DeleteSectionByHeader => {
            let edit = sections::delete_section(current, header)
                .map_err(|err| section_error(err, header))?;
            let action = format!(
                "deleted section \"{}\" ({})",
                edit.heading,
                chars(edit.removed_chars)
            );
            (edit.notes, action)
        }
        Operation::ReplaceSectionByHeader => {
            let edit = sections::replace_section(current, header, content, request.upsert)
                .map_err(|err| section_error(err, header))?;
            let action = if edit.created {
                format!(
                    "added section \"{}\" at the end ({}; no heading matched)",
                    edit.heading,
                    chars(edit.inserted_chars)
                )
            } else {
                format!(
                    "replaced section \"{}\" ({} -> {})",
                    edit.heading,
                    chars(edit.removed_chars),
                    chars(edit.inserted_chars)
                )
            };
            (edit.notes, action)
        }
    };
    check_size(current.len(), notes.len(), max_bytes)?;
    let outcome = format!("{action}; {}", notes_now(notes.len()));
    Ok(Change { notes, outcome })
}

/// 422 when `attempted` exceeds the cap and grows the notes (shrinking notes that are already over
/// a lowered cap is allowed).
pub fn check_size(current: usize, attempted: usize, max_bytes: usize) -> Result<(), ApiError> {
    if attempted <= max_bytes || attempted <= current {
        return Ok(());
    }
    Err(ApiError::invalid(
        "content",
        format!(
            "the notes would be {attempted} bytes, over the cap of {max_bytes} bytes \
             (now {current} bytes); nothing was written. Shorten or delete sections first"
        ),
    )
    .with("current_bytes", current)
    .with("attempted_bytes", attempted)
    .with("max_bytes", max_bytes))
}

/// The outcome of `read`.
pub fn read_outcome(notes: &str, version: i64) -> String {
    if version == 0 {
        "no notes yet".to_owned()
    } else if notes.is_empty() {
        format!("notes are empty (version {version})")
    } else {
        format!(
            "read {} of notes (version {version})",
            human_size(notes.len())
        )
    }
}

/// `notes now 1.2 KB` (or `notes now empty`).
pub fn notes_now(bytes: usize) -> String {
    if bytes == 0 {
        "notes now empty".to_owned()
    } else {
        format!("notes now {}", human_size(bytes))
    }
}

/// `1 char`, `42 chars`.
fn chars(n: usize) -> String {
    if n == 1 {
        "1 char".to_owned()
    } else {
        format!("{n} chars")
    }
}

/// `512 B`, `1.2 KB`, `3.4 MB` (binary multiples).
pub fn human_size(bytes: usize) -> String {
    const KB: f64 = 1024.0;
    #[expect(
        clippy::cast_precision_loss,
        reason = "sizes are far below 2^52; one decimal is shown"
    )]
    let size = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if size < KB * KB {
        format!("{:.1} KB", size / KB)
    } else {
        format!("{:.1} MB", size / KB / KB)
    }
}

/// The client error for a failed section lookup or edit.
pub fn section_error(err: SectionError, header: &str) -> ApiError {
    match err {
        SectionError::EmptyHeader => ApiError::invalid(
            "section_header",
            "`section_header` names no heading once trimmed and stripped of `#`s",
        ),
        SectionError::NotFound { headings } => {
            let shown: Vec<String> = headings.into_iter().map(|h| h.heading).collect();
            let detail = if shown.is_empty() {
                format!("no section matches {header:?}: the notes have no headings")
            } else {
                format!(
                    "no section matches {header:?}; the headings are: {}",
                    shown.join(", ")
                )
            };
            ApiError::not_found(detail)
                .with("field", "section_header")
                .with("headings", shown)
        }
        SectionError::Ambiguous { matches } => {
            let listed: Vec<String> = matches
                .iter()
                .map(|m| format!("\"{}\" (line {})", m.heading, m.line))
                .collect();
            let values: Vec<Value> = matches
                .iter()
                .map(|m| json!({"heading": m.heading, "line": m.line}))
                .collect();
            ApiError::conflict(format!(
                "{} sections match {header:?}: {}; add the level (`## Title`) or rename a heading",
                matches.len(),
                listed.join(", ")
            ))
            .with("field", "section_header")
            .with("matches", values)
        }
        SectionError::BreaksStructure => ApiError::invalid(
            "content",
            "this edit would change the headings outside the edited section (for example an \
             unclosed ``` fence in `content`); nothing was written",
        ),
    }
}

/// 412 for a stale `If-Match`.
pub fn stale_version(expected: i64, current: i64) -> ApiError {
    ApiError::status(
        StatusCode::PRECONDITION_FAILED,
        format!(
            "If-Match names version {expected} but the notes are at version {current}; \
             read them again and retry against version {current}"
        ),
    )
    .with("current_version", current)
    .with("expected_version", expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: Operation, content: Option<&str>, header: Option<&str>) -> NotesOperationRequest {
        NotesOperationRequest {
            operation: op,
            content: content.map(str::to_owned),
            section_header: header.map(str::to_owned),
            upsert: false,
        }
    }

    fn field(err: ApiError) -> (u16, String) {
        let name = err.field().unwrap_or_default().to_owned();
        (err.status_code().as_u16(), name)
    }

    #[test]
    fn agent_names() {
        for ok in ["assistant", "a", "test_agent-1.v2", &"x".repeat(64)] {
            assert!(validate_agent_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a/b", "ünï", &"x".repeat(65), "a\n"] {
            assert_eq!(
                field(validate_agent_name(bad).unwrap_err()),
                (422, "agent_name".into())
            );
        }
    }

    #[test]
    fn fields_each_operation_needs_or_refuses() {
        use Operation::*;
        let cases = [
            (req(Append, None, None), "content"),
            (req(Overwrite, None, None), "content"),
            (req(ReplaceSectionByHeader, None, Some("a")), "content"),
            (
                req(ReplaceSectionByHeader, Some("x"), None),
                "section_header",
            ),
            (
                req(DeleteSectionByHeader, None, Some("  ")),
                "section_header",
            ),
            (req(Append, Some("x"), Some("Prefs")), "section_header"),
            (req(Read, Some("x"), None), "content"),
            (req(DeleteAllNotes, Some("x"), None), "content"),
        ];
        for (request, expected) in cases {
            let err = validate_request(&request).unwrap_err();
            assert_eq!(field(err), (422, expected.to_owned()), "{request:?}");
        }
        let mut upsert = req(Append, Some("x"), None);
        upsert.upsert = true;
        assert_eq!(
            field(validate_request(&upsert).unwrap_err()),
            (422, "upsert".into())
        );
        // Empty optional fields are tolerated where unused.
        assert!(validate_request(&req(Read, Some(""), Some(""))).is_ok());
        assert!(validate_request(&req(Overwrite, Some(""), None)).is_ok());
    }

    #[test]
    fn outcomes() {
        let change = apply(
            "",
            &req(Operation::Append, Some("x".repeat(42).as_str()), None),
            100,
        )
        .unwrap();
        assert_eq!(change.outcome, "appended 42 chars; notes now 43 B");
        let big = "y".repeat(1200);
        let change = apply(&big, &req(Operation::Prepend, Some("🍵"), None), 10_000).unwrap();
        assert_eq!(change.outcome, "prepended 1 char; notes now 1.2 KB");
        let change = apply(&big, &req(Operation::DeleteAllNotes, None, None), 10).unwrap();
        assert_eq!(
            change.outcome,
            "deleted all notes (was 1.2 KB); notes now empty"
        );
        let doc = "## A\nold\n## B\nb\n";
        let mut replace = req(Operation::ReplaceSectionByHeader, Some("new"), Some("a"));
        let change = apply(doc, &replace, 1000).unwrap();
        assert_eq!(
            change.outcome,
            "replaced section \"## A\" (4 chars -> 4 chars); notes now 16 B"
        );
        replace.section_header = Some("C".into());
        replace.upsert = true;
        let change = apply(doc, &replace, 1000).unwrap();
        assert_eq!(change.notes, "## A\nold\n## B\nb\n\n## C\nnew\n");
        assert!(
            change
                .outcome
                .starts_with("added section \"## C\" at the end")
        );
        let change = apply(
            doc,
            &req(Operation::DeleteSectionByHeader, None, Some("## b")),
            1000,
        )
        .unwrap();
        assert_eq!(change.notes, "## A\nold\n");
        assert_eq!(
            change.outcome,
            "deleted section \"## B\" (7 chars); notes now 9 B"
        );
        assert_eq!(read_outcome("", 0), "no notes yet");
        assert_eq!(read_outcome("", 3), "notes are empty (version 3)");
        assert_eq!(read_outcome("abc", 3), "read 3 B of notes (version 3)");
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KB");
        assert_eq!(human_size(65536), "64.0 KB");
        assert_eq!(human_size(3 * 1024 * 1024 + 512 * 1024), "3.5 MB");
    }

    #[test]
    fn the_cap_refuses_growth_and_states_all_three_sizes() {
        let err = apply("abc", &req(Operation::Append, Some("defg"), None), 6).unwrap_err();
        let ApiError::Problem(p) = err else {
            panic!("expected a problem")
        };
        assert_eq!(p.status, 422);
        assert_eq!(p.extensions["current_bytes"], 3);
        assert_eq!(p.extensions["attempted_bytes"], 9);
        assert_eq!(p.extensions["max_bytes"], 6);
        assert!(
            p.detail.contains("9 bytes")
                && p.detail.contains("6 bytes")
                && p.detail.contains("3 bytes")
        );
        // Over a lowered cap, shrinking is still allowed.
        let doc = "## A\naaaa\n## B\nb\n";
        assert!(
            apply(
                doc,
                &req(Operation::DeleteSectionByHeader, None, Some("A")),
                4
            )
            .is_ok()
        );
    }

    #[test]
    fn section_errors_map_to_404_409_422() {
        let doc = "## Tea\na\n## Tea\nb\n";
        let err = apply(
            doc,
            &req(Operation::DeleteSectionByHeader, None, Some("coffee")),
            1000,
        )
        .unwrap_err();
        let ApiError::Problem(p) = err else { panic!() };
        assert_eq!(p.status, 404);
        assert_eq!(p.extensions["headings"], json!(["## Tea", "## Tea"]));
        let err = apply(
            doc,
            &req(Operation::DeleteSectionByHeader, None, Some("tea")),
            1000,
        )
        .unwrap_err();
        let ApiError::Problem(p) = err else { panic!() };
        assert_eq!(p.status, 409);
        assert_eq!(
            p.extensions["matches"],
            json!([{"heading": "## Tea", "line": 1}, {"heading": "## Tea", "line": 3}])
        );
        let err = apply(
            doc,
            &req(Operation::DeleteSectionByHeader, None, Some("###")),
            1000,
        )
        .unwrap_err();
        assert_eq!(field(err), (422, "section_header".into()));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn operation() -> impl Strategy<Value = Operation> {
        prop::sample::select(vec![
            Operation::Read,
            Operation::Overwrite,
            Operation::Append,
            Operation::Prepend,
            Operation::DeleteSectionByHeader,
            Operation::ReplaceSectionByHeader,
            Operation::DeleteAllNotes,
        ])
    }

    fn markdown() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "(## (A|B|a)|A|===|---|```|> # q|text|\r|)(\n|\r\n|\r)",
            1 => any::<String>(),
        ]
    }

    fn notes() -> impl Strategy<Value = String> {
        prop::collection::vec(markdown(), 0..12).prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        /// Any request on any notes is a change or a client error (404, 409, 422), never a
        /// panic or a 500; a change stays within the cap unless it shrinks the notes.
        #[test]
        fn any_request_is_a_change_or_a_client_error(
            current in notes(),
            operation in operation(),
            content in prop::option::of(notes()),
            header in prop::option::of(prop_oneof![
                Just("A".to_owned()), Just("## a".to_owned()), Just("B".to_owned()), any::<String>()
            ]),
            upsert in any::<bool>(),
            max_bytes in 0usize..400,
        ) {
            let request = NotesOperationRequest {
                operation,
                content: content.clone(),
                section_header: header,
                upsert,
            };
            match apply(&current, &request, max_bytes) {
                Ok(change) => {
                    prop_assert!(change.notes.len() <= max_bytes || change.notes.len() <= current.len());
                    prop_assert!(!change.outcome.is_empty());
                    if operation == Operation::Append {
                        prop_assert!(change.notes.starts_with(&current));
                    }
                    if operation == Operation::Prepend {
                        prop_assert!(change.notes.ends_with(&current));
                    }
                }
                Err(ApiError::Problem(p)) => {
                    prop_assert!(matches!(p.status, 404 | 409 | 422), "{} {}", p.status, p.detail);
                }
                Err(ApiError::Internal(e)) => prop_assert!(false, "internal: {e:#}"),
            }
        }
    }
}

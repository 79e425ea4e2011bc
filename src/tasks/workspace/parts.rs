//! The TaskStep part model: a step is one turn of an agent, made of `type`-tagged parts, and
//! the checks a step passes before it is stored. Pure: the references a step makes to earlier tool
//! calls and to artifacts are returned for the caller to look up.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

/// Longest step id, agent name, tool name or tool call id accepted.
pub const MAX_NAME_CHARS: usize = 200;

/// One part of a step, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text written by an agent or a user.
    Text {
        #[schema(min_length = 1)]
        text: String,
    },
    /// A request to call a tool; `tool_call_id` is unique within the task.
    ToolCall {
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
        )]
        tool_call_id: String,
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
        )]
        tool_name: String,
        /// The tool's arguments (any JSON; `{}` when omitted).
        #[serde(default = "empty_object")]
        arguments: Value,
    },
    /// What a tool returned; answers a `tool_call` of this task (in this step or an earlier one).
    ToolResult {
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
        )]
        tool_call_id: String,
        /// The tool's output (a string, or any JSON).
        output: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// A reference to an artifact of this task. `uri` and `mime_type` may be omitted: the server
    /// fills them in from the artifact.
    Artifact {
        artifact_id: Uuid,
        #[serde(default)]
        uri: String,
        #[serde(default)]
        mime_type: String,
    },
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// What kind of searchable text a part holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Text,
    ToolResult,
}

impl TextKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TextKind::Text => "step_text",
            TextKind::ToolResult => "tool_result",
        }
    }
}

/// The references of a checked step that only the database can confirm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRefs {
    /// Tool calls this step makes: (part index, tool_call_id).
    pub calls: Vec<(usize, String)>,
    /// Results answering a call made before this step: (part index, tool_call_id).
    pub earlier_calls: Vec<(usize, String)>,
    /// Artifacts referenced: (part index, artifact_id).
    pub artifacts: Vec<(usize, Uuid)>,
}

/// The canonical URI of an artifact.
pub fn artifact_uri(task_id: Uuid, artifact_id: Uuid) -> String {
    format!("mnemo://tasks/{task_id}/artifacts/{artifact_id}")
}

/// A fresh step id in the TaskStep form (`step_<32 hex>`).
pub fn new_step_id() -> String {
    format!("step_{}", Uuid::now_v7().simple())
}

/// Checks a name-like value: non-empty, at most [`MAX_NAME_CHARS`], no control characters.
pub fn check_name(field: &str, value: &str) -> ApiResult<()> {
    if value.trim().is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("{field} must not be empty"),
        ));
    }
    if value.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::invalid(
            field,
            format!("{field} is longer than {MAX_NAME_CHARS} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("{field} must not contain control characters"),
        ));
    }
    Ok(())
}

/// Checks a step id: 1 to [`MAX_NAME_CHARS`] of `A-Z a-z 0-9 _ - . :` (it names a line of
/// `history.jsonl` and appears in URLs).
pub fn check_step_id(value: &str) -> ApiResult<()> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME_CHARS
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "step_id",
            format!("step_id must be 1 to {MAX_NAME_CHARS} characters of A-Z, a-z, 0-9, _ - . :"),
        ))
    }
}

/// Checks a step's parts and normalises artifact URIs; returns what the database must confirm.
///
/// A `tool_result` answering a `tool_call` earlier in the same step is resolved here; others are
/// listed in [`StepRefs::earlier_calls`]. A tool call id may be used by one call only.
pub fn check_parts(task_id: Uuid, parts: &mut [Part], max_parts: usize) -> ApiResult<StepRefs> {
    if parts.is_empty() {
        return Err(ApiError::invalid("parts", "a step needs at least one part"));
    }
    if parts.len() > max_parts {
        return Err(
            ApiError::invalid("parts", format!("a step has at most {max_parts} parts"))
                .with("limit", max_parts),
        );
    }
    let mut refs = StepRefs::default();
    let mut calls_here: HashSet<String> = HashSet::new();
    for (i, part) in parts.iter_mut().enumerate() {
        match part {
            Part::Text { text } => {
                if text.is_empty() {
                    return Err(ApiError::invalid(
                        format!("parts[{i}].text"),
                        "a text part must not be empty",
                    ));
                }
            }
            Part::ToolCall {
                tool_call_id,
                tool_name,
                ..
            } => {
                check_name(&format!("parts[{i}].tool_call_id"), tool_call_id)?;
                check_name(&format!("parts[{i}].tool_name"), tool_name)?;
                if !calls_here.insert(tool_call_id.clone()) {
                    return Err(ApiError::invalid(
                        format!("parts[{i}].tool_call_id"),
                        format!("tool_call_id '{tool_call_id}' is used by two calls of this step"),
                    ));
                }
                refs.calls.push((i, tool_call_id.clone()));
            }
            Part::ToolResult { tool_call_id, .. } => {
                check_name(&format!("parts[{i}].tool_call_id"), tool_call_id)?;
                if !calls_here.contains(tool_call_id.as_str()) {
                    refs.earlier_calls.push((i, tool_call_id.clone()));
                }
            }
            Part::Artifact {
                artifact_id, uri, ..
            } => {
                let canonical = artifact_uri(task_id, *artifact_id);
                if !uri.is_empty() && *uri != canonical {
                    return Err(ApiError::invalid(
                        format!("parts[{i}].uri"),
                        format!("the uri of artifact {artifact_id} of this task is {canonical}"),
                    ));
                }
                *uri = canonical;
                refs.artifacts.push((i, *artifact_id));
            }
        }
    }
    Ok(refs)
}

/// 422 for a `tool_result` whose call this task never made.
pub fn unknown_call(index: usize, tool_call_id: &str) -> ApiError {
    ApiError::invalid(
        format!("parts[{index}].tool_call_id"),
        format!(
            "tool_result answers tool_call_id '{tool_call_id}', which no tool_call of this task made"
        ),
    )
}

/// 422 for a tool call id this task already used.
pub fn duplicate_call(index: usize, tool_call_id: &str) -> ApiError {
    ApiError::invalid(
        format!("parts[{index}].tool_call_id"),
        format!(
            "tool_call_id '{tool_call_id}' was already used by an earlier tool_call of this task"
        ),
    )
}

/// 422 for an artifact part naming no artifact of this task.
pub fn unknown_artifact(index: usize, artifact_id: Uuid) -> ApiError {
    ApiError::invalid(
        format!("parts[{index}].artifact_id"),
        format!("artifact {artifact_id} does not exist in this task"),
    )
}

/// The searchable text of each part: (part index, kind, text). Text parts and tool results count;
/// a non-string tool output is searched as its JSON text.
pub fn searchable(parts: &[Part]) -> Vec<(usize, TextKind, String)> {
    parts
        .iter()
        .enumerate()
        .filter_map(|(i, part)| match part {
            Part::Text { text } => Some((i, TextKind::Text, text.clone())),
            Part::ToolResult { output, .. } => Some((i, TextKind::ToolResult, output_text(output))),
            _ => None,
        })
        .collect()
}

/// A tool output as text: strings as they are, other JSON serialised.
pub fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Splits text into chunks of at most `max_chars` characters: (character offset, chunk). Search
/// indexes chunks, so a long tool output is searchable whole.
pub fn chunks(text: &str, max_chars: usize) -> Vec<(usize, &str)> {
    let max_chars = max_chars.max(1);
    let mut out = Vec::new();
    let mut start_byte = 0;
    let mut start_char = 0;
    let mut count = 0;
    for (byte, _) in text.char_indices() {
        if count == max_chars {
            out.push((start_char, &text[start_byte..byte]));
            start_byte = byte;
            start_char += count;
            count = 0;
        }
        count += 1;
    }
    if count > 0 || out.is_empty() {
        out.push((start_char, &text[start_byte..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Vec<Part> {
        serde_json::from_value(value).unwrap()
    }

    fn field(err: ApiError) -> String {
        match err {
            ApiError::Problem(p) => p.extensions["field"].as_str().unwrap().to_string(),
            other => panic!("not a problem: {other:?}"),
        }
    }

    #[test]
    fn parts_are_tagged_by_type() {
        let parts = parse(json!([
            {"type": "text", "text": "hello"},
            {"type": "tool_call", "tool_call_id": "c1", "tool_name": "ls"},
            {"type": "tool_result", "tool_call_id": "c1", "output": "a b"},
            {"type": "artifact", "artifact_id": "0190b5b0-0000-7000-8000-000000000001", "mime_type": "text/plain"}
        ]));
        assert_eq!(
            parts[1],
            Part::ToolCall {
                tool_call_id: "c1".into(),
                tool_name: "ls".into(),
                arguments: json!({})
            }
        );
        assert_eq!(
            serde_json::to_value(&parts[2]).unwrap(),
            json!({"type": "tool_result", "tool_call_id": "c1", "output": "a b", "is_error": false})
        );
        assert!(serde_json::from_value::<Part>(json!({"type": "image", "url": "x"})).is_err());
        assert!(serde_json::from_value::<Part>(json!({"type": "text"})).is_err());
    }

    #[test]
    fn a_result_answering_a_call_in_the_same_step_needs_no_lookup() {
        let task = Uuid::now_v7();
        let mut parts = parse(json!([
            {"type": "tool_call", "tool_call_id": "c1", "tool_name": "ls", "arguments": {"path": "/"}},
            {"type": "tool_result", "tool_call_id": "c1", "output": "bin etc"},
            {"type": "tool_result", "tool_call_id": "c0", "output": "late", "is_error": true}
        ]));
        let refs = check_parts(task, &mut parts, 10).unwrap();
        assert_eq!(refs.calls, vec![(0, "c1".to_string())]);
        assert_eq!(refs.earlier_calls, vec![(2, "c0".to_string())]);
    }

    #[test]
    fn a_result_before_its_call_in_the_same_step_is_an_earlier_reference() {
        let mut parts = parse(json!([
            {"type": "tool_result", "tool_call_id": "c1", "output": "x"},
            {"type": "tool_call", "tool_call_id": "c1", "tool_name": "ls"}
        ]));
        let refs = check_parts(Uuid::now_v7(), &mut parts, 10).unwrap();
        assert_eq!(refs.earlier_calls, vec![(0, "c1".to_string())]);
    }

    #[test]
    fn bad_parts_name_their_field() {
        let task = Uuid::now_v7();
        let cases = [
            (json!([]), "parts"),
            (json!([{"type": "text", "text": ""}]), "parts[0].text"),
            (
                json!([{"type": "text", "text": "a"}, {"type": "tool_call", "tool_call_id": "", "tool_name": "x"}]),
                "parts[1].tool_call_id",
            ),
            (
                json!([{"type": "tool_call", "tool_call_id": "a", "tool_name": " "}]),
                "parts[0].tool_name",
            ),
            (
                json!([
                    {"type": "tool_call", "tool_call_id": "a", "tool_name": "x"},
                    {"type": "tool_call", "tool_call_id": "a", "tool_name": "y"}
                ]),
                "parts[1].tool_call_id",
            ),
            (
                json!([{"type": "artifact", "artifact_id": "0190b5b0-0000-7000-8000-000000000001", "uri": "file://x", "mime_type": "a/b"}]),
                "parts[0].uri",
            ),
        ];
        for (value, expected) in cases {
            let mut parts = parse(value.clone());
            let err = check_parts(task, &mut parts, 10).unwrap_err();
            assert_eq!(field(err), expected, "{value}");
        }
        let mut many = parse(json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]));
        assert_eq!(field(check_parts(task, &mut many, 1).unwrap_err()), "parts");
    }

    #[test]
    fn artifact_uris_are_filled_in_and_checked() {
        let task = Uuid::now_v7();
        let artifact = Uuid::now_v7();
        let canonical = artifact_uri(task, artifact);
        let mut parts = vec![Part::Artifact {
            artifact_id: artifact,
            uri: String::new(),
            mime_type: String::new(),
        }];
        let refs = check_parts(task, &mut parts, 10).unwrap();
        assert_eq!(refs.artifacts, vec![(0, artifact)]);
        assert!(matches!(&parts[0], Part::Artifact { uri, .. } if *uri == canonical));
        let mut again = parts.clone();
        assert!(check_parts(task, &mut again, 10).is_ok());
        assert!(canonical.starts_with(&format!("mnemo://tasks/{task}/artifacts/")));
    }

    #[test]
    fn step_ids_and_names() {
        assert!(check_step_id(&new_step_id()).is_ok());
        assert!(new_step_id().starts_with("step_"));
        assert!(check_step_id("step_1:a.b-c").is_ok());
        assert!(check_step_id("").is_err());
        assert!(check_step_id("a/b").is_err());
        assert!(check_step_id(&"a".repeat(MAX_NAME_CHARS + 1)).is_err());
        assert!(check_name("agent_name", "planner").is_ok());
        assert!(check_name("agent_name", "a\nb").is_err());
    }

    #[test]
    fn chunks_split_on_characters() {
        assert_eq!(chunks("", 3), vec![(0, "")]);
        assert_eq!(chunks("abc", 3), vec![(0, "abc")]);
        assert_eq!(chunks("abcdefg", 3), vec![(0, "abc"), (3, "def"), (6, "g")]);
        assert_eq!(chunks("ééé€", 2), vec![(0, "éé"), (2, "é€")]);
        let long = "x".repeat(45_001);
        let parts = chunks(&long, 20_000);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2], (40_000, &long[40_000..]));
    }

    #[test]
    fn searchable_text_covers_text_and_tool_output() {
        let parts = parse(json!([
            {"type": "text", "text": "deploying"},
            {"type": "tool_call", "tool_call_id": "c1", "tool_name": "sh"},
            {"type": "tool_result", "tool_call_id": "c1", "output": {"exit": 0, "stdout": "ok"}}
        ]));
        let found = searchable(&parts);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0], (0, TextKind::Text, "deploying".to_string()));
        assert_eq!(found[1].0, 2);
        assert_eq!(found[1].1, TextKind::ToolResult);
        assert!(found[1].2.contains("\"stdout\":\"ok\""));
    }
}

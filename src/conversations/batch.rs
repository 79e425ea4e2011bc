//! Validation of incoming message batches. Pure: no I/O.
//!
//! A batch is refused as a whole (422 naming `messages_batch[i].field`) or accepted as a whole, so
//! nothing of a bad batch is ever stored. Repeats of one id with the same content inside a batch
//! are collapsed (they count as duplicates); the same id with different content (or both sent and
//! deleted) is an error, because one of the two would silently be lost.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::model::{IncomingMessage, Sender};
use crate::error::ApiError;

/// Longest session, agent and message id, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// The agent of a session when the client names none.
pub const DEFAULT_AGENT: &str = "assistant";

/// A message ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub id: String,
    /// `user`, `ai` or `tool`.
    pub sender: &'static str,
    pub text: String,
    pub sent_at: DateTime<Utc>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
    /// The client's time of this state of the message (orders updates of one message).
    pub edited_at: Option<DateTime<Utc>>,
}

/// A message to delete (`deleted: true`).
#[derive(Debug, Clone, PartialEq)]
pub struct Deletion {
    pub id: String,
    pub edited_at: Option<DateTime<Utc>>,
}

/// A validated batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// Messages to store, or to update when stored with other content.
    pub messages: Vec<NewMessage>,
    pub deletions: Vec<Deletion>,
    /// Repeats collapsed inside the batch.
    pub repeated: usize,
}

impl Batch {
    /// Earliest and latest message time.
    pub fn span(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let first = self.messages.iter().map(|m| m.sent_at).min()?;
        let last = self.messages.iter().map(|m| m.sent_at).max()?;
        Some((first, last))
    }

    /// Messages received, deletions and repeats included.
    pub fn received(&self) -> usize {
        self.messages.len() + self.deletions.len() + self.repeated
    }
}

/// The session id of a request: checked like [`check_id`] when sent; absent, a new UUIDv7 (the
/// server makes the session and returns its id).
pub fn session_or_new(value: Option<&str>) -> Result<String, ApiError> {
    match value {
        None => Ok(uuid::Uuid::now_v7().to_string()),
        Some(v) => check_id("session_id", Some(v)),
    }
}

/// Checks an id-like value: present, non-blank, at most [`MAX_ID_BYTES`], no control characters.
pub fn check_id(field: &str, value: Option<&str>) -> Result<String, ApiError> {
    let Some(value) = value else {
        return Err(ApiError::invalid(field, format!("`{field}` is required")));
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not be empty"),
        ));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` is longer than {MAX_ID_BYTES} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` contains control characters"),
        ));
    }
    Ok(value.to_owned())
}

/// The agent id, defaulting to [`DEFAULT_AGENT`].
pub fn agent(value: Option<&str>) -> Result<String, ApiError> {
    match value {
        None => Ok(DEFAULT_AGENT.into()),
        Some(v) => check_id("agent_id", Some(v)),
    }
}

/// Validates `messages` (the JSON array named `field`); `max` is the largest accepted count (413).
pub fn validate(field: &str, messages: &[IncomingMessage], max: usize) -> Result<Batch, ApiError> {
    if messages.len() > max {
        return Err(ApiError::too_large(format!(
            "`{field}` holds {} messages; at most {max} are accepted per batch",
            messages.len()
        ))
        .with("limit_messages", max));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::with_capacity(messages.len());
    let mut deletions = Vec::new();
    let mut repeated = 0;
    for (i, message) in messages.iter().enumerate() {
        let id = check_id(&format!("{field}[{i}].id"), Some(&message.id))?;
        if let Some(&first) = seen.get(message.id.trim()) {
            if !same_content(&messages[first], message) {
                return Err(ApiError::invalid(
                    format!("{field}[{i}].id"),
                    format!(
                        "`{field}[{i}]` repeats the id of `{field}[{first}]` with different content"
                    ),
                ));
            }
            repeated += 1;
            continue;
        }
        seen.insert(message.id.trim(), i);
        if message.deleted {
            deletions.push(Deletion {
                id,
                edited_at: message.edited_at,
            });
            continue;
        }
        let required = |name: &str| {
            ApiError::invalid(
                format!("{field}[{i}].{name}"),
                format!("`{field}[{i}].{name}` is required (unless `deleted` is true)"),
            )
        };
        let text = message.text.as_deref().ok_or_else(|| required("text"))?;
        let sender = message.sender.ok_or_else(|| required("sender"))?;
        let sent_at = message.timestamp.ok_or_else(|| required("timestamp"))?;
        if text.contains('\0') {
            return Err(ApiError::invalid(
                format!("{field}[{i}].text"),
                "text must not contain NUL characters",
            ));
        }
        out.push(NewMessage {
            id,
            sender: match sender {
                Sender::User => "user",
                Sender::Ai => "ai",
            },
            text: text.to_owned(),
            sent_at,
            tool_calls: None,
            tool_call_id: None,
            edited_at: message.edited_at,
        });
    }
    Ok(Batch {
        messages: out,
        deletions,
        repeated,
    })
}

/// Whether two messages of one batch with the same id say the same thing.
fn same_content(a: &IncomingMessage, b: &IncomingMessage) -> bool {
    a.deleted == b.deleted && (a.deleted || (a.text == b.text && a.sender == b.sender))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, text: &str, sender: Sender) -> IncomingMessage {
        IncomingMessage {
            id: id.into(),
            text: Some(text.into()),
            sender: Some(sender),
            timestamp: DateTime::from_timestamp(1_700_000_000, 0),
            edited_at: None,
            deleted: false,
        }
    }

    fn gone(id: &str) -> IncomingMessage {
        IncomingMessage {
            id: id.into(),
            text: None,
            sender: None,
            timestamp: None,
            edited_at: None,
            deleted: true,
        }
    }

    fn field_of(err: ApiError) -> (u16, String) {
        let field = err.field().unwrap_or_default().to_owned();
        (err.status_code().as_u16(), field)
    }

    #[test]
    fn repeats_collapse_and_conflicts_name_the_index() {
        let batch = validate(
            "messages_batch",
            &[
                msg("a", "hi", Sender::User),
                msg("b", "yo", Sender::Ai),
                msg("a", "hi", Sender::User),
            ],
            10,
        )
        .unwrap();
        assert_eq!(batch.messages.len(), 2);
        assert_eq!(batch.repeated, 1);
        assert_eq!(batch.received(), 3);

        let err = validate(
            "messages_batch",
            &[
                msg("a", "hi", Sender::User),
                msg("b", "yo", Sender::Ai),
                msg("c", "x", Sender::Ai),
                msg("a", "changed", Sender::User),
            ],
            10,
        )
        .unwrap_err();
        assert_eq!(field_of(err), (422, "messages_batch[3].id".into()));
    }

    #[test]
    fn deletions_need_only_an_id_and_may_not_contradict_a_message() {
        let batch = validate(
            "m",
            &[msg("a", "hi", Sender::User), gone("b"), gone("b")],
            10,
        )
        .unwrap();
        assert_eq!(batch.messages.len(), 1);
        assert_eq!(batch.deletions.len(), 1);
        assert_eq!(batch.deletions[0].id, "b");
        assert_eq!(batch.received(), 3);
        let err = validate("m", &[msg("a", "hi", Sender::User), gone("a")], 10).unwrap_err();
        assert_eq!(field_of(err), (422, "m[1].id".into()));
        let mut no_text = msg("c", "x", Sender::Ai);
        no_text.text = None;
        let err = validate("m", &[no_text], 10).unwrap_err();
        assert_eq!(field_of(err), (422, "m[0].text".into()));
        let mut no_time = msg("c", "x", Sender::Ai);
        no_time.timestamp = None;
        let err = validate("m", &[no_time], 10).unwrap_err();
        assert_eq!(field_of(err), (422, "m[0].timestamp".into()));
    }

    #[test]
    fn a_missing_session_id_is_made_and_a_blank_one_refused() {
        let made = session_or_new(None).unwrap();
        let uuid = uuid::Uuid::parse_str(&made).unwrap();
        assert_eq!(uuid.get_version_num(), 7);
        assert_ne!(session_or_new(None).unwrap(), made);
        assert_eq!(session_or_new(Some(" s ")).unwrap(), "s");
        assert_eq!(
            field_of(session_or_new(Some(" ")).unwrap_err()),
            (422, "session_id".into())
        );
    }

    #[test]
    fn too_many_is_413_and_blank_ids_are_named() {
        let many: Vec<_> = (0..3)
            .map(|i| msg(&i.to_string(), "t", Sender::User))
            .collect();
        assert_eq!(field_of(validate("m", &many, 2).unwrap_err()).0, 413);
        let err = validate(
            "m",
            &[msg("ok", "t", Sender::User), msg(" ", "t", Sender::User)],
            5,
        )
        .unwrap_err();
        assert_eq!(field_of(err), (422, "m[1].id".into()));
    }

    #[test]
    fn ids_are_checked() {
        assert_eq!(
            field_of(check_id("session_id", None).unwrap_err()),
            (422, "session_id".into())
        );
        assert!(check_id("session_id", Some("a\nb")).is_err());
        assert!(check_id("session_id", Some(&"x".repeat(257))).is_err());
        assert_eq!(check_id("session_id", Some(" s1 ")).unwrap(), "s1");
        assert_eq!(agent(None).unwrap(), "assistant");
    }

    #[test]
    fn span_covers_all_messages() {
        let mut early = msg("a", "t", Sender::User);
        early.timestamp = DateTime::from_timestamp(10, 0);
        let late = msg("b", "t", Sender::User);
        let batch = validate("m", &[late.clone(), early.clone(), gone("c")], 5).unwrap();
        assert_eq!(
            batch.span(),
            Some((early.timestamp.unwrap(), late.timestamp.unwrap()))
        );
    }
}

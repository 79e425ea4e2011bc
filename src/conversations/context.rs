//! Compiles a turn's working memory into OpenAI-style messages. Pure: no I/O.
//!
//! Order: the system prompt; the long-term notes of (user, agent) in their own system message;
//! what was recalled; the session's running summary when the session is longer than the window;
//! the short-term window (the session's last N stored messages, minus this turn's messages); this
//! turn's new messages.

use std::collections::HashSet;

use crate::llm::{ChatMessage, ToolCall};

use super::batch::NewMessage;
use super::store::WindowMessage;

/// Heading of the notes section; clients and tests can find it by this text.
pub const NOTES_HEADING: &str = "## Long-term notes";

/// The notes section for `agent`.
pub fn notes_section(agent: &str, notes: Option<&str>) -> String {
    let body = match notes.map(str::trim) {
        Some(text) if !text.is_empty() => text.to_owned(),
        _ => "(none yet)".to_owned(),
    };
    format!(
        "{NOTES_HEADING}\n\nWhat you (agent `{agent}`) keep about this user across sessions. \
         Keep them current with the `manage_long_term_memory` tool.\n\n{body}"
    )
}

fn to_chat(
    sender: &str,
    text: &str,
    tool_calls: Option<&serde_json::Value>,
    call_id: Option<&str>,
) -> ChatMessage {
    match sender {
        "ai" => {
            let calls: Vec<ToolCall> = tool_calls
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            ChatMessage {
                role: "assistant".into(),
                content: if text.is_empty() && !calls.is_empty() {
                    None
                } else {
                    Some(text.to_owned())
                },
                tool_calls: calls,
                tool_call_id: None,
            }
        }
        "tool" => ChatMessage::tool_result(call_id.unwrap_or_default(), text),
        _ => ChatMessage::text("user", text),
    }
}

/// Heading of the recalled-memories section.
pub const RECALL_HEADING: &str = "## Recalled memories";

/// The recalled-memories section: one line per hit, saying where it comes from.
pub fn recall_section(hits: &[crate::recall::RecallHit]) -> String {
    let mut out = format!(
        "{RECALL_HEADING}\n\nEarlier material that may bear on the user's message (from other \
         sessions, stored memories and task history; matched words in **bold**):\n"
    );
    for hit in hits {
        let origin = match (hit.kind, &hit.placeholder, &hit.session_id) {
            (crate::recall::Kind::Memory, Some(placeholder), _) => placeholder.clone(),
            (crate::recall::Kind::Message, _, Some(session)) => format!(
                "message in session `{session}`, {} at {}",
                hit.sender.as_deref().unwrap_or("user"),
                hit.timestamp.map(|t| t.to_rfc3339()).unwrap_or_default()
            ),
            (crate::recall::Kind::Note, _, _) => format!(
                "notes of `{}` {}",
                hit.agent_id.as_deref().unwrap_or_default(),
                hit.header.as_deref().unwrap_or_default()
            ),
            _ => format!(
                "task {}",
                hit.task_id.map(|t| t.to_string()).unwrap_or_default()
            ),
        };
        let snippet = hit.snippet.replace('\n', " ");
        out.push_str(&format!("\n- ({origin}) {snippet}"));
    }
    out
}

/// Heading of the section holding the session's running summary.
pub const EARLIER_HEADING: &str = "## Earlier in this conversation";

/// The running-summary section: what the messages before the window were about.
pub fn earlier_section(summary: &str) -> String {
    format!(
        "{EARLIER_HEADING}\n\nThis session is longer than the recent messages that follow. A \
         summary of it so far:\n\n{}",
        summary.trim()
    )
}

/// The compiled messages, and how many of them came from the window. `recalled`, when not
/// empty, becomes a system message after the notes; `earlier` (the session's running summary,
/// given when the session holds more than the window) one after that.
pub fn compile(
    system_prompt: &str,
    agent: &str,
    notes: Option<&str>,
    recalled: &[crate::recall::RecallHit],
    earlier: Option<&str>,
    window: &[WindowMessage],
    new: &[NewMessage],
) -> (Vec<ChatMessage>, usize) {
    let mut out = vec![
        ChatMessage::text("system", system_prompt),
        ChatMessage::text("system", notes_section(agent, notes)),
    ];
    if !recalled.is_empty() {
        out.push(ChatMessage::text("system", recall_section(recalled)));
    }
    if let Some(summary) = earlier.filter(|s| !s.trim().is_empty()) {
        out.push(ChatMessage::text("system", earlier_section(summary)));
    }
    let fresh: HashSet<&str> = new.iter().map(|m| m.id.as_str()).collect();
    // A window cut between a tool call and its result would leave a result whose call is missing,
    // which chat APIs refuse: such results are left out.
    let mut calls_seen: HashSet<String> = HashSet::new();
    let mut from_window = 0;
    for m in window.iter().filter(|m| !fresh.contains(m.id.as_str())) {
        let message = to_chat(
            &m.sender,
            &m.text,
            m.tool_calls.as_ref(),
            m.tool_call_id.as_deref(),
        );
        if message.role == "tool"
            && !message
                .tool_call_id
                .as_ref()
                .is_some_and(|id| calls_seen.contains(id))
        {
            continue;
        }
        calls_seen.extend(message.tool_calls.iter().map(|c| c.id.clone()));
        out.push(message);
        from_window += 1;
    }
    for m in new {
        out.push(to_chat(
            m.sender,
            &m.text,
            m.tool_calls.as_ref(),
            m.tool_call_id.as_deref(),
        ));
    }
    (out, from_window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use serde_json::json;

    fn w(id: &str, sender: &str, text: &str) -> WindowMessage {
        WindowMessage {
            id: id.into(),
            sender: sender.into(),
            text: text.into(),
            sent_at: DateTime::from_timestamp(1, 0).unwrap(),
            archived_at: DateTime::from_timestamp(1, 0).unwrap(),
            tool_calls: None,
            tool_call_id: None,
        }
    }

    #[test]
    fn sections_in_order_and_new_messages_not_repeated() {
        let window = vec![
            w("1", "user", "hi"),
            w("2", "ai", "hello"),
            w("3", "user", "again"),
        ];
        let new = vec![NewMessage {
            id: "3".into(),
            sender: "user",
            text: "again".into(),
            sent_at: DateTime::from_timestamp(2, 0).unwrap(),
            tool_calls: None,
            tool_call_id: None,
            edited_at: None,
        }];
        let (messages, from_window) = compile(
            "be nice",
            "assistant",
            Some("likes tea"),
            &[],
            None,
            &window,
            &new,
        );
        assert_eq!(from_window, 2);
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "system", "user", "assistant", "user"]);
        assert_eq!(messages[0].content.as_deref(), Some("be nice"));
        let notes = messages[1].content.as_deref().unwrap();
        assert!(
            notes.starts_with(NOTES_HEADING) && notes.ends_with("likes tea"),
            "{notes}"
        );
        assert_eq!(messages[4].content.as_deref(), Some("again"));
    }

    #[test]
    fn the_running_summary_comes_before_the_window() {
        let window = vec![w("9", "user", "and the egress bill?")];
        let (messages, from_window) =
            compile("s", "a", None, &[], Some("Topics: backup.\n"), &window, &[]);
        assert_eq!(from_window, 1);
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "system", "system", "user"]);
        let earlier = messages[2].content.as_deref().unwrap();
        assert!(earlier.starts_with(EARLIER_HEADING), "{earlier}");
        assert!(earlier.ends_with("so far:\n\nTopics: backup."), "{earlier}");
        // A blank summary adds nothing.
        let (messages, _) = compile("s", "a", None, &[], Some("  "), &window, &[]);
        assert_eq!(messages.len(), 3);
    }

    #[test]
    fn orphan_tool_results_are_dropped_and_calls_kept() {
        let mut orphan = w("1", "tool", "result of a call cut off");
        orphan.tool_call_id = Some("gone".into());
        let mut call = w("2", "ai", "");
        call.tool_calls = Some(json!([{"id": "c1", "type": "function",
            "function": {"name": "search_memory", "arguments": "{}"}}]));
        let mut result = w("3", "tool", "found");
        result.tool_call_id = Some("c1".into());
        let (messages, from_window) =
            compile("s", "a", None, &[], None, &[orphan, call, result], &[]);
        assert_eq!(from_window, 2);
        assert_eq!(messages[2].role, "assistant");
        assert_eq!(messages[2].content, None);
        assert_eq!(messages[2].tool_calls[0].function.name, "search_memory");
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("c1"));
        assert!(
            messages[1]
                .content
                .as_deref()
                .unwrap()
                .ends_with("(none yet)")
        );
    }
}

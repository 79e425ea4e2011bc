//! A session's running summary: refreshed in the background once `MNEMO_CHAT_SUMMARY_EVERY`
//! messages arrived since the last one, never on the archive write path (the write only commits;
//! [`schedule`] starts the refresh after it). With a model the summary is the model's (the previous
//! summary plus the messages since); without one, or when the model fails, it is [`digest`]'s: the
//! recurring topics, the names mentioned and the user's questions still open, with no model. Its
//! state ([`DigestState`]) is stored with the summary (`session_digests`), so a refresh reads the
//! messages archived since the last one and no more: the cost of a refresh follows the messages
//! it adds, not the length of the session.

mod digest;
mod stopwords;

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use super::store::{self, Archived};
use crate::access::Caller;
use crate::error::ApiResult;
use crate::state::AppState;

pub use digest::{DigestState, digest};

/// Messages a refresh reads, at most: the session's last ones when no digest state is stored
/// yet (or when more than this arrived since the last refresh).
const MAX_MESSAGES: i64 = 500;
/// Messages since the last summary a model is shown, at most.
const MAX_MODEL_MESSAGES: usize = 200;
/// Characters of one message a model is shown.
const MAX_MESSAGE_CHARS: usize = 2000;
/// Characters of a stored summary.
const MAX_SUMMARY_CHARS: usize = 4000;

/// A message as the summary sees it: `user`, `ai` or `tool`, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub sender: String,
    pub text: String,
}

impl Line {
    pub fn new(sender: &str, text: &str) -> Self {
        Line {
            sender: sender.into(),
            text: text.into(),
        }
    }

    /// User and assistant messages with text; tool results and bare tool calls say little.
    fn counts(&self) -> bool {
        matches!(self.sender.as_str(), "user" | "ai") && !self.text.trim().is_empty()
    }
}

/// The running-summary prompt: (system, user).
pub fn prompt(previous: Option<&str>, since: &[Line]) -> (String, String) {
    let system = "You keep the running summary of a chat between a user and an assistant. \
        Write the updated summary in at most 150 words of plain text: the topics, the people, \
        places and things named, what was decided, and the user's questions still open. \
        No preamble."
        .to_owned();
    let previous = match previous.map(str::trim) {
        Some(text) if !text.is_empty() => text,
        _ => "No summary yet.",
    };
    let mut user = format!("Previous summary:\n{previous}\n\nMessages since (oldest first):");
    for line in since.iter().filter(|l| l.counts()) {
        let who = if line.sender == "user" {
            "user"
        } else {
            "assistant"
        };
        let text: String = line.text.chars().take(MAX_MESSAGE_CHARS).collect();
        user.push_str(&format!("\n[{who}] {text}"));
    }
    user.push_str("\n\nWrite the updated summary.");
    (system, user)
}

/// [`schedule`] after `archived`, only when the archive made a refresh due: the archive itself
/// answered the session's message count and what the summary covers, so an archive that leaves
/// the summary current costs no other read.
pub fn schedule_after(state: &AppState, caller: &Caller, session_id: &str, archived: &Archived) {
    let every = i64::from(state.config.conversations.chat_summary_every);
    let since = i64::from(archived.message_count) - i64::from(archived.summary_covers);
    if !archived.new_ids.is_empty() && every > 0 && since >= every {
        schedule(state, caller, session_id);
    }
}

/// Starts a background refresh of the session's summary, once [`schedule_after`] found it due.
/// Returns at once; the refresh reads and writes in its own transactions. One refresh per session
/// at a time in this process: a burst of archives starts one, which looks again once it has stored a summary (the
/// archives it skipped may have made the next one due).
fn schedule(state: &AppState, caller: &Caller, session_id: &str) {
    let key = (
        caller.tenant_id.clone(),
        caller.user_id.clone(),
        session_id.to_owned(),
    );
    if !IN_FLIGHT
        .lock()
        .is_ok_and(|mut running| running.insert(key.clone()))
    {
        return;
    }
    let state = state.clone();
    let caller = caller.clone();
    let session_id = session_id.to_owned();
    state.jobs.clone().spawn(async move {
        let _running = Running(key);
        for _ in 0..3 {
            match refresh_once(&state, &caller, &session_id).await {
                // The archives that arrived meanwhile made the next one due.
                Ok(Refreshed::Stored { due_again: true }) => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(session_id, error = %err, "session summary refresh failed");
                    break;
                }
            }
        }
    });
}

type SessionKey = (String, String, String);

/// Sessions whose summary this process is refreshing.
static IN_FLIGHT: LazyLock<Mutex<HashSet<SessionKey>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// Removes its session from [`IN_FLIGHT`] when the job ends, however it ends.
struct Running(SessionKey);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut running) = IN_FLIGHT.lock() {
            running.remove(&self.0);
        }
    }
}

/// Recomputes and stores the summary when `MNEMO_CHAT_SUMMARY_EVERY` messages or more arrived
/// since the one stored; true when a new one was stored.
pub async fn refresh(state: &AppState, caller: &Caller, session_id: &str) -> ApiResult<bool> {
    Ok(matches!(
        refresh_once(state, caller, session_id).await?,
        Refreshed::Stored { .. }
    ))
}

/// What [`refresh_once`] did.
enum Refreshed {
    /// Nothing was due, or a newer summary was stored meanwhile.
    Nothing,
    /// A new summary was stored; `due_again` when as many messages as the interval arrived
    /// while it was made (the write answers that, so no read is needed to know).
    Stored { due_again: bool },
}

/// [`refresh`]: one read call (where the summary stands, and when due what to fold in) and,
/// when due, one write call.
async fn refresh_once(state: &AppState, caller: &Caller, session_id: &str) -> ApiResult<Refreshed> {
    // Validated at start-up: at most 10,000.
    let every = i32::try_from(state.config.conversations.chat_summary_every).unwrap_or(i32::MAX);
    if every == 0 {
        return Ok(Refreshed::Nothing);
    }
    let retention = state
        .config
        .conversations
        .history_retention_days
        .and_then(|d| i32::try_from(d).ok());
    // One call: where the summary stands, and when due the digest's state and the messages
    // since it (the first time, the last ones).
    let Some(due) = store::summary_due(caller, retention, session_id, every, MAX_MESSAGES).await?
    else {
        return Ok(Refreshed::Nothing);
    };
    let current = due.state;
    let since = i64::from(current.message_count) - i64::from(current.covers);
    if since < i64::from(every) {
        return Ok(Refreshed::Nothing);
    }
    let (through, mut folded) = due.digest.unwrap_or_default();
    let through = due.messages.iter().map(|m| m.seq).fold(through, i64::max);
    let lines: Vec<Line> = due
        .messages
        .into_iter()
        .map(|m| Line {
            sender: m.sender,
            text: m.text,
        })
        .collect();
    folded.fold(&lines);
    let summary = match &state.llm {
        Some(llm) => {
            let new = usize::try_from(since)
                .unwrap_or(usize::MAX)
                .min(MAX_MODEL_MESSAGES);
            let start = lines.len().saturating_sub(new);
            let (system, user) = prompt(current.summary.as_deref(), &lines[start..]);
            match llm.complete_text(system, user).await {
                Ok(text) => text,
                Err(err) => {
                    tracing::warn!(session_id, error = %err, "model summary failed; using the digest");
                    folded.render()
                }
            }
        }
        None => folded.render(),
    };
    let summary: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
    // One call, its own transaction.
    let uncovered = store::store_summary(
        caller,
        session_id,
        &summary,
        current.message_count,
        through,
        &folded,
    )
    .await?;
    Ok(match uncovered {
        Some(uncovered) => Refreshed::Stored {
            due_again: uncovered >= every,
        },
        None => Refreshed::Nothing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat() -> Vec<Line> {
        vec![
            Line::new(
                "user",
                "Hi! We are moving the Postgres cluster from Hetzner to AWS.",
            ),
            Line::new(
                "ai",
                "Sounds good. The cluster migration needs a fresh backup first.",
            ),
            Line::new(
                "user",
                "Alice runs the backup tonight. Is the replica in Frankfurt ready?",
            ),
            Line::new("ai", "The Frankfurt replica is ready and lagging 2 s."),
            Line::new("tool", "{\"lag\": 2}"),
            Line::new(
                "user",
                "Thanks. Could Alice keep the old backup for 30 days? And who pays the egress bill?",
            ),
            Line::new("ai", ""),
        ]
    }

    #[test]
    fn the_digest_names_topics_names_and_open_questions() {
        let text = digest(&chat());
        assert!(
            text.starts_with("5 messages (3 from the user, 2 from the assistant)."),
            "{text}"
        );
        // Words in several messages, most first; not the names.
        assert!(
            text.contains("\nTopics: backup, cluster, replica"),
            "{text}"
        );
        assert!(!text.contains("Topics: hetzner"), "{text}");
        // Capitalised words inside sentences; "Thanks", "Could", "Sounds", "Hi" are not names.
        let names = text
            .lines()
            .find(|l| l.starts_with("Names: "))
            .expect("names");
        for name in ["Postgres", "Hetzner", "AWS", "Alice", "Frankfurt"] {
            assert!(names.contains(name), "{name}: {names}");
        }
        for word in ["Thanks", "Could", "Sounds", "Hi", "The", "And"] {
            assert!(
                !names.split([' ', ',', '.']).any(|n| n == word),
                "{word}: {names}"
            );
        }
        assert!(names.starts_with("Names: Alice, Frankfurt"), "{names}");
        // The replica question was taken up by the assistant; the last two were not.
        let open: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "Open questions:")
            .collect();
        assert_eq!(
            open,
            [
                "Open questions:",
                "- Could Alice keep the old backup for 30 days?",
                "- And who pays the egress bill?"
            ],
            "{text}"
        );
    }

    #[test]
    fn the_digest_is_deterministic_and_copes_with_little() {
        assert_eq!(digest(&chat()), digest(&chat()));
        assert_eq!(
            digest(&[]),
            "0 messages (0 from the user, 0 from the assistant)."
        );
        let one = digest(&[Line::new("user", "Is it up?")]);
        assert!(one.ends_with("Open questions:\n- Is it up?"), "{one}");
        let answered = digest(&[Line::new("user", "Is it up?"), Line::new("ai", "Yes.")]);
        assert!(!answered.contains("Open questions"), "{answered}");
        // One word in one message only: still some topic rather than none.
        let short = digest(&[Line::new("user", "kubernetes upgrade")]);
        assert!(short.contains("Topics: kubernetes, upgrade."), "{short}");
        let long = "why ".repeat(200) + "?";
        let text = digest(&[Line::new("user", &long)]);
        assert!(text.contains('…'), "long questions are cut");
    }

    #[test]
    fn the_setting_is_bounded_and_named() {
        let mut config = crate::conversations::ConversationsConfig::default();
        assert_eq!(config.chat_summary_every, 20);
        config.chat_summary_every = 0;
        assert!(config.validate().is_ok(), "0 turns summaries off");
        config.chat_summary_every = 10_001;
        let err = config.validate().unwrap_err();
        assert!(
            err.starts_with("MNEMO_CHAT_SUMMARY_EVERY") && !err.contains('\n'),
            "{err}"
        );
    }

    #[test]
    fn the_prompt_holds_the_previous_summary_and_the_new_messages() {
        let (system, user) = prompt(None, &chat()[4..]);
        assert!(system.contains("running summary"));
        assert!(
            user.starts_with("Previous summary:\nNo summary yet.\n\n"),
            "{user}"
        );
        assert!(
            user.contains("[user] Thanks. Could Alice keep the old backup"),
            "{user}"
        );
        assert!(!user.contains("lag"), "tool results are left out: {user}");
        assert!(!user.contains("[assistant] \n"), "{user}");
        let (_, user) = prompt(Some("Moving Postgres to AWS."), &chat()[..1]);
        assert!(
            user.contains("Previous summary:\nMoving Postgres to AWS."),
            "{user}"
        );
        assert!(user.ends_with("Write the updated summary."), "{user}");
    }
}

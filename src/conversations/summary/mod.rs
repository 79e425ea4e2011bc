//! A session's running summary: refreshed in the background once `MNEMO_CHAT_SUMMARY_EVERY`
//! messages arrived since the last one, never on the archive write path (the write only commits;
//! [`schedule`] starts the refresh after it). With a model the summary is the model's (the previous
//! summary plus the messages since); without one, or when the model fails, it is [`digest`]: the
//! recurring topics, the names mentioned and the user's questions still open, with no model.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use super::store::{self, Archived};
use crate::access::Caller;
use crate::error::ApiResult;
use crate::llm::{ChatMessage, LlmClient};
use crate::state::AppState;

/// Messages the summary is built from, at most (the session's last ones).
const MAX_MESSAGES: i64 = 500;
/// Messages since the last summary a model is shown, at most.
const MAX_MODEL_MESSAGES: usize = 200;
/// Characters of one message a model is shown.
const MAX_MESSAGE_CHARS: usize = 2000;
/// Characters of a stored summary.
const MAX_SUMMARY_CHARS: usize = 4000;
/// Topics, names and open questions [`digest`] lists, at most.
const MAX_TOPICS: usize = 8;
const MAX_NAMES: usize = 10;
const MAX_QUESTIONS: usize = 3;
/// Characters of one quoted question.
const MAX_QUESTION_CHARS: usize = 200;

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

/// Common English words that are neither topics nor names.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren't",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "can't",
    "cannot",
    "could",
    "couldn't",
    "did",
    "didn't",
    "do",
    "does",
    "doesn't",
    "doing",
    "don't",
    "down",
    "during",
    "each",
    "even",
    "ever",
    "every",
    "few",
    "for",
    "from",
    "further",
    "get",
    "gets",
    "getting",
    "give",
    "go",
    "goes",
    "going",
    "good",
    "got",
    "great",
    "had",
    "hadn't",
    "has",
    "hasn't",
    "have",
    "haven't",
    "having",
    "he",
    "hello",
    "her",
    "here",
    "hers",
    "herself",
    "hey",
    "hi",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "i'd",
    "i'll",
    "i'm",
    "i've",
    "if",
    "in",
    "into",
    "is",
    "isn't",
    "it",
    "it's",
    "its",
    "itself",
    "just",
    "know",
    "let",
    "let's",
    "like",
    "make",
    "many",
    "may",
    "maybe",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "need",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "ok",
    "okay",
    "on",
    "once",
    "one",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "please",
    "really",
    "right",
    "same",
    "say",
    "see",
    "shall",
    "she",
    "should",
    "shouldn't",
    "so",
    "some",
    "still",
    "such",
    "sure",
    "take",
    "tell",
    "than",
    "thank",
    "thanks",
    "that",
    "that's",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "there's",
    "these",
    "they",
    "thing",
    "things",
    "think",
    "this",
    "those",
    "though",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "use",
    "very",
    "want",
    "was",
    "wasn't",
    "way",
    "we",
    "we'll",
    "we're",
    "well",
    "were",
    "weren't",
    "what",
    "what's",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "won't",
    "would",
    "wouldn't",
    "yes",
    "yet",
    "you",
    "you'd",
    "you'll",
    "you're",
    "you've",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

fn is_stopword(lower: &str) -> bool {
    STOPWORDS.contains(&lower)
}

/// The letters and digits of a word, without the punctuation around it.
fn core(word: &str) -> &str {
    word.trim_matches(|c: char| !c.is_alphanumeric())
}

/// Lowercase words of at least four characters that carry meaning: candidate topics.
fn content_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .map(|w| {
            w.trim_matches(|c: char| c == '\'' || c == '-')
                .to_lowercase()
        })
        .filter(|w| {
            w.chars().count() >= 4
                && w.chars().any(char::is_alphabetic)
                && !is_stopword(w)
                && !w.ends_with("'s")
        })
}

/// Sentences of a text: ends at `.`, `!` or `?` followed by a space or the end, and at line
/// breaks (so `v2.0.0` and `example.com` stay whole).
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let end = match c {
            '\n' => Some(i),
            '.' | '!' | '?' if next_is_space => Some(i + c.len_utf8()),
            _ => None,
        };
        if let Some(end) = end {
            let sentence = text[start..end].trim();
            if !sentence.is_empty() {
                out.push(sentence);
            }
            start = end;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// A capitalised word that may be (part of) a name: `Berlin`, `PostgreSQL`, `AWS`.
fn is_capitalised(core: &str) -> bool {
    let mut chars = core.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    first.is_uppercase()
        && core.chars().count() >= 2
        && !is_stopword(&core.to_lowercase())
        && core
            .chars()
            .all(|c| c.is_alphanumeric() || c == '-' || c == '\'')
}

/// The names in one text: runs of capitalised words. A run opening a sentence keeps its first
/// word only when that word also appears capitalised inside a sentence somewhere (`known`), so
/// "Thanks" or "Could" at the start of a sentence are not names.
fn names_in(text: &str, known: &HashSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for sentence in sentences(text) {
        let mut run: Vec<&str> = Vec::new();
        let mut run_at_start = false;
        let mut flush = |run: &mut Vec<&str>, at_start: bool| {
            if at_start && !run.first().is_some_and(|w| known.contains(*w)) {
                run.remove(0);
            }
            if !run.is_empty() {
                out.push(run.join(" "));
            }
            run.clear();
        };
        for (index, raw) in sentence.split_whitespace().enumerate() {
            let word = core(raw);
            if is_capitalised(word) {
                if run.is_empty() {
                    run_at_start = index == 0;
                }
                run.push(word);
                // Punctuation after a word ends the run ("Alice, Bob").
                if raw.ends_with(|c: char| !c.is_alphanumeric()) {
                    flush(&mut run, run_at_start);
                }
            } else if !run.is_empty() {
                flush(&mut run, run_at_start);
            }
        }
        if !run.is_empty() {
            flush(&mut run, run_at_start);
        }
    }
    out
}

/// Capitalised words seen inside a sentence (not opening it) anywhere in `lines`.
fn capitalised_inside(lines: &[&Line]) -> HashSet<String> {
    let mut known = HashSet::new();
    for line in lines {
        for sentence in sentences(&line.text) {
            for raw in sentence.split_whitespace().skip(1) {
                let word = core(raw);
                if is_capitalised(word) {
                    known.insert(word.to_owned());
                }
            }
        }
    }
    known
}

/// Items ranked by the number of messages naming them (at least `min_messages`), then by first
/// appearance; the first `max`.
fn ranked(per_message: Vec<Vec<String>>, min_messages: usize, max: usize) -> Vec<String> {
    // item -> (messages naming it, order of first appearance)
    let mut stats: HashMap<String, (usize, usize)> = HashMap::new();
    for items in per_message {
        let mut in_this: HashSet<String> = HashSet::new();
        for item in items {
            if !in_this.insert(item.clone()) {
                continue;
            }
            let first = stats.len();
            stats.entry(item).or_insert((0, first)).0 += 1;
        }
    }
    let mut all: Vec<(String, usize, usize)> = stats
        .into_iter()
        .filter(|(_, (count, _))| *count >= min_messages)
        .map(|(item, (count, first))| (item, count, first))
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
    all.into_iter().take(max).map(|(item, _, _)| item).collect()
}

/// The user's questions no later assistant message took up: a question counts as answered once
/// an assistant message after it shares one of its content words or names (or follows it at all,
/// when the question has none). The last few, oldest first.
fn open_questions(lines: &[&Line], known: &HashSet<String>) -> Vec<String> {
    let mut open = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if line.sender != "user" {
            continue;
        }
        for sentence in sentences(&line.text) {
            if !sentence.ends_with('?') {
                continue;
            }
            let words: HashSet<String> = content_words(sentence)
                .chain(names_in(sentence, known).iter().map(|n| n.to_lowercase()))
                .collect();
            let answered = lines[at + 1..].iter().any(|later| {
                later.sender == "ai"
                    && (words.is_empty()
                        || content_words(&later.text).any(|w| words.contains(&w))
                        || names_in(&later.text, known)
                            .iter()
                            .any(|n| words.contains(&n.to_lowercase())))
            });
            if !answered {
                let mut quoted: String = sentence.chars().take(MAX_QUESTION_CHARS).collect();
                if sentence.chars().count() > MAX_QUESTION_CHARS {
                    quoted.push('…');
                }
                open.push(quoted);
            }
        }
    }
    let skip = open.len().saturating_sub(MAX_QUESTIONS);
    open.split_off(skip)
}

/// The summary without a model: who said how much, the recurring topics (content words in the
/// most messages), the names mentioned (capitalised words and runs of them), and the user's
/// questions still open. Deterministic: the same messages give the same text.
pub fn digest(messages: &[Line]) -> String {
    let lines: Vec<&Line> = messages.iter().filter(|l| l.counts()).collect();
    let from_user = lines.iter().filter(|l| l.sender == "user").count();
    let mut out = format!(
        "{} messages ({from_user} from the user, {} from the assistant).",
        lines.len(),
        lines.len() - from_user
    );
    let known = capitalised_inside(&lines);
    let names = ranked(
        lines.iter().map(|l| names_in(&l.text, &known)).collect(),
        1,
        MAX_NAMES,
    );
    let named: HashSet<String> = names
        .iter()
        .flat_map(|n| n.split(' '))
        .map(str::to_lowercase)
        .collect();
    let per_message: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            content_words(&l.text)
                .filter(|w| !named.contains(w))
                .collect()
        })
        .collect();
    let mut topics = ranked(per_message.clone(), 2, MAX_TOPICS);
    if topics.is_empty() {
        topics = ranked(per_message, 1, MAX_TOPICS / 2);
    }
    if !topics.is_empty() {
        out.push_str(&format!("\nTopics: {}.", topics.join(", ")));
    }
    if !names.is_empty() {
        out.push_str(&format!("\nNames: {}.", names.join(", ")));
    }
    let questions = open_questions(&lines, &known);
    if !questions.is_empty() {
        out.push_str("\nOpen questions:");
        for question in questions {
            out.push_str(&format!("\n- {question}"));
        }
    }
    out
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
            match refresh(&state, &caller, &session_id).await {
                Ok(true) => continue,
                Ok(false) => break,
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
    let every = i64::from(state.config.conversations.chat_summary_every);
    if every == 0 {
        return Ok(false);
    }
    let retention = state
        .config
        .conversations
        .history_retention_days
        .and_then(|d| i32::try_from(d).ok());
    let mut tx = caller.begin().await?;
    let Some(current) = store::summary_state(&mut tx, session_id).await? else {
        tx.end_read_only();
        return Ok(false);
    };
    let since = i64::from(current.message_count) - i64::from(current.covers);
    if since < every {
        tx.end_read_only();
        return Ok(false);
    }
    let lines: Vec<Line> = store::last_messages(&mut tx, retention, session_id, MAX_MESSAGES)
        .await?
        .into_iter()
        .map(|(sender, text)| Line { sender, text })
        .collect();
    tx.end_read_only();
    let summary = match &state.llm {
        Some(llm) => {
            let new = usize::try_from(since)
                .unwrap_or(usize::MAX)
                .min(MAX_MODEL_MESSAGES);
            let start = lines.len().saturating_sub(new);
            let (system, user) = prompt(current.summary.as_deref(), &lines[start..]);
            match complete(llm, system, user).await {
                Ok(text) => text,
                Err(err) => {
                    tracing::warn!(session_id, error = %err, "model summary failed; using the digest");
                    digest(&lines)
                }
            }
        }
        None => digest(&lines),
    };
    let summary: String = summary.chars().take(MAX_SUMMARY_CHARS).collect();
    let mut tx = caller.begin().await?;
    let stored = store::set_summary(&mut tx, session_id, &summary, current.message_count).await?;
    tx.commit().await?;
    Ok(stored)
}

/// One completion; its text, or why there is none.
async fn complete(llm: &LlmClient, system: String, user: String) -> Result<String, String> {
    let reply = llm
        .complete(
            &[
                ChatMessage::text("system", system),
                ChatMessage::text("user", user),
            ],
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    reply
        .content
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .ok_or_else(|| "the model answered without text".to_owned())
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
    fn sentences_keep_versions_and_hosts_whole() {
        assert_eq!(
            sentences("Deployed v2.0.0 to deploy.example.com. Done!\nNext?"),
            ["Deployed v2.0.0 to deploy.example.com.", "Done!", "Next?"]
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

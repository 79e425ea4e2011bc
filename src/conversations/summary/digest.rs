//! The summary without a model: the recurring topics, the names mentioned and the user's
//! questions still open, read from the messages with plain word rules and folded into a bounded
//! [`DigestState`] as they arrive.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::Line;
use super::stopwords::is_stopword;

/// Topics, names and open questions [`digest`] lists, at most.
const MAX_TOPICS: usize = 8;
const MAX_NAMES: usize = 10;
const MAX_QUESTIONS: usize = 3;
/// Characters of one quoted question.
const MAX_QUESTION_CHARS: usize = 200;
/// Words and names [`DigestState`] counts, at most.
const MAX_WORDS: usize = 512;
const MAX_TRACKED_NAMES: usize = 128;
/// Capitalised words [`DigestState`] remembers seeing inside a sentence, at most.
const MAX_KNOWN: usize = 512;
/// Open questions [`DigestState`] keeps, at most.
const MAX_OPEN: usize = 16;
/// Messages after which every count is halved.
const HALF_LIFE: u64 = 250;

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

/// Capitalised words seen inside a sentence (not opening it) in `lines`, each once, in the order
/// first seen.
fn capitalised_inside(lines: &[&Line]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut known = Vec::new();
    for line in lines {
        for sentence in sentences(&line.text) {
            for raw in sentence.split_whitespace().skip(1) {
                let word = core(raw);
                if is_capitalised(word) && seen.insert(word) {
                    known.push(word.to_owned());
                }
            }
        }
    }
    known
}

/// A word or name counted by the messages naming it, with the bounded counter of
/// [`DigestState`]: `(item, count, error, first)`. When the table is full a new item takes the
/// place of the least counted one and starts from its count (`error` says by how much that may
/// overstate it: the Space-Saving algorithm, which keeps every frequent item); `count − error` is
/// what is known for certain and ranks. `first` orders first appearances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Counted(String, u32, u32, u64);

impl Counted {
    fn certain(&self) -> u32 {
        self.1 - self.2
    }
}

/// A user's question no assistant message has taken up yet: its text as quoted and the words
/// (content words and names, lowercase) an answer would share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Question {
    text: String,
    words: Vec<String>,
}

/// What the digest needs from a session's messages, folded in the order they were written and
/// kept in bounded size, so that a refresh reads only the messages since the last one.
///
/// Folding all messages at once or in pieces gives the same state (a word opening a sentence is
/// a name when it was seen capitalised inside a sentence before or in the same piece), within
/// bounds: the tables keep [`MAX_WORDS`] words and [`MAX_TRACKED_NAMES`] names, the last
/// [`MAX_OPEN`] open questions stay. And every [`HALF_LIFE`] messages every count is halved (the ones at 0 forgotten):
/// the summary says what the conversation has been about lately, as one over the last few hundred
/// messages would, without reading them again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DigestState {
    /// User and assistant messages with text folded in.
    messages: u64,
    from_user: u64,
    /// Items ever counted, to order first appearances.
    tick: u64,
    words: Vec<Counted>,
    names: Vec<Counted>,
    /// Capitalised words seen inside a sentence, oldest first (at most [`MAX_KNOWN`]): a run of
    /// capitalised words opening a sentence keeps its first word when it is one of these.
    known: VecDeque<String>,
    /// The user's questions still open, oldest first (at most [`MAX_OPEN`]).
    open: VecDeque<Question>,
}

/// Counts `item` once in `table` (bounded at `max`, see [`Counted`]).
fn count(table: &mut Vec<Counted>, item: String, tick: &mut u64, max: usize) {
    if let Some(counted) = table.iter_mut().find(|c| c.0 == item) {
        counted.1 += 1;
        return;
    }
    *tick += 1;
    if table.len() < max {
        table.push(Counted(item, 1, 0, *tick));
        return;
    }
    // The least counted gives way; of those, the one that appeared first.
    if let Some(least) = table.iter_mut().min_by_key(|c| (c.1, c.3)) {
        let floor = least.1;
        *least = Counted(item, floor + 1, floor, *tick);
    }
}

/// Halves every count (and its error), forgetting the items left at 0.
fn halve(table: &mut Vec<Counted>) {
    for counted in table.iter_mut() {
        counted.1 /= 2;
        counted.2 /= 2;
    }
    table.retain(|c| c.1 > 0);
}

/// The items named in at least `min_messages` messages for certain, most first, then by first
/// appearance; the first `max` of those `keep` lets through.
fn ranked(
    table: &[Counted],
    min_messages: u32,
    max: usize,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut all: Vec<&Counted> = table
        .iter()
        .filter(|c| c.certain() >= min_messages && keep(&c.0))
        .collect();
    all.sort_by(|a, b| b.certain().cmp(&a.certain()).then(a.3.cmp(&b.3)));
    all.into_iter().take(max).map(|c| c.0.clone()).collect()
}

impl DigestState {
    /// Folds `lines` (oldest first) in: counts the words and names of each user and assistant
    /// message with text, notes the user's questions, and closes those an assistant message
    /// takes up (it shares one of the question's content words or names, or follows it at all
    /// when the question has none).
    pub fn fold(&mut self, lines: &[Line]) {
        let lines: Vec<&Line> = lines.iter().filter(|l| l.counts()).collect();
        let mut known: HashSet<String> = self.known.iter().cloned().collect();
        for word in capitalised_inside(&lines) {
            if known.insert(word.clone()) {
                self.known.push_back(word);
                if self.known.len() > MAX_KNOWN
                    && let Some(old) = self.known.pop_front()
                {
                    known.remove(&old);
                }
            }
        }
        for line in lines {
            self.messages += 1;
            let names = names_in(&line.text, &known);
            let words: Vec<String> = content_words(&line.text).collect();
            let mut in_this: HashSet<&str> = HashSet::new();
            for name in &names {
                if in_this.insert(name) {
                    count(
                        &mut self.names,
                        name.clone(),
                        &mut self.tick,
                        MAX_TRACKED_NAMES,
                    );
                }
            }
            in_this.clear();
            for word in &words {
                if in_this.insert(word) {
                    count(&mut self.words, word.clone(), &mut self.tick, MAX_WORDS);
                }
            }
            if line.sender == "user" {
                self.from_user += 1;
                self.note_questions(&line.text, &known);
            } else {
                let said: HashSet<String> = words
                    .into_iter()
                    .chain(names.iter().map(|n| n.to_lowercase()))
                    .collect();
                self.open
                    .retain(|q| !(q.words.is_empty() || q.words.iter().any(|w| said.contains(w))));
            }
            if self.messages.is_multiple_of(HALF_LIFE) {
                halve(&mut self.words);
                halve(&mut self.names);
            }
        }
    }

    fn note_questions(&mut self, text: &str, known: &HashSet<String>) {
        for sentence in sentences(text) {
            if !sentence.ends_with('?') {
                continue;
            }
            let mut words: Vec<String> = content_words(sentence)
                .chain(names_in(sentence, known).iter().map(|n| n.to_lowercase()))
                .collect();
            words.sort();
            words.dedup();
            let mut quoted: String = sentence.chars().take(MAX_QUESTION_CHARS).collect();
            if sentence.chars().count() > MAX_QUESTION_CHARS {
                quoted.push('…');
            }
            self.open.push_back(Question {
                text: quoted,
                words,
            });
            if self.open.len() > MAX_OPEN {
                self.open.pop_front();
            }
        }
    }

    /// The summary: who said how much, the recurring topics (content words in the most
    /// messages, not part of a name listed), the names mentioned (capitalised words and runs of
    /// them), and the user's last questions still open.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} messages ({} from the user, {} from the assistant).",
            self.messages,
            self.from_user,
            self.messages - self.from_user
        );
        let names = ranked(&self.names, 1, MAX_NAMES, |_| true);
        let named: HashSet<String> = names
            .iter()
            .flat_map(|n| n.split(' '))
            .map(str::to_lowercase)
            .collect();
        let mut topics = ranked(&self.words, 2, MAX_TOPICS, |w| !named.contains(w));
        if topics.is_empty() {
            topics = ranked(&self.words, 1, MAX_TOPICS / 2, |w| !named.contains(w));
        }
        if !topics.is_empty() {
            out.push_str(&format!("\nTopics: {}.", topics.join(", ")));
        }
        if !names.is_empty() {
            out.push_str(&format!("\nNames: {}.", names.join(", ")));
        }
        if !self.open.is_empty() {
            out.push_str("\nOpen questions:");
            for question in self
                .open
                .iter()
                .skip(self.open.len().saturating_sub(MAX_QUESTIONS))
            {
                out.push_str(&format!("\n- {}", question.text));
            }
        }
        out
    }
}

/// The summary without a model of `messages` alone (oldest first): [`DigestState::fold`] then
/// [`DigestState::render`]. Deterministic: the same messages give the same text.
pub fn digest(messages: &[Line]) -> String {
    let mut state = DigestState::default();
    state.fold(messages);
    state.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<Line> {
        [
            (
                "user",
                "We move the cluster to Frankfurt with Marta next week.",
            ),
            ("ai", "Then Marta needs the backup of the cluster first."),
            (
                "user",
                "Marta can run the backup tonight. Is the Frankfurt replica ready?",
            ),
            ("ai", "The replica in Frankfurt is ready."),
            ("tool", "{\"lag\": 2}"),
            (
                "user",
                "Who pays the egress bill? And can we keep the old backup?",
            ),
            ("ai", "The backup stays for 30 days."),
            ("user", "Does the cluster need a new certificate?"),
        ]
        .iter()
        .map(|(sender, text)| Line::new(sender, text))
        .collect()
    }

    #[test]
    fn folding_in_pieces_equals_folding_at_once() {
        let lines = conversation();
        let mut at_once = DigestState::default();
        at_once.fold(&lines);
        assert!(
            at_once.render().contains("Names: Frankfurt, Marta."),
            "{}",
            at_once.render()
        );
        for split in 0..=lines.len() {
            let mut pieces = DigestState::default();
            pieces.fold(&lines[..split]);
            // Stored and read back between the pieces, as a refresh does.
            let json = serde_json::to_string(&pieces).unwrap();
            let mut pieces: DigestState = serde_json::from_str(&json).unwrap();
            pieces.fold(&lines[split..]);
            assert_eq!(pieces, at_once, "split at {split}");
        }
        assert_eq!(
            at_once
                .render()
                .lines()
                .skip_while(|l| *l != "Open questions:")
                .collect::<Vec<_>>(),
            [
                "Open questions:",
                "- Who pays the egress bill?",
                "- Does the cluster need a new certificate?"
            ]
        );
    }

    #[test]
    fn the_state_stays_bounded_and_keeps_what_recurs() {
        let mut state = DigestState::default();
        // 6,000 messages: every third about the migration, the rest each with new words, new
        // names and a new question.
        let lines: Vec<Line> = (0..6000)
            .map(|i| {
                if i % 3 == 0 {
                    Line::new("ai", "The migration goes on.")
                } else {
                    Line::new(
                        "user",
                        &format!("Ask Person{i} about gadget{i} and widget{i}. Why word{i}?"),
                    )
                }
            })
            .collect();
        for piece in lines.chunks(20) {
            state.fold(piece);
        }
        assert!(state.words.len() <= MAX_WORDS);
        assert!(state.names.len() <= MAX_TRACKED_NAMES);
        assert!(state.known.len() <= MAX_KNOWN);
        assert!(state.open.len() <= MAX_OPEN);
        let json = serde_json::to_string(&state).unwrap();
        assert!(json.len() < 48 * 1024, "{} bytes", json.len());
        let text = state.render();
        assert!(
            text.starts_with("6000 messages (4000 from the user, 2000 from the assistant)."),
            "{text}"
        );
        assert!(text.contains("\nTopics: migration."), "{text}");
        assert!(text.ends_with("- Why word5999?"), "{text}");
    }

    /// Every count halves every 250 messages: a topic left behind ranks below the current one
    /// at once and is gone once its count has halved to nothing.
    #[test]
    fn older_topics_give_way_to_newer_ones() {
        let mut state = DigestState::default();
        let old = Line::new("user", "The postgres upgrade again.");
        let new = Line::new("user", "The kafka rebalance again.");
        for _ in 0..1000 {
            state.fold(std::slice::from_ref(&old));
        }
        for _ in 0..300 {
            state.fold(std::slice::from_ref(&new));
        }
        let text = state.render();
        assert!(
            text.contains("\nTopics: kafka, rebalance, postgres, upgrade."),
            "{text}"
        );
        for _ in 0..2000 {
            state.fold(std::slice::from_ref(&new));
        }
        let text = state.render();
        assert!(text.contains("\nTopics: kafka, rebalance."), "{text}");
    }

    #[test]
    fn sentences_keep_versions_and_hosts_whole() {
        assert_eq!(
            sentences("Deployed v2.0.0 to deploy.example.com. Done!\nNext?"),
            ["Deployed v2.0.0 to deploy.example.com.", "Done!", "Next?"]
        );
    }
}

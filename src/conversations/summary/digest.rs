//! The summary without a model: the recurring topics, the names mentioned and the user's
//! questions still open, read from the messages with plain word rules.

use std::collections::{HashMap, HashSet};

use super::Line;
use super::stopwords::is_stopword;

/// Topics, names and open questions [`digest`] lists, at most.
const MAX_TOPICS: usize = 8;
const MAX_NAMES: usize = 10;
const MAX_QUESTIONS: usize = 3;
/// Characters of one quoted question.
const MAX_QUESTION_CHARS: usize = 200;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_keep_versions_and_hosts_whole() {
        assert_eq!(
            sentences("Deployed v2.0.0 to deploy.example.com. Done!\nNext?"),
            ["Deployed v2.0.0 to deploy.example.com.", "Done!", "Next?"]
        );
    }
}

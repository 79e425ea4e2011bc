//! "Where was I?": an exact digest of a task built from its plan items and update messages, with no
//! model. Pure logic; the store loads the inputs.
//!
//! Items keep their explicit status. A still-pending item counts as completed when an update says
//! it is done ("done", "completed", "finished", ✓) and names it, either by ordinal ("Step 3 done",
//! "steps 1-3 finished") or, when the update names no ordinal, by at least half of the words of its
//! title (a word-overlap heuristic). Such items are flagged `inferred`, and the answer says so.

use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::digest_state::DigestState;
use super::model::ItemStatus;

/// A plan item as the digest sees it.
#[derive(Debug, Clone)]
pub struct Item {
    pub ordinal: i32,
    pub title: String,
    pub stage: Option<i32>,
    pub status: ItemStatus,
}

/// An update message as the digest sees it.
#[derive(Debug, Clone)]
pub struct Message {
    pub seq: i32,
    pub role: String,
    pub msg_type: String,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// What the digest is about.
#[derive(Debug, Clone)]
pub struct TaskFacts {
    pub name: String,
    pub status: String,
    pub phase: String,
    pub plan_version: i32,
}

/// A plan item in the digest.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct DigestItem {
    pub ordinal: i32,
    pub title: String,
    pub stage: Option<i32>,
    pub status: ItemStatus,
    /// True when the status comes from an update message, not from an explicit item change.
    pub inferred: bool,
    /// The message the inference rests on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferred_from_message: Option<i32>,
}

/// A detail worth remembering, pulled from the updates.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct KeyDetail {
    /// `version`, `url`, `host`, `reference` (host/path such as an image), `path`, `id` or `port`.
    pub kind: String,
    pub value: String,
    /// The message it was first seen in.
    pub message_seq: i32,
}

/// One of the last updates, verbatim.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct RecentUpdate {
    pub seq: i32,
    pub role: String,
    pub msg_type: String,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// The exact state of a task: where it stands and what to do next.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct Digest {
    pub task: String,
    pub status: String,
    pub phase: String,
    /// Active plan version (0: no plan).
    pub plan_version: i32,
    pub total_items: usize,
    pub completed: Vec<DigestItem>,
    /// The item in progress (explicitly `active`), if any.
    pub current: Option<DigestItem>,
    /// The first pending item after the current one (or the first pending one).
    pub next: Option<DigestItem>,
    /// Every item still pending, in order.
    pub remaining: Vec<DigestItem>,
    pub failed: Vec<DigestItem>,
    pub skipped: Vec<DigestItem>,
    /// Ordinals whose completion was inferred from the updates.
    pub inferred: Vec<i32>,
    pub key_details: Vec<KeyDetail>,
    /// Key details left out (only the latest are kept).
    pub key_details_omitted: usize,
    pub recent_updates: Vec<RecentUpdate>,
    pub message_count: usize,
}

/// Most key details a digest lists; older ones are counted in `key_details_omitted`.
pub const MAX_KEY_DETAILS: usize = 40;

/// Builds the digest. `messages` must be in sequence order; `recent` is how many to quote.
pub fn build(facts: &TaskFacts, items: &[Item], messages: &[Message], recent: usize) -> Digest {
    let mut state = DigestState::default();
    state.fold(&item_titles(items), messages);
    let recent = &messages[messages.len().saturating_sub(recent)..];
    build_from(facts, items, &state, recent, messages.len())
}

/// The titles of `items`, as [`DigestState::fold`] takes them.
pub fn item_titles(items: &[Item]) -> Vec<String> {
    items.iter().map(|i| i.title.clone()).collect()
}

/// Builds the digest from the folded state of the task's messages, `recent` (the latest
/// messages, in order, all of them quoted) and the count of all messages.
pub fn build_from(
    facts: &TaskFacts,
    items: &[Item],
    state: &DigestState,
    recent: &[Message],
    message_count: usize,
) -> Digest {
    let inferred = state.inferred(items);
    let as_digest = |item: &Item| {
        let from = inferred.get(&item.ordinal).copied();
        DigestItem {
            ordinal: item.ordinal,
            title: item.title.clone(),
            stage: item.stage,
            status: if from.is_some() {
                ItemStatus::Completed
            } else {
                item.status
            },
            inferred: from.is_some(),
            inferred_from_message: from,
        }
    };
    let all: Vec<DigestItem> = items.iter().map(as_digest).collect();
    let with = |status: ItemStatus| -> Vec<DigestItem> {
        all.iter().filter(|i| i.status == status).cloned().collect()
    };
    let current = all.iter().find(|i| i.status == ItemStatus::Active).cloned();
    let remaining = with(ItemStatus::Pending);
    let next = current
        .as_ref()
        .and_then(|c| remaining.iter().find(|i| i.ordinal > c.ordinal))
        .or_else(|| remaining.first())
        .cloned();
    let (key_details, key_details_omitted) = state.key_details();
    let recent_updates = recent
        .iter()
        .map(|m| RecentUpdate {
            seq: m.seq,
            role: m.role.clone(),
            msg_type: m.msg_type.clone(),
            content: m.content.clone(),
            created_at: m.created_at,
        })
        .collect();
    Digest {
        task: facts.name.clone(),
        status: facts.status.clone(),
        phase: facts.phase.clone(),
        plan_version: facts.plan_version,
        total_items: items.len(),
        completed: with(ItemStatus::Completed),
        current,
        next,
        remaining,
        failed: with(ItemStatus::Failed),
        skipped: with(ItemStatus::Skipped),
        inferred: inferred.keys().copied().collect(),
        key_details,
        key_details_omitted,
        recent_updates,
        message_count,
    }
}

/// The digest as a few plain sentences, ending with the last update.
pub fn answer(digest: &Digest) -> String {
    describe(digest, true)
}

/// The running summary made without a model: the answer without the last update quoted.
pub fn summary(digest: &Digest) -> String {
    describe(digest, false)
}

fn describe(digest: &Digest, quote_last: bool) -> String {
    let mut out = format!(
        "Task \"{}\" is {} ({}).",
        digest.task, digest.status, digest.phase
    );
    if digest.total_items == 0 {
        out.push_str(" No plan has been recorded.");
    } else {
        out.push_str(&format!(
            " Plan v{} has {} steps.",
            digest.plan_version, digest.total_items
        ));
        if digest.completed.is_empty() {
            out.push_str(" No step is completed yet.");
        } else {
            out.push_str(&format!(
                " Completed {}: {}.",
                steps_label(&digest.completed),
                titles(&digest.completed)
            ));
        }
        if !digest.inferred.is_empty() {
            let ordinals: Vec<String> = digest.inferred.iter().map(i32::to_string).collect();
            out.push_str(&format!(
                " (Step{} {} inferred from update messages, not marked explicitly.)",
                if ordinals.len() == 1 { "" } else { "s" },
                ordinals.join(", ")
            ));
        }
        if let Some(current) = &digest.current {
            out.push_str(&format!(
                " In progress: step {} — {}.",
                current.ordinal, current.title
            ));
        }
        match &digest.next {
            Some(next) => out.push_str(&format!(" Next: step {} — {}.", next.ordinal, next.title)),
            None if digest.current.is_none() => out.push_str(" No step is left pending."),
            None => {}
        }
        if !digest.failed.is_empty() {
            out.push_str(&format!(
                " Failed {}: {}.",
                steps_label(&digest.failed),
                titles(&digest.failed)
            ));
        }
        if !digest.skipped.is_empty() {
            out.push_str(&format!(
                " Skipped {}: {}.",
                steps_label(&digest.skipped),
                titles(&digest.skipped)
            ));
        }
    }
    if !digest.key_details.is_empty() {
        let values: Vec<&str> = digest
            .key_details
            .iter()
            .map(|d| d.value.as_str())
            .collect();
        out.push_str(&format!(" Key details: {}.", values.join(", ")));
    }
    if let Some(last) = digest.recent_updates.last().filter(|_| quote_last) {
        out.push_str(&format!(
            " Last update (#{}): \"{}\"",
            last.seq,
            last.content.trim()
        ));
    }
    out
}

/// "step 2" or "steps 1-3, 5".
fn steps_label(items: &[DigestItem]) -> String {
    let ordinals: Vec<i32> = items.iter().map(|i| i.ordinal).collect();
    let word = if ordinals.len() == 1 { "step" } else { "steps" };
    format!("{word} {}", ranges(&ordinals))
}

/// Compresses sorted ordinals into ranges: `[1, 2, 3, 5]` → `1-3, 5`.
pub fn ranges(ordinals: &[i32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ordinals.len() {
        let start = ordinals[i];
        let mut end = start;
        while i + 1 < ordinals.len() && ordinals[i + 1] == end + 1 {
            i += 1;
            end = ordinals[i];
        }
        parts.push(if end > start + 1 {
            format!("{start}-{end}")
        } else if end == start + 1 {
            format!("{start}, {end}")
        } else {
            start.to_string()
        });
        i += 1;
    }
    parts.join(", ")
}

fn titles(items: &[DigestItem]) -> String {
    items
        .iter()
        .map(|i| format!("{}. {}", i.ordinal, i.title))
        .collect::<Vec<_>>()
        .join("; ")
}

static STEP_REF: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)\bsteps?\s*#?\s*(\d+(?:\s*(?:,|&|and|-|–|to|through|thru)\s*#?\d+)*)")
});
static NUMBER_OR_RANGE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(\d+)(?:\s*(?:-|–|to|through|thru)\s*#?(\d+))?"));

/// Compiles a literal pattern; every one is compiled by the unit tests, so this cannot fail at run time.
#[expect(
    clippy::expect_used,
    reason = "literal patterns, each compiled by the unit tests"
)]
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("literal regex compiles")
}

const SIGNALS: [&str; 5] = ["done", "completed", "complete", "finished", "finish"];
const NEGATIONS: [&str; 7] = [
    "not done",
    "not yet",
    "not finished",
    "not completed",
    "not complete",
    "isn't done",
    "never finished",
];
const STOPWORDS: [&str; 12] = [
    "the", "a", "an", "to", "and", "or", "of", "for", "in", "on", "with", "into",
];

pub(crate) fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(stem)
        .collect()
}

/// A light stem so "pushed" meets "push" and "containers" meets "container".
fn stem(word: &str) -> String {
    for suffix in ["ing", "ed", "s"] {
        if let Some(root) = word.strip_suffix(suffix)
            && root.chars().count() >= 3
        {
            return root.to_owned();
        }
    }
    word.to_owned()
}

/// The words of a plan item's title that a done-claim must name (at least half of them).
pub(crate) fn title_words(title: &str) -> HashSet<String> {
    words(title)
        .into_iter()
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

pub(crate) fn says_done(content: &str) -> bool {
    let lower = content.to_lowercase();
    if NEGATIONS.iter().any(|n| lower.contains(n)) {
        return false;
    }
    lower.contains('✓')
        || lower.contains('✅')
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| SIGNALS.contains(&w))
}

/// Ordinals named in `content` ("step 3", "steps 1-3", "steps 2 and 4").
pub fn named_ordinals(content: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for found in STEP_REF.captures_iter(content) {
        let Some(list) = found.get(1) else { continue };
        for part in NUMBER_OR_RANGE.captures_iter(list.as_str()) {
            let start = part.get(1).and_then(|m| m.as_str().parse::<i32>().ok());
            let end = part.get(2).and_then(|m| m.as_str().parse::<i32>().ok());
            match (start, end) {
                (Some(a), Some(b)) if b >= a && b - a < 1000 => out.extend(a..=b),
                (Some(a), _) => out.push(a),
                _ => {}
            }
        }
    }
    out
}

/// Pending items an update reports as done, each with the first message that did.
pub fn infer(items: &[Item], messages: &[Message]) -> BTreeMap<i32, i32> {
    let mut state = DigestState::default();
    state.fold(&item_titles(items), messages);
    state.inferred(items)
}

static URL: LazyLock<Regex> = LazyLock::new(|| re(r#"(?i)\b(?:https?|ssh|git|ftp)://[^\s<>"'`]+"#));
static PORT: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\bport\s*#?\s*(\d{2,5})\b"));
static LABELLED_ID: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:id|pid|pr|issue|build|job|run|ticket|container|commit)\s*[:=#]\s*([A-Za-z0-9][\w.-]*)",
    )
});
static VERSION: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^(?:v\d+(?:\.\d+){1,3}|\d+\.\d+\.\d+)(?:[-+][0-9a-z.]+)?$"));
static IPV4: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{1,3}(?:\.\d{1,3}){3}$"));
static DOMAIN: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+([a-z]{2,})$"));
static UUID: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"));
static HEX_ID: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)^(?:sha256:)?[0-9a-f]{7,64}$"));
static FILE_NAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)^[\w.-]+\.(?:rs|py|js|ts|tsx|jsx|json|ya?ml|toml|md|txt|sh|bash|conf|cfg|ini|env|log|sql|html|css|go|java|rb|php|lock|xml|csv|tar|gz|tgz|zip|pem|key|crt|service|proto|c|h|cpp|hpp)$",
    )
});

const TLDS: [&str; 46] = [
    "com", "org", "net", "io", "dev", "app", "ai", "co", "cloud", "me", "info", "biz", "us", "uk",
    "de", "fr", "eu", "nl", "ch", "se", "no", "fi", "jp", "cn", "ru", "in", "br", "ca", "au",
    "tech", "site", "online", "xyz", "gg", "tv", "ly", "so", "local", "internal", "lan", "corp",
    "home", "test", "example", "edu", "gov",
];

fn is_host(text: &str) -> bool {
    let lower = text.to_lowercase();
    if lower == "localhost" || IPV4.is_match(&lower) {
        return true;
    }
    DOMAIN
        .captures(&lower)
        .and_then(|c| c.get(1))
        .is_some_and(|tld| TLDS.contains(&tld.as_str()))
}

fn trim_token(token: &str) -> &str {
    token
        .trim_start_matches(|c: char| "\"'`([{<".contains(c))
        .trim_end_matches(|c: char| "\"'`)]}>,;!?.:".contains(c))
}

/// Key details of the updates, first appearance first, at most `max` (the latest kept); returns
/// them and how many were left out.
pub fn key_details(messages: &[Message], max: usize) -> (Vec<KeyDetail>, usize) {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for message in messages {
        each_detail(&message.content, |kind, value| {
            if seen.insert((kind.to_owned(), value.to_lowercase())) {
                out.push(KeyDetail {
                    kind: kind.to_owned(),
                    value: value.to_owned(),
                    message_seq: message.seq,
                });
            }
        });
    }
    let omitted = out.len().saturating_sub(max);
    (out.split_off(omitted), omitted)
}

/// Calls `push(kind, value)` for each key detail of `content`, in order (repeats included).
pub(crate) fn each_detail(content: &str, mut push: impl FnMut(&str, &str)) {
    let mut rest = content.to_owned();
    for url in URL.find_iter(content) {
        push("url", trim_token(url.as_str()));
        rest = rest.replace(url.as_str(), " ");
    }
    for port in PORT.captures_iter(&rest) {
        if let Some(p) = port.get(1) {
            push("port", p.as_str());
        }
    }
    for id in LABELLED_ID.captures_iter(&rest) {
        if let Some(v) = id.get(1) {
            push("id", trim_token(v.as_str()));
        }
    }
    for raw in rest.split_whitespace() {
        classify(trim_token(raw), &mut push);
    }
}

fn classify(token: &str, push: &mut impl FnMut(&str, &str)) {
    if token.len() < 2 {
        return;
    }
    if let Some((first, _)) = token.split_once('/') {
        let host = first.split(':').next().unwrap_or(first);
        if !first.is_empty() && is_host(host) {
            push("reference", token);
            push("host", host);
            if let Some((_, tag)) = token.rsplit_once(':')
                && VERSION.is_match(tag)
            {
                push("version", tag);
            }
            return;
        }
        let has_letters = token.chars().any(char::is_alphabetic);
        let rooted = ["/", "~/", "./", "../"]
            .iter()
            .any(|p| token.starts_with(p));
        let last = token.rsplit('/').next().unwrap_or("");
        if has_letters && token.len() > 1 && (rooted || FILE_NAME.is_match(last)) {
            push("path", token);
        }
        return;
    }
    if FILE_NAME.is_match(token) && !is_host(token) {
        push("path", token);
        return;
    }
    if let Some((host, port)) = token.rsplit_once(':')
        && is_host(host)
        && port.len() >= 2
        && port.chars().all(|c| c.is_ascii_digit())
    {
        push("host", host);
        push("port", port);
        return;
    }
    for part in token.split([':', '@', '=']) {
        let part = trim_token(part);
        if part.is_empty() {
            continue;
        }
        if VERSION.is_match(part) {
            push("version", part);
        } else if UUID.is_match(part) {
            push("id", part);
        } else if is_host(part) {
            push("host", part);
        } else if HEX_ID.is_match(part)
            && part.chars().any(|c| c.is_ascii_digit())
            && part.chars().any(|c| c.is_ascii_alphabetic())
        {
            push("id", part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(titles: &[&str]) -> Vec<Item> {
        titles
            .iter()
            .enumerate()
            .map(|(i, t)| Item {
                ordinal: i as i32 + 1,
                title: (*t).into(),
                stage: None,
                status: ItemStatus::Pending,
            })
            .collect()
    }

    fn messages(texts: &[&str]) -> Vec<Message> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| Message {
                seq: i as i32 + 1,
                role: "agent".into(),
                msg_type: "progress".into(),
                content: (*t).into(),
                created_at: DateTime::<Utc>::UNIX_EPOCH,
            })
            .collect()
    }

    fn facts() -> TaskFacts {
        TaskFacts {
            name: "Deploy coursefolio".into(),
            status: "active".into(),
            phase: "PLANNING_COMPLETED".into(),
            plan_version: 1,
        }
    }

    const PLAN: [&str; 4] = [
        "Build Docker image",
        "Push image to registry",
        "SSH into server",
        "Pull image and run container",
    ];

    #[test]
    fn the_deploy_story_after_context_compaction() {
        let msgs = messages(&[
            "Step 1 done — image built as v1.2.3",
            "Step 2 done — pushed to ghcr.io",
            "Step 3 done — SSH connected to server",
        ]);
        let d = build(&facts(), &items(&PLAN), &msgs, 5);
        let done: Vec<i32> = d.completed.iter().map(|i| i.ordinal).collect();
        assert_eq!(done, vec![1, 2, 3]);
        assert_eq!(d.inferred, vec![1, 2, 3]);
        assert_eq!(d.next.as_ref().map(|n| n.ordinal), Some(4));
        assert!(d.current.is_none());
        let values: Vec<&str> = d.key_details.iter().map(|k| k.value.as_str()).collect();
        assert!(values.contains(&"v1.2.3"), "{values:?}");
        assert!(values.contains(&"ghcr.io"), "{values:?}");
        let text = answer(&d);
        assert!(text.contains("Completed steps 1-3"), "{text}");
        assert!(
            text.contains("Next: step 4 — Pull image and run container"),
            "{text}"
        );
        assert!(text.contains("inferred"), "{text}");
    }

    #[test]
    fn explicit_status_wins_and_current_comes_first() {
        let mut its = items(&PLAN);
        its[0].status = ItemStatus::Completed;
        its[1].status = ItemStatus::Active;
        its[2].status = ItemStatus::Skipped;
        let msgs = messages(&["Step 2 done", "Step 1 finished"]);
        let d = build(&facts(), &its, &msgs, 5);
        assert!(d.inferred.is_empty(), "step 2 is explicitly active");
        assert_eq!(d.current.as_ref().map(|c| c.ordinal), Some(2));
        assert_eq!(d.next.as_ref().map(|c| c.ordinal), Some(4));
        assert_eq!(d.skipped.len(), 1);
        assert!(!d.completed[0].inferred);
    }

    #[test]
    fn title_words_infer_without_an_ordinal() {
        let msgs = messages(&[
            "Finished pushing the image to the registry",
            "working on the server now",
            "SSH into server not done yet",
        ]);
        let d = build(&facts(), &items(&PLAN), &msgs, 5);
        assert_eq!(d.inferred, vec![2]);
        assert_eq!(d.completed[0].inferred_from_message, Some(1));
        assert_eq!(d.next.as_ref().map(|n| n.ordinal), Some(1));
    }

    #[test]
    fn an_ordinal_stops_title_matching() {
        // Names step 1 by ordinal; the words "image" and "registry" must not complete step 2.
        let msgs = messages(&["Step 1 done, image ready for the registry push"]);
        let d = build(&facts(), &items(&PLAN), &msgs, 5);
        assert_eq!(d.inferred, vec![1]);
    }

    #[test]
    fn ordinal_lists_and_ranges() {
        assert_eq!(named_ordinals("steps 1-3 done"), vec![1, 2, 3]);
        assert_eq!(named_ordinals("Steps 2 and 4 completed"), vec![2, 4]);
        assert_eq!(named_ordinals("step #7 finished, step 9 too"), vec![7, 9]);
        assert_eq!(named_ordinals("Step 1 done — 3 files"), vec![1]);
        assert!(named_ordinals("no steps here").is_empty());
    }

    #[test]
    fn no_signal_no_inference() {
        let msgs = messages(&["Step 1: building the image", "undone step 2"]);
        assert!(infer(&items(&PLAN), &msgs).is_empty());
    }

    #[test]
    fn key_details_kinds() {
        let msgs = messages(&[
            "pushed ghcr.io/alex/coursefolio:v1.2.3 and deploy@example.com",
            "see https://ci.example.com/runs/42. Config in /etc/nginx/nginx.conf and ./deploy.sh",
            "listening on port 8080, db at 10.0.0.5:5432, job id=run-77, commit 3f2a9c1d",
            "id 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b; release 2.0.1; edited src/main.rs",
        ]);
        let (details, omitted) = key_details(&msgs, 100);
        assert_eq!(omitted, 0);
        let has =
            |kind: &str, value: &str| details.iter().any(|d| d.kind == kind && d.value == value);
        assert!(
            has("reference", "ghcr.io/alex/coursefolio:v1.2.3"),
            "{details:?}"
        );
        assert!(has("host", "ghcr.io"), "{details:?}");
        assert!(has("version", "v1.2.3"), "{details:?}");
        assert!(has("host", "example.com"), "{details:?}");
        assert!(has("url", "https://ci.example.com/runs/42"), "{details:?}");
        assert!(has("path", "/etc/nginx/nginx.conf"), "{details:?}");
        assert!(has("path", "./deploy.sh"), "{details:?}");
        assert!(has("port", "8080"), "{details:?}");
        assert!(has("host", "10.0.0.5"), "{details:?}");
        assert!(has("port", "5432"), "{details:?}");
        assert!(has("id", "run-77"), "{details:?}");
        assert!(has("id", "3f2a9c1d"), "{details:?}");
        assert!(
            has("id", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"),
            "{details:?}"
        );
        assert!(has("version", "2.0.1"), "{details:?}");
        assert!(has("path", "src/main.rs"), "{details:?}");
        assert!(!details.iter().any(|d| d.value == "and"), "{details:?}");
        let (kept, omitted) = key_details(&msgs, 3);
        assert_eq!(kept.len(), 3);
        assert_eq!(omitted, details.len() - 3);
        assert_eq!(kept.last(), details.last());
    }

    #[test]
    fn ranges_compress() {
        assert_eq!(ranges(&[1, 2, 3, 5]), "1-3, 5");
        assert_eq!(ranges(&[1, 2]), "1, 2");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn regexes_compile() {
        for pattern in [
            &STEP_REF,
            &NUMBER_OR_RANGE,
            &URL,
            &PORT,
            &LABELLED_ID,
            &VERSION,
            &IPV4,
            &DOMAIN,
            &UUID,
            &HEX_ID,
            &FILE_NAME,
        ] {
            assert!(!pattern.as_str().is_empty());
        }
    }

    #[test]
    fn empty_plan_answer() {
        let d = build(&facts(), &[], &messages(&["hello"]), 5);
        let text = answer(&d);
        assert!(text.contains("No plan has been recorded"), "{text}");
        assert!(text.contains("Last update (#1): \"hello\""), "{text}");
    }
}

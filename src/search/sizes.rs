//! What searches of long histories counted, remembered for a minute: the sizes of the histories
//! and the counts of the terms searched for.
//!
//! A keyword search needs the number of texts it searches: under [`KEYWORD_SAMPLE`] it ranks
//! every match exactly, at or above it that number is the corpus size its term weights use.
//! Counting costs in proportion to the history (20 ms for 125,000 memory chunks), and a search
//! counted on every call. A size at or above the sample is therefore kept for [`KEPT`] in this
//! process, per caller and kind of text: a term weight computed with a size a minute old differs
//! only by the texts written since, and a history that shrank under the sample meanwhile is still
//! ranked exactly once a search counts a term in the sample (which then holds every text, and
//! says so); a search whose every term is counted from its matches against a kept [`SampleEdge`]
//! ranks it as a long history until the minute is out. A smaller size is counted on every search:
//! that is cheap, and the exact ranking wants it exact.
//!
//! Over such a history a search also counts each of its terms in the newest texts, and a term
//! rare there in all of them (up to a cap): 2 to 40 ms a search, most of it for a word common in
//! older texts but not in the newest, whose every match the index reads to count them. Those
//! counts ([`TermCounts`]) are kept the same way, per caller, kind and term: they set the term's
//! weight and whether its matches are all read, and a minute's writes barely move them. The
//! matches themselves are always read fresh, so a text written a moment ago is found.
//!
//! A term is counted from its own matches when they are few (see
//! [`count_terms`](super::query::count_terms)): those at or past the oldest text of the sample
//! (its [`SampleEdge`]) are its matches in the sample. That edge is kept the same way, per caller
//! and kind: reading it walks the sample's index entries, and the newest of them are the ones
//! least likely to be marked all-visible, so it visits a row for each (4 ms for 5,000 memory
//! chunks). Texts written since it was read lie past it too, so a term's matches in the sample
//! may include up to a minute's newer texts besides the newest [`KEYWORD_SAMPLE`]: the same
//! minute's drift its kept counts already have.
//!
//! [`KEYWORD_SAMPLE`]: super::query::KEYWORD_SAMPLE

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a size or a term's counts are used before they are counted again.
pub const KEPT: Duration = Duration::from_secs(60);

/// Sizes kept at most; past that, the expired ones are dropped, and all of them if none is.
const MOST_SIZES: usize = 10_000;
/// Term counts kept at most, likewise.
const MOST_TERMS: usize = 100_000;

/// A term of a search counted in a long history: `in_sample` of the `sample` newest texts hold
/// it; `capped`, for a term rare among them, its matches in all the texts, up to a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct TermCounts {
    pub in_sample: i64,
    pub sample: i64,
    pub capped: Option<i64>,
}

/// The oldest of a caller's newest [`KEYWORD_SAMPLE`](super::query::KEYWORD_SAMPLE) texts of a
/// kind, by the key that orders them: a memory chunk's memory id (`id`) and byte offset (`n`),
/// a message's sequence number (`n`; no `id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct SampleEdge {
    pub id: Option<uuid::Uuid>,
    pub n: i64,
}

/// Values kept for [`KEPT`] by key, at most `most` of them.
#[derive(Debug)]
struct Kept<V> {
    values: Mutex<HashMap<String, (V, Instant)>>,
    most: usize,
}

impl<V: Copy> Kept<V> {
    fn new(most: usize) -> Self {
        Kept {
            values: Mutex::new(HashMap::new()),
            most,
        }
    }

    fn get_at(&self, key: &str, now: Instant) -> Option<V> {
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let &(value, at) = values.get(key)?;
        (now.saturating_duration_since(at) < KEPT).then_some(value)
    }

    fn put_at(&self, key: String, value: V, now: Instant) {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if values.len() >= self.most {
            values.retain(|_, &mut (_, at)| now.saturating_duration_since(at) < KEPT);
            if values.len() >= self.most {
                values.clear();
            }
        }
        values.insert(key, (value, now));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.values.lock().unwrap().len()
    }
}

/// The kept sizes and term counts, by caller (tenant and user), kind of text and term.
#[derive(Debug)]
pub struct HistoryStats {
    sizes: Kept<i64>,
    terms: Kept<TermCounts>,
    /// The callers and kinds with term counts kept: for the others a search counts all its
    /// terms at once, without first listing them to see which are kept.
    counted: Kept<()>,
    /// The share of a caller's newest texts of a kind holding a name (see
    /// [`crate::search::names`]).
    names: Kept<f64>,
    /// The oldest text of a caller's sample of a kind.
    edges: Kept<SampleEdge>,
}

impl Default for HistoryStats {
    fn default() -> Self {
        HistoryStats {
            sizes: Kept::new(MOST_SIZES),
            terms: Kept::new(MOST_TERMS),
            counted: Kept::new(MOST_SIZES),
            names: Kept::new(MOST_TERMS),
            edges: Kept::new(MOST_SIZES),
        }
    }
}

impl HistoryStats {
    /// The size kept for `caller`'s texts of `kind`, unless older than [`KEPT`].
    pub fn size(&self, caller: &str, kind: &str) -> Option<i64> {
        self.size_at(caller, kind, Instant::now())
    }

    /// Keeps `size` as `caller`'s number of texts of `kind`.
    pub fn keep_size(&self, caller: &str, kind: &str, size: i64) {
        self.keep_size_at(caller, kind, size, Instant::now());
    }

    /// The counts kept for `term` in `caller`'s texts of `kind`, unless older than [`KEPT`].
    pub fn term(&self, caller: &str, kind: &str, term: &str) -> Option<TermCounts> {
        self.term_at(caller, kind, term, Instant::now())
    }

    /// Keeps `counts` as those of `term` in `caller`'s texts of `kind`.
    pub fn keep_term(&self, caller: &str, kind: &str, term: &str, counts: TermCounts) {
        self.keep_term_at(caller, kind, term, counts, Instant::now());
    }

    /// Whether counts of any term in `caller`'s texts of `kind` were kept in the last [`KEPT`].
    pub fn any_term(&self, caller: &str, kind: &str) -> bool {
        self.any_term_at(caller, kind, Instant::now())
    }

    /// The share of `caller`'s newest texts of `kind` holding the name `word`, kept unless
    /// older than [`KEPT`].
    pub fn name_share(&self, caller: &str, kind: &str, word: &str) -> Option<f64> {
        self.names
            .get_at(&term_key(caller, kind, word), Instant::now())
    }

    /// Keeps `share` as that of `caller`'s newest texts of `kind` holding the name `word`.
    pub fn keep_name_share(&self, caller: &str, kind: &str, word: &str, share: f64) {
        self.names
            .put_at(term_key(caller, kind, word), share, Instant::now());
    }

    /// The oldest text of `caller`'s sample of `kind` kept, unless older than [`KEPT`].
    pub fn edge(&self, caller: &str, kind: &str) -> Option<SampleEdge> {
        self.edges.get_at(&key(caller, kind), Instant::now())
    }

    /// Keeps `edge` as the oldest text of `caller`'s sample of `kind`.
    pub fn keep_edge(&self, caller: &str, kind: &str, edge: SampleEdge) {
        self.edges.put_at(key(caller, kind), edge, Instant::now());
    }

    fn any_term_at(&self, caller: &str, kind: &str, now: Instant) -> bool {
        self.counted.get_at(&key(caller, kind), now).is_some()
    }

    fn size_at(&self, caller: &str, kind: &str, now: Instant) -> Option<i64> {
        self.sizes.get_at(&key(caller, kind), now)
    }

    fn keep_size_at(&self, caller: &str, kind: &str, size: i64, now: Instant) {
        self.sizes.put_at(key(caller, kind), size, now);
    }

    fn term_at(&self, caller: &str, kind: &str, term: &str, now: Instant) -> Option<TermCounts> {
        self.terms.get_at(&term_key(caller, kind, term), now)
    }

    fn keep_term_at(&self, caller: &str, kind: &str, term: &str, counts: TermCounts, now: Instant) {
        self.terms.put_at(term_key(caller, kind, term), counts, now);
        self.counted.put_at(key(caller, kind), (), now);
    }
}

/// Tenant and user ids hold no control characters, so a line break separates the parts.
fn key(caller: &str, kind: &str) -> String {
    format!("{caller}\n{kind}")
}

/// As [`key`]; kinds hold no line break either, so the term is the rest, whatever it holds.
fn term_key(caller: &str, kind: &str, term: &str) -> String {
    format!("{caller}\n{kind}\n{term}")
}

/// A caller as [`HistoryStats`] knows it: its tenant and user.
pub fn caller(tenant: &str, user: &str) -> String {
    format!("{tenant}\n{user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_kept_a_minute_for_its_caller_and_kind_only() {
        let stats = HistoryStats::default();
        let now = Instant::now();
        let alice = caller("t1", "alice");
        stats.keep_size_at(&alice, "chunks", 125_000, now);
        assert_eq!(stats.size_at(&alice, "chunks", now), Some(125_000));
        assert_eq!(stats.size_at(&alice, "messages", now), None);
        assert_eq!(stats.size_at(&caller("t2", "alice"), "chunks", now), None);
        // "t1\nalice" + "chunks" must not be "t1" + "alice\nchunks" or any other split.
        assert_eq!(stats.size_at(&caller("t1", "alice\nchunks"), "", now), None);
        assert_eq!(
            stats.size_at(&alice, "chunks", now + KEPT - Duration::from_millis(1)),
            Some(125_000)
        );
        assert_eq!(stats.size_at(&alice, "chunks", now + KEPT), None);
    }

    #[test]
    fn a_terms_counts_are_kept_a_minute_for_its_caller_kind_and_term_only() {
        let stats = HistoryStats::default();
        let now = Instant::now();
        let alice = caller("t1", "alice");
        let counts = TermCounts {
            in_sample: 3,
            sample: 5_000,
            capped: Some(120),
        };
        assert!(!stats.any_term_at(&alice, "messages", now));
        stats.keep_term_at(&alice, "messages", "deploy", counts, now);
        assert!(stats.any_term_at(&alice, "messages", now));
        assert!(!stats.any_term_at(&alice, "chunks", now));
        assert!(!stats.any_term_at(&caller("t1", "bob"), "messages", now));
        assert!(!stats.any_term_at(&alice, "messages", now + KEPT));
        assert_eq!(
            stats.term_at(&alice, "messages", "deploy", now),
            Some(counts)
        );
        assert_eq!(stats.term_at(&alice, "chunks", "deploy", now), None);
        assert_eq!(stats.term_at(&alice, "messages", "deplo", now), None);
        assert_eq!(
            stats.term_at(&caller("t1", "bob"), "messages", "deploy", now),
            None
        );
        assert_eq!(
            stats.term_at(&caller("t2", "alice"), "messages", "deploy", now),
            None
        );
        // Terms are not sizes, whatever the key.
        assert_eq!(stats.size_at(&alice, "messages\ndeploy", now), None);
        assert_eq!(
            stats.term_at(&alice, "messages", "deploy", now + KEPT),
            None
        );
    }

    #[test]
    fn an_edge_is_kept_for_its_caller_and_kind_only() {
        let stats = HistoryStats::default();
        let alice = caller("t1", "alice");
        let edge = SampleEdge { id: None, n: 41 };
        assert_eq!(stats.edge(&alice, "messages"), None);
        stats.keep_edge(&alice, "messages", edge);
        assert_eq!(stats.edge(&alice, "messages"), Some(edge));
        assert_eq!(stats.edge(&alice, "chunks"), None);
        assert_eq!(stats.edge(&caller("t1", "bob"), "messages"), None);
        // Edges are not sizes.
        assert_eq!(stats.size(&alice, "messages"), None);
    }

    #[test]
    fn the_kept_values_are_bounded() {
        let kept = Kept::new(100);
        let now = Instant::now();
        let half = now + KEPT / 2;
        for i in 0..100 {
            let at = if i % 2 == 0 { now } else { half };
            kept.put_at(i.to_string(), 5_000, at);
        }
        // Full, half of them expired by then: only those go.
        let later = now + KEPT;
        kept.put_at("later".into(), 6_000, later);
        assert_eq!(kept.len(), 51);
        assert_eq!(kept.get_at("1", later), Some(5_000));
        assert_eq!(kept.get_at("later", later), Some(6_000));
        // Full of fresh values: all go for the new one.
        let kept = Kept::new(100);
        for i in 0..100 {
            kept.put_at(i.to_string(), 5_000, later);
        }
        kept.put_at("last".into(), 7_000, later);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept.get_at("last", later), Some(7_000));
        assert_eq!(HistoryStats::default().sizes.most, MOST_SIZES);
        assert_eq!(HistoryStats::default().terms.most, MOST_TERMS);
    }
}

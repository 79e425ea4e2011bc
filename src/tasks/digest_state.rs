//! What the digest needs from a task's older messages, kept in bounded size as they are written,
//! so that "where was I?" costs the same at message 10 and at message 100,000.
//!
//! The state folds messages in order: which ordinals an update claimed done ("Step 3 done"),
//! which titles it claimed done by naming at least half of their words, and the key details with
//! the count of all seen. A digest is the state of the messages up to a checkpoint, folded
//! further with the few written since, and the plan's items as they stand: a claim counts for an
//! item still pending when the digest is made, whatever the item's status was when the claim was
//! written. A claim by title is matched against the titles of the plan that is active when the
//! claim is folded in (at the next checkpoint, at most 64 messages later, or when a digest is
//! made before that). With no replan in between, folding in pieces gives exactly
//! [`super::digest::build`]'s answer over every message.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use super::digest::{self, Item, KeyDetail, MAX_KEY_DETAILS, Message};
use super::model::ItemStatus;

/// Highest ordinal a claim is kept for (a plan has at most this many items).
pub const MAX_ORDINAL: i32 = 500;
/// Most titles whose claims are kept (plans replaced many times bring new titles).
pub const MAX_TITLES: usize = 2000;
/// Most key details remembered as seen, to count each once; beyond it the oldest are forgotten
/// (and a detail seen again after that counts as new).
pub const MAX_SEEN: usize = 4096;

/// The folded state of a task's messages up to `through`.
///
/// The key details seen are remembered by the hash of each, numbered in the order first seen
/// (the `details_seen` so far); a detail counts as seen while its number is among the latest
/// [`MAX_SEEN`]. The stored state does not hold those hashes: they are rows of
/// `task_digest_seen`, and a fold is given the latest number of each hash it may meet
/// ([`DigestState::hashes_to_fold`], [`DigestState::remember`]). So a state read for "where was
/// I?" is the same few kilobytes at message 10 and at message 100,000.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DigestState {
    /// Every message with a seq up to this one is folded in.
    pub through: i32,
    /// The first message claiming each ordinal done.
    pub ordinal_claims: BTreeMap<i32, i32>,
    /// The first message claiming done an item with this title (its words, see [`title_key`]).
    pub title_claims: BTreeMap<String, i32>,
    /// The latest [`MAX_KEY_DETAILS`] key details, in the order first seen.
    pub details: Vec<KeyDetail>,
    /// Distinct key details seen in all (and the number the next one gets).
    pub details_seen: usize,
    /// The hashes of the details seen, oldest first, as a state stored before they had a table
    /// of their own holds them (a JSON array of numbers); taken in by
    /// [`DigestState::take_stored_hashes`], and never written again.
    #[serde(rename = "seen", default, skip_serializing)]
    stored_hashes: Option<Vec<u64>>,
    /// The latest number of each detail hash this state may meet, as far as it was told.
    #[serde(skip)]
    seen: HashMap<u64, usize>,
    /// The hashes this state numbered since it was read, with their numbers, oldest first: what
    /// a checkpoint adds to `task_digest_seen`.
    #[serde(skip)]
    numbered: Vec<(usize, u64)>,
}

/// An item's title as the done-claims match it: its words without stopwords, sorted. Titles with
/// the same words match the same updates.
pub fn title_key(title: &str) -> String {
    let mut words: Vec<String> = digest::title_words(title).into_iter().collect();
    words.sort();
    words.join(" ")
}

fn detail_hash(kind: &str, value: &str) -> u64 {
    // Stable across builds and processes: the state is stored.
    let mut hasher = Fnv1a::default();
    kind.hash(&mut hasher);
    value.to_lowercase().hash(&mut hasher);
    hasher.finish()
}

/// FNV-1a, a fixed hash (the standard library's may change between releases).
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl DigestState {
    /// Folds `messages` (in order; those up to `through` are skipped) with `titles`, the titles
    /// of the plan's items, for claims that name an item by its words.
    ///
    /// A detail counts as new unless its hash was numbered among the latest [`MAX_SEEN`]: the
    /// state must have been told the numbers of the hashes of `messages` first
    /// ([`DigestState::remember`]), as far as the table of seen hashes holds them.
    pub fn fold(&mut self, titles: &[String], messages: &[Message]) {
        let keys: Vec<(String, HashSet<String>)> = titles
            .iter()
            .map(|t| (title_key(t), digest::title_words(t)))
            .filter(|(key, _)| !key.is_empty())
            .collect();
        let start = self.through;
        for message in messages.iter().filter(|m| m.seq > start) {
            if message.msg_type != "lifecycle" && digest::says_done(&message.content) {
                let ordinals = digest::named_ordinals(&message.content);
                if ordinals.is_empty() {
                    let content: HashSet<String> =
                        digest::words(&message.content).into_iter().collect();
                    for (key, words) in &keys {
                        let overlap = words.intersection(&content).count();
                        if overlap * 2 >= words.len()
                            && (self.title_claims.len() < MAX_TITLES
                                || self.title_claims.contains_key(key))
                        {
                            self.title_claims.entry(key.clone()).or_insert(message.seq);
                        }
                    }
                } else {
                    for ordinal in ordinals
                        .into_iter()
                        .filter(|o| (1..=MAX_ORDINAL).contains(o))
                    {
                        self.ordinal_claims.entry(ordinal).or_insert(message.seq);
                    }
                }
            }
            digest::each_detail(&message.content, |kind, value| {
                let hash = detail_hash(kind, value);
                let oldest_kept = self.details_seen.saturating_sub(MAX_SEEN);
                if self.seen.get(&hash).is_some_and(|n| *n >= oldest_kept) {
                    return;
                }
                self.seen.insert(hash, self.details_seen);
                self.numbered.push((self.details_seen, hash));
                // A fold over a whole history keeps what it may still meet, not every hash.
                if self.seen.len() > 2 * MAX_SEEN {
                    let oldest_kept = (self.details_seen + 1).saturating_sub(MAX_SEEN);
                    self.seen.retain(|_, n| *n >= oldest_kept);
                }
                self.details_seen += 1;
                self.details.push(KeyDetail {
                    kind: kind.to_owned(),
                    value: value.to_owned(),
                    message_seq: message.seq,
                });
                if self.details.len() > MAX_KEY_DETAILS {
                    self.details.remove(0);
                }
            });
            self.through = message.seq;
        }
    }

    /// The pending items of `items` an update claimed done, each with the first message that
    /// did: by ordinal or by the words of its title, whichever came first.
    pub fn inferred(&self, items: &[Item]) -> BTreeMap<i32, i32> {
        items
            .iter()
            .filter(|i| i.status == ItemStatus::Pending)
            .filter_map(|item| {
                let by_ordinal = self.ordinal_claims.get(&item.ordinal).copied();
                let by_title = self.title_claims.get(&title_key(&item.title)).copied();
                let first = match (by_ordinal, by_title) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                first.map(|seq| (item.ordinal, seq))
            })
            .collect()
    }

    /// The key details to list and how many older ones are left out.
    pub fn key_details(&self) -> (Vec<KeyDetail>, usize) {
        (
            self.details.clone(),
            self.details_seen.saturating_sub(self.details.len()),
        )
    }

    /// The distinct hashes of the key details of `messages` this state has not folded yet:
    /// those whose latest numbers [`DigestState::fold`] needs.
    pub fn hashes_to_fold(&self, messages: &[Message]) -> Vec<u64> {
        let mut hashes = HashSet::new();
        for message in messages.iter().filter(|m| m.seq > self.through) {
            digest::each_detail(&message.content, |kind, value| {
                hashes.insert(detail_hash(kind, value));
            });
        }
        hashes.into_iter().collect()
    }

    /// Tells the state the latest number of each of some hashes (as stored, see
    /// [`DigestState::hashes_to_fold`]).
    pub fn remember(&mut self, numbers: impl IntoIterator<Item = (u64, usize)>) {
        for (hash, n) in numbers {
            let latest = self.seen.entry(hash).or_insert(n);
            *latest = (*latest).max(n);
        }
    }

    /// The detail hashes a state stored before `task_digest_seen` held, with their numbers:
    /// remembered, and counted as numbered by this state, so that its next checkpoint stores
    /// them as rows.
    pub fn take_stored_hashes(&mut self) {
        if let Some(hashes) = self.stored_hashes.take() {
            let first = self.details_seen.saturating_sub(hashes.len());
            for (i, hash) in hashes.into_iter().enumerate() {
                self.seen.insert(hash, first + i);
                self.numbered.push((first + i, hash));
            }
        }
    }

    /// The hashes numbered since the state was read that are still among the latest
    /// [`MAX_SEEN`], with their numbers, and the number below which stored hashes are forgotten.
    pub fn numbered_to_store(&self) -> (Vec<(usize, u64)>, usize) {
        let oldest_kept = self.details_seen.saturating_sub(MAX_SEEN);
        (
            self.numbered
                .iter()
                .filter(|(n, _)| *n >= oldest_kept)
                .copied()
                .collect(),
            oldest_kept,
        )
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;

    fn message(seq: i32, content: String) -> Message {
        Message {
            seq,
            role: "agent".into(),
            msg_type: "progress".into(),
            content,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    fn item(ordinal: i32, title: &str, status: ItemStatus) -> Item {
        Item {
            ordinal,
            title: title.into(),
            stage: None,
            status,
        }
    }

    #[test]
    fn folding_in_pieces_equals_folding_at_once() {
        let titles: Vec<String> = [
            "Build the image",
            "Push image to registry",
            "Run migrations",
        ]
        .map(String::from)
        .to_vec();
        let mut messages = vec![
            message(1, "Step 1 done: ghcr.io/acme/app:v1.0.0".into()),
            message(2, "pushed the image to the registry, finished".into()),
            message(3, "steps 400-600 done".into()),
        ];
        // More distinct details than a digest lists.
        for n in 4..=120 {
            messages.push(message(n, format!("listening on port {}", 1000 + n)));
        }
        let mut whole = DigestState::default();
        whole.fold(&titles, &messages);
        for split in [1, 2, 3, 50, 119] {
            let mut pieces = DigestState::default();
            pieces.fold(&titles, &messages[..split]);
            // Messages already folded are skipped when handed over again.
            pieces.fold(&titles, &messages);
            assert_eq!(pieces, whole, "split at {split}");
        }
        assert_eq!(whole.through, 120);
        assert_eq!(whole.ordinal_claims.get(&1), Some(&1));
        // Ordinals past any plan's size are not kept.
        assert!(whole.ordinal_claims.keys().all(|o| *o <= MAX_ORDINAL));
        assert_eq!(whole.ordinal_claims.len(), 1 + 101, "1 and 400..=500");
        let items = [
            item(1, "Build the image", ItemStatus::Pending),
            item(2, "Push image to registry", ItemStatus::Pending),
            item(3, "Run migrations", ItemStatus::Pending),
            item(4, "Cleanup", ItemStatus::Completed),
        ];
        let inferred = whole.inferred(&items);
        assert_eq!(
            inferred.into_iter().collect::<Vec<_>>(),
            vec![(1, 1), (2, 2)]
        );
        let (listed, omitted) = whole.key_details();
        assert_eq!(listed.len(), MAX_KEY_DETAILS);
        assert_eq!(listed.last().unwrap().value, "1120");
        assert_eq!(omitted, whole.details_seen - MAX_KEY_DETAILS);
        // The same details, counted the way the whole-history digest counts them.
        let (all, all_omitted) = digest::key_details(&messages, MAX_KEY_DETAILS);
        assert_eq!((listed, omitted), (all, all_omitted));
    }

    #[test]
    fn a_detail_counts_as_seen_while_among_the_latest_numbered() {
        let messages: Vec<Message> = (1..=(MAX_SEEN as i32 + 100))
            .map(|n| message(n, format!("id={n}x")))
            .collect();
        let mut state = DigestState::default();
        state.fold(&[], &messages);
        assert_eq!(state.details.len(), MAX_KEY_DETAILS);
        assert_eq!(state.details_seen, MAX_SEEN + 100);
        // The first hundred are forgotten, the rest still seen.
        let again = vec![
            message(MAX_SEEN as i32 + 101, "id=1x".into()),
            message(MAX_SEEN as i32 + 102, "id=200x".into()),
        ];
        let mut after = state.clone();
        after.fold(&[], &again);
        assert_eq!(after.details_seen, MAX_SEEN + 101, "id=1x counts again");
        // What is stored is small, and holds none of the hashes.
        let stored = serde_json::to_string(&state).unwrap();
        assert!(stored.len() < 5_000, "{} bytes", stored.len());
        assert!(!stored.contains("\"seen\""), "{stored}");
        let (to_store, forgotten_below) = state.numbered_to_store();
        assert_eq!(to_store.len(), MAX_SEEN);
        assert_eq!(forgotten_below, 100);
    }

    /// A state read back with only the numbers of the hashes its messages hold folds them as
    /// the state that never left memory does, checkpoint after checkpoint.
    #[test]
    fn folding_with_the_stored_numbers_equals_folding_in_memory() {
        // Details that recur at every distance, some beyond the window.
        let messages: Vec<Message> = (1..=(3 * MAX_SEEN as i32))
            .map(|n| {
                let a = n % 5000;
                let b = (n * 7) % 900;
                message(n, format!("id={a}x on port {b}"))
            })
            .collect();
        let mut whole = DigestState::default();
        whole.fold(&[], &messages);

        let mut table: HashMap<u64, usize> = HashMap::new();
        let mut stored = serde_json::to_value(DigestState::default()).unwrap();
        for chunk in messages.chunks(64) {
            let mut state: DigestState = serde_json::from_value(stored).unwrap();
            let hashes = state.hashes_to_fold(chunk);
            state.remember(hashes.iter().filter_map(|h| table.get(h).map(|n| (*h, *n))));
            state.fold(&[], chunk);
            let (to_store, forgotten_below) = state.numbered_to_store();
            table.extend(to_store.into_iter().map(|(n, h)| (h, n)));
            table.retain(|_, n| *n >= forgotten_below);
            assert!(table.len() <= MAX_SEEN);
            stored = serde_json::to_value(&state).unwrap();
        }
        let pieces: DigestState = serde_json::from_value(stored).unwrap();
        assert_eq!(pieces.details_seen, whole.details_seen);
        assert_eq!(pieces.details, whole.details);
        assert_eq!(pieces.through, whole.through);
    }

    #[test]
    fn states_stored_with_their_hashes_are_taken_in() {
        let messages: Vec<Message> = (1..=300).map(|n| message(n, format!("id={n}x"))).collect();
        let mut state = DigestState::default();
        state.fold(&[], &messages);
        let hashes: Vec<u64> = {
            let mut numbered = state.numbered.clone();
            numbered.sort();
            numbered.into_iter().map(|(_, h)| h).collect()
        };
        assert!(hashes.iter().any(|h| *h > i64::MAX as u64));
        // The earlier form: every hash a JSON number.
        let mut stored = serde_json::to_value(&state).unwrap();
        stored["seen"] = serde_json::json!(hashes);
        let mut read: DigestState = serde_json::from_value(stored).unwrap();
        read.take_stored_hashes();
        let (to_store, _) = read.numbered_to_store();
        assert_eq!(to_store.len(), 300);
        // A detail seen before is not new, one never seen is.
        let next = vec![
            message(301, "id=7x".into()),
            message(302, "id=9999x".into()),
        ];
        read.fold(&[], &next);
        assert_eq!(read.details_seen, 301);
        // Not hashes: refused, not read as something else.
        for bad in [serde_json::json!("AAAA"), serde_json::json!([-1, "x"])] {
            let mut stored = serde_json::to_value(&state).unwrap();
            stored["seen"] = bad;
            assert!(serde_json::from_value::<DigestState>(stored).is_err());
        }
    }
}

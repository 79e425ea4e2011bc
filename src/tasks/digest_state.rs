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

use std::collections::{BTreeMap, HashSet, VecDeque};
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
    /// Distinct key details seen in all.
    pub details_seen: usize,
    /// Hashes of the details seen, oldest first (at most [`MAX_SEEN`]). Stored as one base64
    /// string of their little-endian bytes (see [`seen_format`]).
    #[serde(with = "seen_format")]
    pub seen: VecDeque<u64>,
}

/// The stored form of [`DigestState::seen`]: one base64 string of the hashes' little-endian
/// bytes (43,691 characters at [`MAX_SEEN`]). Written as a JSON array of numbers, a full set
/// was 90 KB, which every "where was I?" had PostgreSQL print (1.0 ms, against 0.2 ms for the
/// state of a short task) and the service parse back, number by number. States stored in that
/// form are still read.
mod seen_format {
    use std::collections::VecDeque;
    use std::fmt;

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        seen: &VecDeque<u64>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = seen.iter().flat_map(|h| h.to_le_bytes()).collect();
        serializer.serialize_str(&STANDARD_NO_PAD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<VecDeque<u64>, D::Error> {
        deserializer.deserialize_any(SeenVisitor)
    }

    struct SeenVisitor;

    impl<'de> Visitor<'de> for SeenVisitor {
        type Value = VecDeque<u64>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("base64 of 8-byte hashes, or an array of hashes")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            let bytes = STANDARD_NO_PAD.decode(text).map_err(E::custom)?;
            if bytes.len() % 8 != 0 {
                return Err(E::custom(
                    "the seen hashes are not a whole number of 8 bytes",
                ));
            }
            Ok(bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut seen = VecDeque::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(hash) = seq.next_element::<u64>()? {
                seen.push_back(hash);
            }
            Ok(seen)
        }
    }
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
    pub fn fold(&mut self, titles: &[String], messages: &[Message]) {
        let keys: Vec<(String, HashSet<String>)> = titles
            .iter()
            .map(|t| (title_key(t), digest::title_words(t)))
            .filter(|(key, _)| !key.is_empty())
            .collect();
        let mut seen: HashSet<u64> = self.seen.iter().copied().collect();
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
                if !seen.insert(hash) {
                    return;
                }
                self.seen.push_back(hash);
                if self.seen.len() > MAX_SEEN
                    && let Some(old) = self.seen.pop_front()
                {
                    seen.remove(&old);
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
    fn the_seen_set_stays_bounded() {
        let messages: Vec<Message> = (1..=(MAX_SEEN as i32 + 100))
            .map(|n| message(n, format!("id={n}x")))
            .collect();
        let mut state = DigestState::default();
        state.fold(&[], &messages);
        assert_eq!(state.seen.len(), MAX_SEEN);
        assert_eq!(state.details.len(), MAX_KEY_DETAILS);
        assert_eq!(state.details_seen, MAX_SEEN + 100);
        // Stored and read back unchanged, in a bounded size.
        let stored = serde_json::to_string(&state).unwrap();
        assert!(stored.len() < 50_000, "{} bytes", stored.len());
        assert_eq!(serde_json::from_str::<DigestState>(&stored).unwrap(), state);
    }

    #[test]
    fn states_stored_with_the_hashes_as_numbers_are_read() {
        let messages: Vec<Message> = (1..=300).map(|n| message(n, format!("id={n}x"))).collect();
        let mut state = DigestState::default();
        state.fold(&[], &messages);
        let mut stored = serde_json::to_value(&state).unwrap();
        assert!(stored["seen"].is_string(), "{}", stored["seen"]);
        // The earlier form: every hash a JSON number, among them some above 2^63.
        stored["seen"] = serde_json::json!(state.seen);
        assert!(state.seen.iter().any(|h| *h > i64::MAX as u64));
        assert_eq!(
            serde_json::from_value::<DigestState>(stored).unwrap(),
            state
        );
        // Not hashes: refused, not read as something else.
        for bad in [serde_json::json!("AAAA"), serde_json::json!("not base64!")] {
            let mut stored = serde_json::to_value(&state).unwrap();
            stored["seen"] = bad;
            assert!(serde_json::from_value::<DigestState>(stored).is_err());
        }
    }
}

//! The sizes of long histories, remembered for a minute.
//!
//! A keyword search needs the number of texts it searches: under [`KEYWORD_SAMPLE`] it ranks
//! every match exactly, at or above it that number is the corpus size its term weights use.
//! Counting costs in proportion to the history (20 ms for 125,000 memory chunks), and a search
//! counted on every call. A size at or above the sample is therefore kept for [`KEPT`] in this
//! process, per caller and kind of text: a term weight computed with a size a minute old differs
//! only by the texts written since, and a history that shrank under the sample meanwhile is still
//! ranked exactly (the sample then holds every text, and says so). A smaller size is counted on
//! every search: that is cheap, and the exact ranking wants it exact.
//!
//! [`KEYWORD_SAMPLE`]: super::query::KEYWORD_SAMPLE

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a size is used before the history is counted again.
pub const KEPT: Duration = Duration::from_secs(60);

/// Sizes kept at most; past that, the expired ones are dropped, and all of them if none is.
const MOST: usize = 10_000;

/// The kept sizes, by caller (tenant and user) and kind of text.
#[derive(Debug, Default)]
pub struct HistorySizes {
    sizes: Mutex<HashMap<String, (i64, Instant)>>,
}

impl HistorySizes {
    /// The size kept for `caller`'s texts of `kind`, unless older than [`KEPT`].
    pub fn get(&self, caller: &str, kind: &str) -> Option<i64> {
        self.get_at(caller, kind, Instant::now())
    }

    /// Keeps `size` as `caller`'s number of texts of `kind`.
    pub fn put(&self, caller: &str, kind: &str, size: i64) {
        self.put_at(caller, kind, size, Instant::now());
    }

    fn get_at(&self, caller: &str, kind: &str, now: Instant) -> Option<i64> {
        let sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        let &(size, at) = sizes.get(&key(caller, kind))?;
        (now.saturating_duration_since(at) < KEPT).then_some(size)
    }

    fn put_at(&self, caller: &str, kind: &str, size: i64, now: Instant) {
        let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        if sizes.len() >= MOST {
            sizes.retain(|_, &mut (_, at)| now.saturating_duration_since(at) < KEPT);
            if sizes.len() >= MOST {
                sizes.clear();
            }
        }
        sizes.insert(key(caller, kind), (size, now));
    }
}

/// Tenant and user ids hold no control characters, so a line break separates the parts.
fn key(caller: &str, kind: &str) -> String {
    format!("{caller}\n{kind}")
}

/// A caller as [`HistorySizes`] knows it: its tenant and user.
pub fn caller(tenant: &str, user: &str) -> String {
    format!("{tenant}\n{user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_kept_a_minute_for_its_caller_and_kind_only() {
        let sizes = HistorySizes::default();
        let now = Instant::now();
        let alice = caller("t1", "alice");
        sizes.put_at(&alice, "chunks", 125_000, now);
        assert_eq!(sizes.get_at(&alice, "chunks", now), Some(125_000));
        assert_eq!(sizes.get_at(&alice, "messages", now), None);
        assert_eq!(sizes.get_at(&caller("t2", "alice"), "chunks", now), None);
        // "t1\nalice" + "chunks" must not be "t1" + "alice\nchunks" or any other split.
        assert_eq!(sizes.get_at(&caller("t1", "alice\nchunks"), "", now), None);
        assert_eq!(
            sizes.get_at(&alice, "chunks", now + KEPT - Duration::from_millis(1)),
            Some(125_000)
        );
        assert_eq!(sizes.get_at(&alice, "chunks", now + KEPT), None);
    }

    #[test]
    fn the_kept_sizes_are_bounded() {
        let sizes = HistorySizes::default();
        let now = Instant::now();
        let half = now + KEPT / 2;
        for i in 0..MOST {
            let at = if i % 2 == 0 { now } else { half };
            sizes.put_at(&caller("t", &i.to_string()), "chunks", 5_000, at);
        }
        // Full, half of them expired by then: only those go.
        let later = now + KEPT;
        sizes.put_at(&caller("t", "later"), "chunks", 6_000, later);
        assert_eq!(sizes.sizes.lock().unwrap().len(), MOST / 2 + 1);
        assert_eq!(
            sizes.get_at(&caller("t", "1"), "chunks", later),
            Some(5_000)
        );
        assert_eq!(
            sizes.get_at(&caller("t", "later"), "chunks", later),
            Some(6_000)
        );
        // Full of fresh sizes: all go for the new one.
        let sizes = HistorySizes::default();
        for i in 0..MOST {
            sizes.put_at(&caller("u", &i.to_string()), "chunks", 5_000, later);
        }
        sizes.put_at(&caller("t", "last"), "chunks", 7_000, later);
        assert_eq!(sizes.sizes.lock().unwrap().len(), 1);
        assert_eq!(
            sizes.get_at(&caller("t", "last"), "chunks", later),
            Some(7_000)
        );
    }
}

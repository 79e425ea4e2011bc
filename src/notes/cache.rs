//! Notes a replica holds in memory, as the notes route answers them.
//!
//! Notes are read on every turn of an agent and written far less often, and at the size cap a
//! read is mostly moving the text: out of PostgreSQL's TOAST table, to the server, into JSON. So
//! a replica keeps the answer it last gave (the JSON body, ready to send) with what names the
//! stored row it came from: the notes' version and the transaction that wrote the row. Every
//! read still asks the database, as the caller and under row-level security, and names the held
//! copy; the database answers the row's version and, only when the row is no longer the held one,
//! its text ([`super::store::read_notes_in_one_call`]). So a write by any replica, or by hand in
//! SQL, is seen at once, and a held answer is only given to a caller the database has just shown
//! the same row to.
//!
//! The cache is bounded by the bytes it holds (`MNEMO_NOTES_CACHE_BYTES`), least recently read
//! out first; an erasure forgets the erased users' notes at once.

use std::sync::Mutex;

use bytes::Bytes;
use hashlink::LruCache;

/// Key: tenant, user, agent.
type Key = (String, String, String);

/// What a replica holds of one agent's notes: the row it was made from and the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The notes' version.
    pub version: i64,
    /// The transaction that wrote the row (its `xmin`).
    pub row: i64,
    /// The notes route's JSON body for that row.
    pub body: Bytes,
}

/// Bytes an entry is charged besides its body: the key's strings and the map's bookkeeping.
const ENTRY_OVERHEAD: usize = 128;

fn charge(key: &Key, held: &Held) -> usize {
    key.0.len() + key.1.len() + key.2.len() + held.body.len() + ENTRY_OVERHEAD
}

/// Bounded map from an agent's notes to the answer last given for them.
pub struct NotesCache {
    budget: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    entries: LruCache<Key, Held>,
    bytes: usize,
}

impl Inner {
    fn forget(&mut self, key: &Key) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= charge(key, &old);
        }
    }
}

impl NotesCache {
    /// A cache holding at most `budget` bytes (0: holds nothing).
    pub fn new(budget: usize) -> Self {
        NotesCache {
            budget,
            inner: Mutex::new(Inner {
                entries: LruCache::new_unbounded(),
                bytes: 0,
            }),
        }
    }

    fn key(tenant: &str, user: &str, agent: &str) -> Key {
        (tenant.to_owned(), user.to_owned(), agent.to_owned())
    }

    /// The held answer for an agent's notes, if any (marking it as just read).
    pub fn get(&self, tenant: &str, user: &str, agent: &str) -> Option<Held> {
        if self.budget == 0 {
            return None;
        }
        let mut inner = self.inner.lock().ok()?;
        inner.entries.get(&Self::key(tenant, user, agent)).cloned()
    }

    /// Holds `held` as the answer for an agent's notes, in place of any other; an answer larger
    /// than the whole budget is not held. Evicts the least recently read answers until the
    /// cache is within its budget.
    pub fn put(&self, tenant: &str, user: &str, agent: &str, held: Held) {
        let key = Self::key(tenant, user, agent);
        let size = charge(&key, &held);
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.forget(&key);
        if size > self.budget {
            return;
        }
        while inner.bytes + size > self.budget {
            match inner.entries.remove_lru() {
                Some((k, old)) => inner.bytes -= charge(&k, &old),
                None => break,
            }
        }
        inner.bytes += size;
        inner.entries.insert(key, held);
    }

    /// Forgets an agent's notes (the database has none).
    pub fn remove(&self, tenant: &str, user: &str, agent: &str) {
        let key = Self::key(tenant, user, agent);
        if let Ok(mut inner) = self.inner.lock() {
            inner.forget(&key);
        }
    }

    /// Forgets every agent's notes of a user, or of every user of `tenant` when `user` is
    /// `None` (after an erasure).
    pub fn remove_all(&self, tenant: &str, user: Option<&str>) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let gone: Vec<Key> = inner
            .entries
            .iter()
            .filter(|((t, u, _), _)| t == tenant && user.is_none_or(|user| u == user))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            inner.forget(key);
        }
    }

    /// Bytes held now, as the budget counts them.
    pub fn bytes(&self) -> usize {
        self.inner.lock().map_or(0, |inner| inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(version: i64, body: &str) -> Held {
        Held {
            version,
            row: 7,
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn answers_are_kept_per_tenant_user_and_agent() {
        let cache = NotesCache::new(1 << 20);
        cache.put("t", "u", "a", held(1, "one"));
        assert_eq!(cache.get("t", "u", "a").map(|h| h.version), Some(1));
        for (t, u, a) in [("t", "u", "b"), ("t", "v", "a"), ("s", "u", "a")] {
            assert!(cache.get(t, u, a).is_none(), "{t} {u} {a}");
        }
        // Replaced, not added to.
        cache.put("t", "u", "a", held(2, "two"));
        assert_eq!(cache.get("t", "u", "a").map(|h| h.version), Some(2));
        assert_eq!(cache.bytes(), 3 + 3 + ENTRY_OVERHEAD);
    }

    #[test]
    fn the_budget_evicts_the_least_recently_read() {
        let body = "x".repeat(100);
        let one = 3 + body.len() + ENTRY_OVERHEAD;
        let cache = NotesCache::new(2 * one);
        cache.put("t", "u", "a", held(1, &body));
        cache.put("t", "u", "b", held(1, &body));
        assert!(cache.get("t", "u", "a").is_some());
        cache.put("t", "u", "c", held(1, &body));
        assert!(
            cache.get("t", "u", "b").is_none(),
            "b was read least recently"
        );
        assert!(cache.get("t", "u", "a").is_some());
        assert!(cache.get("t", "u", "c").is_some());
        assert_eq!(cache.bytes(), 2 * one);
        // Larger than the whole budget: not held, and what it replaces is gone.
        cache.put("t", "u", "a", held(2, &"y".repeat(3 * one)));
        assert!(cache.get("t", "u", "a").is_none());
        assert_eq!(cache.bytes(), one);
    }

    #[test]
    fn a_zero_budget_holds_nothing() {
        let cache = NotesCache::new(0);
        cache.put("t", "u", "a", held(1, "one"));
        assert!(cache.get("t", "u", "a").is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn erasures_forget_a_user_or_a_tenant() {
        let cache = NotesCache::new(1 << 20);
        for (t, u, a) in [
            ("t", "u", "a"),
            ("t", "u", "b"),
            ("t", "v", "a"),
            ("s", "u", "a"),
        ] {
            cache.put(t, u, a, held(1, "n"));
        }
        cache.remove_all("t", Some("u"));
        assert!(cache.get("t", "u", "a").is_none());
        assert!(cache.get("t", "u", "b").is_none());
        assert!(cache.get("t", "v", "a").is_some());
        cache.remove_all("t", None);
        assert!(cache.get("t", "v", "a").is_none());
        assert!(cache.get("s", "u", "a").is_some(), "another tenant's stays");
        cache.remove("s", "u", "a");
        assert_eq!(cache.bytes(), 0);
    }
}

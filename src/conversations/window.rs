//! The short-term window cache: the last N messages per session, kept in memory.
//!
//! It stays correct when several replicas write the same session: every entry remembers the
//! session's `version` (bumped by each archive, in the database), and every read sends that
//! version to the database in the same query that would fetch the window ([`super::store::window`]).
//! A matching version means the cached window is current; otherwise the query has already returned
//! the fresh window. A replica only extends its cached window itself when its own archive moved the
//! version by exactly one (nobody else wrote in between).

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::store::WindowMessage;

/// Key: tenant, user, session.
type Key = (String, String, String);

struct Entry {
    version: i64,
    messages: Vec<WindowMessage>,
    used: u64,
}

/// Bounded map from session to its cached window.
pub struct WindowCache {
    capacity: usize,
    inner: Mutex<(HashMap<Key, Entry>, u64)>,
}

impl WindowCache {
    pub fn new(capacity: usize) -> Self {
        WindowCache {
            capacity,
            inner: Mutex::new((HashMap::new(), 0)),
        }
    }

    fn key(tenant: &str, user: &str, session: &str) -> Key {
        (tenant.to_owned(), user.to_owned(), session.to_owned())
    }

    /// The cached version and window of a session, if any.
    pub fn get(
        &self,
        tenant: &str,
        user: &str,
        session: &str,
    ) -> Option<(i64, Vec<WindowMessage>)> {
        let mut guard = self.inner.lock().ok()?;
        let (map, tick) = &mut *guard;
        *tick += 1;
        let entry = map.get_mut(&Self::key(tenant, user, session))?;
        entry.used = *tick;
        Some((entry.version, entry.messages.clone()))
    }

    /// Stores the window of `version`.
    pub fn put(
        &self,
        tenant: &str,
        user: &str,
        session: &str,
        version: i64,
        messages: Vec<WindowMessage>,
    ) {
        if self.capacity == 0 {
            return;
        }
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let (map, tick) = &mut *guard;
        *tick += 1;
        let key = Self::key(tenant, user, session);
        if !map.contains_key(&key) && map.len() >= self.capacity {
            // Evict the least recently used entry; a linear scan is fine at these sizes and only
            // happens when the cache is full.
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            key,
            Entry {
                version,
                messages,
                used: *tick,
            },
        );
    }

    /// Forgets a session (after it was deleted).
    pub fn remove(&self, tenant: &str, user: &str, session: &str) {
        if let Ok(mut guard) = self.inner.lock() {
            guard.0.remove(&Self::key(tenant, user, session));
        }
    }

    /// Forgets every session of a user, or of every user of `tenant` when `user` is `None`
    /// (after an erasure).
    pub fn remove_all(&self, tenant: &str, user: Option<&str>) {
        if let Ok(mut guard) = self.inner.lock() {
            guard
                .0
                .retain(|(t, u, _), _| t != tenant || user.is_some_and(|user| u != user));
        }
    }
}

/// The window after `added` joined `window`: ordered by time (ties keep arrival order, as the
/// database's `(sent_at, seq)` order does), the last `size` kept.
pub fn extend(
    mut window: Vec<WindowMessage>,
    added: Vec<WindowMessage>,
    size: usize,
) -> Vec<WindowMessage> {
    window.extend(added);
    // Stable: equal times keep their order, and `added` came after everything cached.
    window.sort_by_key(|m| m.sent_at);
    let skip = window.len().saturating_sub(size);
    window.drain(..skip);
    window
}

/// True when a cached window still holds a message older than the retention cutoff (then the
/// database must answer instead: expired messages vanish from every read at once).
pub fn has_expired(window: &[WindowMessage], cutoff: Option<DateTime<Utc>>) -> bool {
    cutoff.is_some_and(|cutoff| window.iter().any(|m| m.archived_at < cutoff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erasures_forget_the_sessions_they_reach() {
        let cache = WindowCache::new(10);
        for (t, u, s) in [
            ("t1", "a", "s1"),
            ("t1", "a", "s2"),
            ("t1", "b", "s1"),
            ("t2", "a", "s1"),
        ] {
            cache.put(t, u, s, 1, Vec::new());
        }
        cache.remove_all("t1", Some("a"));
        assert!(cache.get("t1", "a", "s1").is_none() && cache.get("t1", "a", "s2").is_none());
        assert!(cache.get("t1", "b", "s1").is_some() && cache.get("t2", "a", "s1").is_some());
        cache.remove_all("t1", None);
        assert!(cache.get("t1", "b", "s1").is_none());
        assert!(cache.get("t2", "a", "s1").is_some());
    }

    fn m(id: &str, secs: i64) -> WindowMessage {
        let at = DateTime::from_timestamp(secs, 0).unwrap();
        WindowMessage {
            id: id.into(),
            sender: "user".into(),
            text: id.into(),
            sent_at: at,
            archived_at: at,
            tool_calls: None,
            tool_call_id: None,
        }
    }

    fn ids(w: &[WindowMessage]) -> Vec<&str> {
        w.iter().map(|m| m.id.as_str()).collect()
    }

    #[test]
    fn extend_orders_by_time_and_keeps_the_last() {
        let w = extend(vec![m("a", 1), m("b", 5)], vec![m("c", 5), m("d", 3)], 3);
        assert_eq!(ids(&w), ["d", "b", "c"]);
    }

    #[test]
    fn cache_is_bounded_and_lru() {
        let cache = WindowCache::new(2);
        cache.put("t", "u", "s1", 1, vec![m("a", 1)]);
        cache.put("t", "u", "s2", 1, vec![]);
        assert!(cache.get("t", "u", "s1").is_some());
        cache.put("t", "u", "s3", 1, vec![]);
        assert!(
            cache.get("t", "u", "s2").is_none(),
            "least recently used goes"
        );
        assert_eq!(cache.get("t", "u", "s1").unwrap().0, 1);
        assert!(
            cache.get("t", "other", "s1").is_none(),
            "keys include the user"
        );
        cache.remove("t", "u", "s1");
        assert!(cache.get("t", "u", "s1").is_none());
    }

    #[test]
    fn expiry_is_detected() {
        let w = vec![m("a", 10)];
        assert!(!has_expired(&w, None));
        assert!(has_expired(&w, DateTime::from_timestamp(11, 0)));
        assert!(!has_expired(&w, DateTime::from_timestamp(9, 0)));
    }
}

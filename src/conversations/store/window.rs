//! The short-term window: a session's last messages, read in one round trip that returns only
//! the version when the cached window is still current.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::conversations::batch::NewMessage;
use crate::db::Scoped;

/// A message of the short-term window, as cached.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowMessage {
    pub id: String,
    pub sender: String,
    pub text: String,
    pub sent_at: DateTime<Utc>,
    pub archived_at: DateTime<Utc>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
}

impl WindowMessage {
    pub fn from_new(message: &NewMessage, archived_at: DateTime<Utc>) -> Self {
        WindowMessage {
            id: message.id.clone(),
            sender: message.sender.into(),
            text: message.text.clone(),
            sent_at: message.sent_at,
            archived_at,
            tool_calls: message.tool_calls.clone(),
            tool_call_id: message.tool_call_id.clone(),
        }
    }
}

/// Expands to `$then!("...")` with the text of [`WINDOW_SQL`] (see
/// [`ARCHIVE_SQL`](super::ARCHIVE_SQL)).
macro_rules! window_sql {
    ($then:ident) => {
        $then!(
            r#"SELECT s.version, m.message_id AS "message_id?", m.sender AS "sender?",
       m.text AS "text?", m.sent_at AS "sent_at?", m.seq AS "seq?", m.archived_at AS "archived_at?",
       m.tool_calls, m.tool_call_id
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT c.message_id, c.sender, c.text, c.sent_at, c.seq, c.archived_at, c.tool_calls,
           c.tool_call_id
    FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id
      AND s.version IS DISTINCT FROM $4::bigint
      AND ($3::int IS NULL OR c.archived_at >= now() - make_interval(days => $3::int))
    ORDER BY c.sent_at DESC, c.seq DESC
    LIMIT $2
) m ON true
WHERE s.session_id = $1"#
        )
    };
}

/// The short-term window read: the session's version, and (only when it differs from `cached`)
/// its last `limit` unexpired messages. One round trip. The version test is inside the lookup,
/// where it depends on the session row alone: PostgreSQL tests it once, before the scan, so an
/// unchanged window reads no message (as a join condition it was tested after the lookup had
/// read the whole window). The lookup reads the messages newest first and the statement does not
/// sort them again: [`window`] puts them oldest first.
pub const WINDOW_SQL: &str = window_sql!(concat);

/// A row of [`WINDOW_SQL`]: the session's version, with a message, or with NULLs when the window
/// is not read (or empty).
struct WindowRow {
    version: i64,
    message_id: Option<String>,
    sender: Option<String>,
    text: Option<String>,
    sent_at: Option<DateTime<Utc>>,
    seq: Option<i64>,
    archived_at: Option<DateTime<Utc>>,
    tool_calls: Option<Value>,
    tool_call_id: Option<String>,
}

/// What [`window`] found.
#[derive(Debug, Clone)]
pub enum WindowRead {
    /// No such session (yet).
    NoSession,
    /// The session still has the cached version: the cached window is current.
    Unchanged,
    /// The current window, oldest first, and the version it belongs to.
    Fresh(i64, Vec<WindowMessage>),
}

pub async fn window(
    conn: &mut Scoped,
    session_id: &str,
    limit: i64,
    retention_days: Option<i32>,
    cached_version: Option<i64>,
) -> Result<WindowRead, sqlx::Error> {
    macro_rules! window {
        ($sql:literal) => {
            sqlx::query_as!(
                WindowRow,
                $sql,
                session_id,
                limit,
                retention_days,
                cached_version
            )
        };
    }
    let mut rows = window_sql!(window).fetch_all(&mut *conn).await?;
    let Some(first) = rows.first() else {
        return Ok(WindowRead::NoSession);
    };
    let version = first.version;
    if Some(version) == cached_version {
        return Ok(WindowRead::Unchanged);
    }
    rows.sort_by_key(|r| (r.sent_at, r.seq));
    let messages = rows
        .into_iter()
        .filter_map(|r| {
            Some(WindowMessage {
                id: r.message_id?,
                sender: r.sender?,
                text: r.text?,
                sent_at: r.sent_at?,
                archived_at: r.archived_at?,
                tool_calls: r.tool_calls,
                tool_call_id: r.tool_call_id,
            })
        })
        .collect();
    Ok(WindowRead::Fresh(version, messages))
}

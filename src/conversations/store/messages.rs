//! A page of a session's messages in either order, keyset-paged, with the session's existence
//! answered by the same statement.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::access::Caller;
use crate::conversations::model::{Order, StoredMessage};

/// A page row: a message, or all NULL for a session without messages on the page.
struct MessageRow {
    message_id: Option<String>,
    sender: Option<String>,
    text: Option<String>,
    sent_at: Option<DateTime<Utc>>,
    archived_at: Option<DateTime<Utc>>,
    tool_calls: Option<Value>,
    tool_call_id: Option<String>,
    seq: Option<i64>,
    edited_at: Option<DateTime<Utc>>,
}

/// The statements `mnemo_read_messages` runs for a page, oldest or newest first, the first page
/// or the page after a keyset cursor (the migration holds the same text; a test compares them).
/// They differ only in the sort direction and the cursor's comparison. `$1` retention days, `$2`
/// session, `$3`/`$4` the keyset cursor, `$5` limit; no row when the session does not exist (or
/// has expired), one row of NULLs when the page is empty.
///
/// Through the session row: the messages are then read by `(tenant, user, session)` along
/// `conversation_messages_by_time` in every plan. Filtered on `session_id` alone, a user whose
/// history grew since the last ANALYZE (estimated at one row) was read whole along the seq
/// index instead: 14 ms for a page of a user with 35,000 messages, instead of 0.1 ms.
///
/// The lookup returns the page in its order and the statement does not sort it again (a sort
/// set up and run on every call); [`messages`] orders the rows it gets.
///
/// One statement per case, so that the plan PostgreSQL keeps for it, which knows no parameter
/// value, is the right one: with the cursor an index condition of the page after it, the scan
/// starts at the cursor however deep it is; the first page has no cursor to compare (its
/// statement checks that none was given, once). The function runs them with generic plans only:
/// left to choose, PostgreSQL planned the page anew for every call once the table's statistics
/// made its generic cost estimate look high, at 2.5 times the CPU of a call.
pub fn messages_sql(order: Order, after_cursor: bool) -> &'static str {
    match (order, after_cursor) {
        (Order::Asc, false) => OLDEST_FIRST_SQL,
        (Order::Asc, true) => OLDEST_FIRST_AFTER_SQL,
        (Order::Desc, false) => NEWEST_FIRST_SQL,
        (Order::Desc, true) => NEWEST_FIRST_AFTER_SQL,
    }
}

/// A page statement: `$cursor` is its condition on the cursor, `$dir` its sort direction.
macro_rules! page_sql {
    ($cursor:literal, $dir:literal) => {
        concat!(
            "SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
       c.tool_call_id, c.seq, c.edited_at
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT * FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
      AND c.session_id = s.session_id
      AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
      AND ",
            $cursor,
            "
    ORDER BY c.sent_at ",
            $dir,
            ", c.seq ",
            $dir,
            "
    LIMIT $5
) c ON true
WHERE s.session_id = $2
  AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))"
        )
    };
}

const OLDEST_FIRST_SQL: &str = page_sql!("($3::timestamptz, $4::int8) IS NULL", "ASC");
const OLDEST_FIRST_AFTER_SQL: &str = page_sql!("(c.sent_at, c.seq) > ($3, $4)", "ASC");
const NEWEST_FIRST_SQL: &str = page_sql!("($3::timestamptz, $4::int8) IS NULL", "DESC");
const NEWEST_FIRST_AFTER_SQL: &str = page_sql!("(c.sent_at, c.seq) < ($3, $4)", "DESC");

/// A session's unexpired messages in `order`; keyset cursor `(sent_at, seq)`. Returns the rows with
/// their `seq` (for the next cursor); `None` when the session does not exist (or has expired).
pub async fn messages(
    caller: &Caller,
    retention_days: Option<i32>,
    session_id: &str,
    order: Order,
    after: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Option<Vec<(StoredMessage, i64)>>, sqlx::Error> {
    let (at, seq) = after.unzip();
    let mut rows = caller
        .read_call(|tenant, user| {
            sqlx::query_as!(
                MessageRow,
                "SELECT message_id, sender, text, sent_at, archived_at, tool_calls, tool_call_id,
                        seq, edited_at
                 FROM mnemo_read_messages($1, $2, $3, $4, $5, $6, $7, $8)",
                retention_days,
                session_id,
                at,
                seq,
                limit,
                order == Order::Desc,
                tenant,
                user
            )
        })
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    match order {
        Order::Asc => rows.sort_by_key(|r| (r.sent_at, r.seq)),
        Order::Desc => rows.sort_by_key(|r| std::cmp::Reverse((r.sent_at, r.seq))),
    }
    Ok(Some(
        rows.into_iter()
            .filter_map(|r| {
                Some((
                    StoredMessage {
                        id: r.message_id?,
                        sender: r.sender?,
                        text: r.text?,
                        timestamp: r.sent_at?,
                        archived_at: r.archived_at?,
                        edited_at: r.edited_at,
                        tool_calls: r.tool_calls,
                        tool_call_id: r.tool_call_id,
                    },
                    r.seq?,
                ))
            })
            .collect(),
    ))
}

//! SQL of the conversation domain. Every function runs inside the caller's [`crate::db::Scoped`]
//! transaction, so row-level security limits it to the caller's tenant and user.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::batch::{Batch, NewMessage};
use super::model::{Order, Session, StoredMessage};
use crate::db::Scoped;

/// Expands to `$then!("...")` with the text of [`ARCHIVE_SQL`]. sqlx's macros take a string
/// literal only, not a constant, so the checked query in [`archive`] and the constant (which the
/// benchmark's `EXPLAIN` reads) are both made from this one literal. The other statements of this
/// module that have a public text are written the same way.
macro_rules! archive_sql {
    ($then:ident) => {
        $then!(
            r#"WITH session AS (
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name)
    VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2)
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1
    RETURNING s.version, s.message_count, s.summary_message_count
), incoming AS (
    SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[],
                         $8::text[], $14::timestamptz[])
         WITH ORDINALITY AS m(id, sender, text, sent_at, tool_calls, tool_call_id, edited_at, ord)
), upserted AS (
    -- One upsert through the primary key: each message of the batch is looked up by its id,
    -- however long the session; a stored one is updated only when its content differs and the
    -- stored state is not newer (`edited_at`). `xmax = 0` marks the rows this statement inserted.
    INSERT INTO conversation_messages AS c
        (tenant_id, user_id, session_id, message_id, sender, text, sent_at, tool_calls,
         tool_call_id, edited_at)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1,
           m.id, m.sender, m.text, m.sent_at, m.tool_calls, m.tool_call_id, m.edited_at
    FROM incoming m
    ORDER BY m.ord
    ON CONFLICT (tenant_id, user_id, session_id, message_id) DO UPDATE
    SET sender = EXCLUDED.sender, text = EXCLUDED.text, tool_calls = EXCLUDED.tool_calls,
        tool_call_id = EXCLUDED.tool_call_id, edited_at = EXCLUDED.edited_at
    WHERE (c.sender, c.text, c.tool_calls, c.tool_call_id)
          IS DISTINCT FROM (EXCLUDED.sender, EXCLUDED.text, EXCLUDED.tool_calls, EXCLUDED.tool_call_id)
      AND (c.edited_at IS NULL OR EXCLUDED.edited_at >= c.edited_at)
    RETURNING c.message_id, c.seq, c.archived_at, c.sender, c.text, c.sent_at, c.xmax = 0 AS fresh
), inserted AS (
    SELECT message_id, seq, archived_at, sender, text FROM upserted WHERE fresh
), updated AS (
    SELECT message_id, seq, sent_at FROM upserted WHERE NOT fresh
), removed AS (
    DELETE FROM conversation_messages c
    USING unnest($15::text[], $16::timestamptz[]) AS d(id, edited_at)
    -- Only when the batch deletes something (see `updated`).
    WHERE cardinality($15::text[]) > 0
      AND c.tenant_id = current_setting('mnemo.tenant') AND c.user_id = current_setting('mnemo.user')
      AND c.session_id = $1 AND c.message_id = d.id
      AND (c.edited_at IS NULL OR d.edited_at IS NULL OR d.edited_at >= c.edited_at)
    RETURNING c.message_id, c.seq, c.sent_at
), queued AS (
    INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'message', $1, q.id
    FROM (
        SELECT i.message_id AS id FROM inserted i WHERE i.sender IN ('user', 'ai') AND i.text <> ''
        UNION
        SELECT u.message_id FROM updated u
        UNION
        SELECT n.message_id
        FROM (SELECT sent_at, seq FROM updated UNION ALL SELECT sent_at, seq FROM removed) ch
        JOIN LATERAL (
            SELECT p.message_id FROM conversation_messages p
            WHERE p.tenant_id = current_setting('mnemo.tenant')
              AND p.user_id = current_setting('mnemo.user') AND p.session_id = $1
              AND (p.sent_at, p.seq) > (ch.sent_at, ch.seq)
              AND p.sender IN ('user', 'ai') AND p.text <> ''
            ORDER BY p.sent_at, p.seq LIMIT 1
        ) n ON true
    ) q
    WHERE $13
), counts AS (
    SELECT (SELECT count(*) FROM inserted)::int AS new,
           (SELECT count(*) FROM updated)::int AS updated,
           (SELECT count(*) FROM removed)::int AS deleted
), batch AS (
    INSERT INTO recent_conversation_history
        (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
         message_count, new_count, duplicate_count, updated_count, deleted_count)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $9, $1, $10, $11,
           $12, n.new, $12 - n.new - n.updated - n.deleted, n.updated, n.deleted
    FROM counts n
)
SELECT (SELECT version FROM session) AS "version!",
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM inserted), '{}') AS "new_ids!",
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM updated), '{}') AS "updated_ids!",
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM removed), '{}') AS "deleted_ids!",
       (SELECT max(archived_at) FROM inserted) AS archived_at,
       (SELECT message_count FROM session) + (SELECT count(*) FROM inserted)::int
           AS "message_count!",
       (SELECT summary_message_count FROM session) AS "summary_covers!""#
        )
    };
}

/// The archive of one batch, in one statement: the session is created on first sight (or its
/// activity time and version bumped); the messages go in with one multi-row
/// `INSERT ... ON CONFLICT DO UPDATE` through the primary key, so the cost is the batch's, never
/// the session's length: a new message is inserted, a stored one sent with other content is
/// updated in place (keeping its `seq` and time) unless the stored state is newer (see
/// [`super::model::IncomingMessage::edited_at`]), one sent as stored changes nothing; deletions
/// delete (their vectors go by cascade); and the batch is recorded in
/// `recent_conversation_history`. The upsert and the delete test the stored row itself, so a
/// concurrent archive of the same message is re-checked, not overwritten blindly.
///
/// With an embedder, new and updated messages are queued for the indexer (which replaces a
/// message's vectors, and drops them when it has no text left), and so is the message after each
/// updated or deleted one: its context vector was made with the old text.
pub const ARCHIVE_SQL: &str = archive_sql!(concat);

/// What an archive did.
#[derive(Debug, Clone)]
pub struct Archived {
    pub batch_id: Uuid,
    /// The session's version after this archive.
    pub version: i64,
    /// Ids of the messages this batch stored, in session order.
    pub new_ids: Vec<String>,
    /// Ids of the stored messages this batch changed.
    pub updated_ids: Vec<String>,
    /// Ids of the stored messages this batch deleted.
    pub deleted_ids: Vec<String>,
    pub archived_at: DateTime<Utc>,
    /// Messages of the batch that changed nothing.
    pub duplicates: i64,
    /// The session's messages after this archive, and how many of them its running summary
    /// covers: whether a summary refresh is due, known without another read.
    pub message_count: i32,
    pub summary_covers: i32,
}

impl Archived {
    pub fn new_count(&self) -> i64 {
        i64::try_from(self.new_ids.len()).unwrap_or(i64::MAX)
    }

    pub fn updated_count(&self) -> i64 {
        i64::try_from(self.updated_ids.len()).unwrap_or(i64::MAX)
    }

    pub fn deleted_count(&self) -> i64 {
        i64::try_from(self.deleted_ids.len()).unwrap_or(i64::MAX)
    }
}

/// The answer of [`ARCHIVE_SQL`].
struct ArchiveRow {
    version: i64,
    new_ids: Vec<String>,
    updated_ids: Vec<String>,
    deleted_ids: Vec<String>,
    /// `None` when the batch stored no message.
    archived_at: Option<DateTime<Utc>>,
    message_count: i32,
    summary_covers: i32,
}

/// Archives `batch` into `session_id` (see [`ARCHIVE_SQL`]).
pub async fn archive(
    conn: &mut Scoped,
    session_id: &str,
    agent: &str,
    batch: &Batch,
) -> Result<Archived, sqlx::Error> {
    let embed = conn.queues_embeddings();
    let messages = &batch.messages;
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let senders: Vec<&str> = messages.iter().map(|m| m.sender).collect();
    let texts: Vec<&str> = messages.iter().map(|m| m.text.as_str()).collect();
    let times: Vec<DateTime<Utc>> = messages.iter().map(|m| m.sent_at).collect();
    let calls: Vec<Option<Value>> = messages.iter().map(|m| m.tool_calls.clone()).collect();
    let call_ids: Vec<Option<&str>> = messages.iter().map(|m| m.tool_call_id.as_deref()).collect();
    let edited: Vec<Option<DateTime<Utc>>> = messages.iter().map(|m| m.edited_at).collect();
    let gone_ids: Vec<&str> = batch.deletions.iter().map(|d| d.id.as_str()).collect();
    let gone_edited: Vec<Option<DateTime<Utc>>> =
        batch.deletions.iter().map(|d| d.edited_at).collect();
    let span = batch.span();
    let received = i32::try_from(batch.received()).unwrap_or(i32::MAX);
    let batch_id = Uuid::now_v7();
    macro_rules! archive {
        ($sql:literal) => {
            sqlx::query_as!(
                ArchiveRow,
                $sql,
                session_id,
                agent,
                // The macro expects arrays of owned, non-null elements (`&[String]` and the
                // like); `as` states these arrays' own types, which encode the same.
                &ids as &[&str],
                &senders as &[&str],
                &texts as &[&str],
                &times,
                &calls as &[Option<Value>],
                &call_ids as &[Option<&str>],
                batch_id,
                span.map(|s| s.0),
                span.map(|s| s.1),
                received,
                embed,
                &edited as &[Option<DateTime<Utc>>],
                &gone_ids as &[&str],
                &gone_edited as &[Option<DateTime<Utc>>]
            )
        };
    }
    let ArchiveRow {
        version,
        new_ids,
        updated_ids,
        deleted_ids,
        archived_at,
        message_count,
        summary_covers,
    } = archive_sql!(archive).fetch_one(&mut *conn).await?;
    if !embed {
        forget_vectors(conn, session_id, &updated_ids).await?;
    }
    let changed = new_ids.len() + updated_ids.len() + deleted_ids.len();
    let duplicates = i64::from(received) - i64::try_from(changed).unwrap_or(0);
    Ok(Archived {
        batch_id,
        version,
        new_ids,
        updated_ids,
        deleted_ids,
        archived_at: archived_at.unwrap_or_else(Utc::now),
        duplicates,
        message_count,
        summary_covers,
    })
}

/// Without an embedder nothing re-embeds an updated message, so vectors a former embedder made
/// of its old text are deleted here (the backfill of a later embedder then queues it again).
/// Deleted messages lose theirs by cascade.
async fn forget_vectors(
    conn: &mut Scoped,
    session_id: &str,
    message_ids: &[String],
) -> Result<(), sqlx::Error> {
    if message_ids.is_empty() {
        return Ok(());
    }
    let exists =
        sqlx::query_scalar!(r#"SELECT to_regclass('message_vectors') IS NOT NULL AS "exists!""#)
            .fetch_one(&mut *conn)
            .await?;
    if exists {
        sqlx::query!(
            "DELETE FROM message_vectors WHERE session_id = $1 AND message_id = ANY($2)",
            session_id,
            message_ids
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

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

/// Expands to `$then!("...")` with the text of [`WINDOW_SQL`] (see [`ARCHIVE_SQL`]).
macro_rules! window_sql {
    ($then:ident) => {
        $then!(
            r#"SELECT s.version, m.message_id AS "message_id?", m.sender AS "sender?",
       m.text AS "text?", m.sent_at AS "sent_at?", m.archived_at AS "archived_at?", m.tool_calls,
       m.tool_call_id
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT c.message_id, c.sender, c.text, c.sent_at, c.seq, c.archived_at, c.tool_calls,
           c.tool_call_id
    FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id
      AND ($3::int IS NULL OR c.archived_at >= now() - make_interval(days => $3::int))
    ORDER BY c.sent_at DESC, c.seq DESC
    LIMIT $2
) m ON s.version IS DISTINCT FROM $4::bigint
WHERE s.session_id = $1
ORDER BY m.sent_at, m.seq"#
        )
    };
}

/// The short-term window read: the session's version, and (only when it differs from `cached`)
/// its last `limit` unexpired messages, newest first. One round trip.
pub const WINDOW_SQL: &str = window_sql!(concat);

/// A row of [`WINDOW_SQL`]: the session's version, with a message, or with NULLs when the window
/// is not read (or empty).
struct WindowRow {
    version: i64,
    message_id: Option<String>,
    sender: Option<String>,
    text: Option<String>,
    sent_at: Option<DateTime<Utc>>,
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
    let rows = window_sql!(window).fetch_all(&mut *conn).await?;
    let Some(first) = rows.first() else {
        return Ok(WindowRead::NoSession);
    };
    let version = first.version;
    if Some(version) == cached_version {
        return Ok(WindowRead::Unchanged);
    }
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

/// A session as stored.
struct SessionRow {
    session_id: String,
    agent_name: String,
    created_at: DateTime<Utc>,
    last_activity_at: DateTime<Utc>,
    summary: Option<String>,
    message_count: i32,
    summary_message_count: i32,
    summary_updated_at: Option<DateTime<Utc>>,
}

impl From<SessionRow> for Session {
    fn from(r: SessionRow) -> Self {
        Session {
            session_id: r.session_id,
            agent_id: r.agent_name,
            created_at: r.created_at,
            last_activity_at: r.last_activity_at,
            summary: r.summary,
            message_count: r.message_count,
            summary_message_count: r.summary_message_count,
            summary_updated_at: r.summary_updated_at,
        }
    }
}

/// Expands to `$then!("...")` with the text of [`sessions_sql`] (see [`ARCHIVE_SQL`]).
macro_rules! sessions_sql {
    ($then:ident) => {
        $then!(
            "SELECT session_id, agent_name, created_at, last_activity_at, summary, message_count,
                summary_message_count, summary_updated_at
         FROM agent_sessions
         WHERE ($1::int IS NULL OR last_activity_at >= now() - make_interval(days => $1::int))
           AND ($2::text IS NULL OR agent_name = $2)
           AND ($3::timestamptz IS NULL OR (last_activity_at, session_id) < ($3, $4))
         ORDER BY last_activity_at DESC, session_id DESC
         LIMIT $5"
        )
    };
}

/// The session list: `$1` retention days, `$2` agent, `$3`/`$4` the keyset cursor, `$5` limit.
pub fn sessions_sql() -> String {
    sessions_sql!(concat).to_owned()
}

/// Sessions, most recently active first; keyset cursor `(last_activity_at, session_id)`.
pub async fn sessions(
    conn: &mut Scoped,
    retention_days: Option<i32>,
    agent: Option<&str>,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<Session>, sqlx::Error> {
    let (at, id) = after.unzip();
    macro_rules! sessions {
        ($sql:literal) => {
            sqlx::query_as!(SessionRow, $sql, retention_days, agent, at, id, limit)
        };
    }
    let rows = sessions_sql!(sessions).fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(Session::from).collect())
}

/// One session of the caller, unless it has expired.
pub async fn session(
    conn: &mut Scoped,
    retention_days: Option<i32>,
    session_id: &str,
) -> Result<Option<Session>, sqlx::Error> {
    let row = sqlx::query_as!(
        SessionRow,
        "SELECT session_id, agent_name, created_at, last_activity_at, summary, message_count,
                summary_message_count, summary_updated_at
         FROM agent_sessions
         WHERE session_id = $2
           AND ($1::int IS NULL OR last_activity_at >= now() - make_interval(days => $1::int))",
        retention_days,
        session_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(Session::from))
}

/// Where a session's running summary stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryState {
    pub summary: Option<String>,
    /// Messages ever archived into the session.
    pub message_count: i32,
    /// How many of them the summary covers.
    pub covers: i32,
}

struct SummaryRow {
    summary: Option<String>,
    message_count: i32,
    summary_message_count: i32,
}

pub async fn summary_state(
    conn: &mut Scoped,
    session_id: &str,
) -> Result<Option<SummaryState>, sqlx::Error> {
    let row = sqlx::query_as!(
        SummaryRow,
        "SELECT summary, message_count, summary_message_count FROM agent_sessions
         WHERE session_id = $1",
        session_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| SummaryState {
        summary: r.summary,
        message_count: r.message_count,
        covers: r.summary_message_count,
    }))
}

struct LastMessageRow {
    sender: String,
    text: String,
}

/// A session's last `limit` unexpired messages as (sender, text), oldest first.
pub async fn last_messages(
    conn: &mut Scoped,
    retention_days: Option<i32>,
    session_id: &str,
    limit: i64,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = sqlx::query_as!(
        LastMessageRow,
        "SELECT m.sender, m.text FROM agent_sessions s
         CROSS JOIN LATERAL (
             -- Through the session row, as `messages_sql` explains.
             SELECT c.sender, c.text, c.sent_at, c.seq FROM conversation_messages c
             WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
               AND c.session_id = s.session_id
               AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
             ORDER BY c.sent_at DESC, c.seq DESC LIMIT $3
         ) m
         WHERE s.session_id = $2
         ORDER BY m.sent_at, m.seq",
        retention_days,
        session_id,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.sender, r.text)).collect())
}

/// Stores a running summary covering the first `covers` messages, unless one covering as many
/// or more is stored already (a slower refresh never overwrites a newer one). True when stored.
pub async fn set_summary(
    conn: &mut Scoped,
    session_id: &str,
    summary: &str,
    covers: i32,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE agent_sessions
         SET summary = $2, summary_message_count = $3, summary_updated_at = now()
         WHERE session_id = $1 AND summary_message_count < $3",
        session_id,
        summary,
        covers
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

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

/// Expands to `$then!("...")` with the text of [`messages_sql`] for `Asc` or `Desc` (see
/// [`ARCHIVE_SQL`]). The two differ only in the cursor's comparison and the sort direction.
///
/// Through the session row: the messages are then read by `(tenant, user, session)` along
/// `conversation_messages_by_time` in every plan. Filtered on `session_id` alone, a user whose
/// history grew since the last ANALYZE (estimated at one row) was read whole along the seq
/// index instead: 14 ms for a page of a user with 35,000 messages, instead of 0.1 ms.
macro_rules! messages_sql {
    (Asc, $then:ident) => {
        $then!(
            r#"SELECT c.message_id AS "message_id?", c.sender AS "sender?", c.text AS "text?",
                c.sent_at AS "sent_at?", c.archived_at AS "archived_at?", c.tool_calls,
                c.tool_call_id, c.seq AS "seq?", c.edited_at
         FROM agent_sessions s
         LEFT JOIN LATERAL (
             SELECT * FROM conversation_messages c
             WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
               AND c.session_id = s.session_id
               AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
               AND ($3::timestamptz IS NULL OR (c.sent_at, c.seq) > ($3, $4))
             ORDER BY c.sent_at ASC, c.seq ASC
             LIMIT $5
         ) c ON true
         WHERE s.session_id = $2
           AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
         ORDER BY c.sent_at ASC, c.seq ASC"#
        )
    };
    (Desc, $then:ident) => {
        $then!(
            r#"SELECT c.message_id AS "message_id?", c.sender AS "sender?", c.text AS "text?",
                c.sent_at AS "sent_at?", c.archived_at AS "archived_at?", c.tool_calls,
                c.tool_call_id, c.seq AS "seq?", c.edited_at
         FROM agent_sessions s
         LEFT JOIN LATERAL (
             SELECT * FROM conversation_messages c
             WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
               AND c.session_id = s.session_id
               AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
               AND ($3::timestamptz IS NULL OR (c.sent_at, c.seq) < ($3, $4))
             ORDER BY c.sent_at DESC, c.seq DESC
             LIMIT $5
         ) c ON true
         WHERE s.session_id = $2
           AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
         ORDER BY c.sent_at DESC, c.seq DESC"#
        )
    };
}

/// A page of a session's messages, and whether the session exists, in one statement: no row
/// when the session does not exist (or has expired), one row of NULLs when the page is empty.
/// `$1` retention days, `$2` session, `$3`/`$4` the keyset cursor, `$5` limit.
pub fn messages_sql(order: Order) -> String {
    match order {
        Order::Asc => messages_sql!(Asc, concat),
        Order::Desc => messages_sql!(Desc, concat),
    }
    .to_owned()
}

/// A session's unexpired messages in `order`; keyset cursor `(sent_at, seq)`. Returns the rows with
/// their `seq` (for the next cursor); `None` when the session does not exist (or has expired).
pub async fn messages(
    conn: &mut Scoped,
    retention_days: Option<i32>,
    session_id: &str,
    order: Order,
    after: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Option<Vec<(StoredMessage, i64)>>, sqlx::Error> {
    let (at, seq) = after.unzip();
    macro_rules! page {
        ($sql:literal) => {
            sqlx::query_as!(MessageRow, $sql, retention_days, session_id, at, seq, limit)
                .fetch_all(&mut *conn)
                .await?
        };
    }
    let rows = match order {
        Order::Asc => messages_sql!(Asc, page),
        Order::Desc => messages_sql!(Desc, page),
    };
    if rows.is_empty() {
        return Ok(None);
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

/// Deletes a session; its messages and batch records go with it (ON DELETE CASCADE).
pub async fn delete_session(conn: &mut Scoped, session_id: &str) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "DELETE FROM agent_sessions WHERE session_id = $1",
        session_id
    )
    .execute(&mut *conn)
    .await?;
    Ok(result.rows_affected() > 0)
}

//! SQL of the conversation domain. Every function runs as the caller, inside its
//! [`crate::db::Scoped`] transaction or as one call of a function that acts as the caller first
//! (see [`crate::access::Caller::read_call`]), so row-level security limits it to the caller's
//! tenant and user.

mod messages;
mod sessions;
mod window;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::batch::Batch;
use crate::access::Target;
use crate::db::Scoped;

pub use messages::{messages, messages_sql};
pub use sessions::{
    SummaryDue, SummaryMessage, SummaryState, delete_session, session, sessions, sessions_sql,
    store_summary, summary_due, summary_state,
};
pub use window::{WINDOW_SQL, WindowMessage, WindowRead, window};

/// The archive statement `mnemo_write_archive` runs, with the function's parameters `$1`..`$16`
/// (the migration holds the same text; a test compares them, and the benchmark's `EXPLAIN` reads
/// this one). See [`archive_group`].
pub const ARCHIVE_SQL: &str = r#"WITH incoming AS (
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
), session AS (
    -- The session's one row change: created, or its version and activity moved on, and
    -- its count of messages ever archived raised by the new ones (the messages' foreign
    -- key is checked when the statement ends, by which time the session exists).
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name, message_count)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, count(*)::int
    FROM inserted
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1,
                  message_count = s.message_count + EXCLUDED.message_count
    RETURNING s.version, s.message_count, s.summary_message_count
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
       (SELECT message_count FROM session) AS "message_count!",
       (SELECT summary_message_count FROM session) AS "summary_covers!""#;

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

/// The arguments of `mnemo_write_archives` for a group of archives, as column arrays: per
/// archive its session, agent, batch id, span and count, and where its messages and deletions
/// end in the message and deletion columns, which hold every archive's one after another.
struct GroupColumns<'a> {
    sessions: Vec<&'a str>,
    agents: Vec<&'a str>,
    batch_ids: Vec<Uuid>,
    starts: Vec<Option<DateTime<Utc>>>,
    ends: Vec<Option<DateTime<Utc>>>,
    received: Vec<i32>,
    message_ends: Vec<i32>,
    ids: Vec<&'a str>,
    senders: Vec<&'a str>,
    texts: Vec<&'a str>,
    times: Vec<DateTime<Utc>>,
    calls: Vec<Option<Value>>,
    call_ids: Vec<Option<&'a str>>,
    edited: Vec<Option<DateTime<Utc>>>,
    deletion_ends: Vec<i32>,
    gone_ids: Vec<&'a str>,
    gone_edited: Vec<Option<DateTime<Utc>>>,
}

impl<'a> GroupColumns<'a> {
    fn of(group: &[(&'a str, &'a str, &'a Batch)]) -> Self {
        let messages = || group.iter().flat_map(|(_, _, b)| &b.messages);
        let deletions = || group.iter().flat_map(|(_, _, b)| &b.deletions);
        let ends = |count: fn(&Batch) -> usize| {
            group
                .iter()
                .scan(0, |end, (_, _, b)| {
                    *end += count(b);
                    Some(i32::try_from(*end).unwrap_or(i32::MAX))
                })
                .collect()
        };
        GroupColumns {
            sessions: group.iter().map(|g| g.0).collect(),
            agents: group.iter().map(|g| g.1).collect(),
            batch_ids: group.iter().map(|_| Uuid::now_v7()).collect(),
            starts: group.iter().map(|g| g.2.span().map(|s| s.0)).collect(),
            ends: group.iter().map(|g| g.2.span().map(|s| s.1)).collect(),
            received: group
                .iter()
                .map(|g| i32::try_from(g.2.received()).unwrap_or(i32::MAX))
                .collect(),
            message_ends: ends(|b| b.messages.len()),
            ids: messages().map(|m| m.id.as_str()).collect(),
            senders: messages().map(|m| m.sender).collect(),
            texts: messages().map(|m| m.text.as_str()).collect(),
            times: messages().map(|m| m.sent_at).collect(),
            calls: messages().map(|m| m.tool_calls.clone()).collect(),
            call_ids: messages().map(|m| m.tool_call_id.as_deref()).collect(),
            edited: messages().map(|m| m.edited_at).collect(),
            deletion_ends: ends(|b| b.deletions.len()),
            gone_ids: deletions().map(|d| d.id.as_str()).collect(),
            gone_edited: deletions().map(|d| d.edited_at).collect(),
        }
    }

    /// Each archive's answer from its row, in the group's order.
    fn archived(&self, rows: Vec<ArchiveRow>) -> Result<Vec<Archived>, sqlx::Error> {
        if rows.len() != self.sessions.len() {
            return Err(sqlx::Error::Protocol(format!(
                "mnemo_write_archives answered {} rows for {} archives",
                rows.len(),
                self.sessions.len()
            )));
        }
        Ok(rows
            .into_iter()
            .enumerate()
            .map(|(i, row)| {
                let changed = row.new_ids.len() + row.updated_ids.len() + row.deleted_ids.len();
                Archived {
                    batch_id: self.batch_ids[i],
                    version: row.version,
                    duplicates: i64::from(self.received[i]) - i64::try_from(changed).unwrap_or(0),
                    new_ids: row.new_ids,
                    updated_ids: row.updated_ids,
                    deleted_ids: row.deleted_ids,
                    archived_at: row.archived_at.unwrap_or_else(Utc::now),
                    message_count: row.message_count,
                    summary_covers: row.summary_covers,
                }
            })
            .collect())
    }
}

/// Archives a group of batches, each `(session, agent, batch)`, in order: one call of
/// `mnemo_write_archives`. An archive alone, and a group in which a message appears twice or
/// something is deleted, it writes one at a time with [`ARCHIVE_SQL`] (through
/// `mnemo_write_archive`), each seeing the ones before it; any other group with one statement
/// that answers each archive as that would (a test compares them). In the caller's transaction
/// ([`Target::Tx`], with whatever else it writes; the function sets the transaction's scope
/// again, to the same user) or as its own transaction ([`Target::Call`]: one round trip for the
/// group). The answers come in the group's order.
///
/// Each archive: the session is created on first sight (or its activity time and version
/// bumped); the messages go in with one multi-row `INSERT ... ON CONFLICT DO UPDATE` through the
/// primary key, so the cost is the batch's, never the session's length: a new message is
/// inserted, a stored one sent with other content is updated in place (keeping its `seq` and
/// time) unless the stored state is newer (see [`super::model::IncomingMessage::edited_at`]),
/// one sent as stored changes nothing; deletions delete (their vectors go by cascade); and the
/// batch is recorded in `recent_conversation_history`. The upsert and the delete test the stored
/// row itself, so a concurrent archive of the same message is re-checked, not overwritten
/// blindly.
///
/// With an embedder, new and updated messages are queued for the indexer (which replaces a
/// message's vectors, and drops them when it has no text left), and so is the message after each
/// updated or deleted one: its context vector was made with the old text. Without one, nothing
/// re-embeds an updated message, so the function deletes the vectors a former embedder made of
/// its old text (a later embedder's backfill queues it again).
pub async fn archive_group(
    target: Target<'_>,
    group: &[(&str, &str, &Batch)],
) -> Result<Vec<Archived>, sqlx::Error> {
    let c = GroupColumns::of(group);
    // The call with its arguments; `$sql` names the function's last two, the tenant and user.
    macro_rules! write_archives {
        ($queue:expr, $sql:literal $(, $scope:expr)*) => {
            sqlx::query_as!(
                ArchiveRow,
                $sql,
                // The macro expects arrays of owned, non-null elements (`&[String]` and the
                // like); `as` states these arrays' own types, which encode the same.
                &c.sessions as &[&str],
                &c.agents as &[&str],
                &c.batch_ids,
                &c.starts as &[Option<DateTime<Utc>>],
                &c.ends as &[Option<DateTime<Utc>>],
                &c.received,
                &c.message_ends,
                &c.ids as &[&str],
                &c.senders as &[&str],
                &c.texts as &[&str],
                &c.times,
                &c.calls as &[Option<Value>],
                &c.call_ids as &[Option<&str>],
                &c.edited as &[Option<DateTime<Utc>>],
                &c.deletion_ends,
                &c.gone_ids as &[&str],
                &c.gone_edited as &[Option<DateTime<Utc>>],
                $queue
                $(, $scope)*
            )
        };
    }
    let rows = match target {
        Target::Call(caller) => {
            caller
                .write_call(|tenant, user| {
                    write_archives!(
                        caller.queues_embeddings(),
                        r#"SELECT version AS "version!", new_ids AS "new_ids!",
                                  updated_ids AS "updated_ids!", deleted_ids AS "deleted_ids!",
                                  archived_at, message_count AS "message_count!",
                                  summary_covers AS "summary_covers!"
                           FROM mnemo_write_archives($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                               $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"#,
                        tenant,
                        user
                    )
                })
                .await?
        }
        Target::Tx(conn) => {
            write_archives!(
                conn.queues_embeddings(),
                r#"SELECT version AS "version!", new_ids AS "new_ids!",
                          updated_ids AS "updated_ids!", deleted_ids AS "deleted_ids!",
                          archived_at, message_count AS "message_count!",
                          summary_covers AS "summary_covers!"
                   FROM mnemo_write_archives($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                       $13, $14, $15, $16, $17, $18, current_setting('mnemo.tenant'),
                       current_setting('mnemo.user'))"#
            )
            .fetch_all(&mut *conn)
            .await?
        }
    };
    c.archived(rows)
}

/// Archives `batch` into `session_id` in the caller's transaction (see [`archive_group`]).
pub async fn archive(
    conn: &mut Scoped,
    session_id: &str,
    agent: &str,
    batch: &Batch,
) -> Result<Archived, sqlx::Error> {
    let mut archived = archive_group(Target::Tx(conn), &[(session_id, agent, batch)]).await?;
    archived
        .pop()
        .ok_or_else(|| sqlx::Error::Protocol("mnemo_write_archives answered no row".into()))
}

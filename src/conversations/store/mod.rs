//! SQL of the conversation domain. Every function runs inside the caller's [`crate::db::Scoped`]
//! transaction, so row-level security limits it to the caller's tenant and user.

mod messages;
mod sessions;
mod window;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::batch::Batch;
use crate::access::Caller;
use crate::db::Scoped;

pub use messages::{messages, messages_sql};
pub use sessions::{
    SummaryMessage, SummaryState, delete_session, digest_state, last_messages, session, sessions,
    sessions_sql, set_summary, summary_state,
};
pub use window::{WINDOW_SQL, WindowMessage, WindowRead, window};

/// The archive statement `mnemo_write_archive` runs, with the function's parameters `$1`..`$16`
/// (the migration holds the same text; a test compares them, and the benchmark's `EXPLAIN` reads
/// this one). See [`archive`].
pub const ARCHIVE_SQL: &str = r#"WITH session AS (
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

/// The bind parameters of [`ARCHIVE_SQL`] made from a batch, as column arrays.
struct ArchiveArgs<'a> {
    ids: Vec<&'a str>,
    senders: Vec<&'a str>,
    texts: Vec<&'a str>,
    times: Vec<DateTime<Utc>>,
    calls: Vec<Option<Value>>,
    call_ids: Vec<Option<&'a str>>,
    edited: Vec<Option<DateTime<Utc>>>,
    gone_ids: Vec<&'a str>,
    gone_edited: Vec<Option<DateTime<Utc>>>,
    span: Option<(DateTime<Utc>, DateTime<Utc>)>,
    received: i32,
    batch_id: Uuid,
}

impl<'a> ArchiveArgs<'a> {
    fn of(batch: &'a Batch) -> Self {
        let messages = &batch.messages;
        ArchiveArgs {
            ids: messages.iter().map(|m| m.id.as_str()).collect(),
            senders: messages.iter().map(|m| m.sender).collect(),
            texts: messages.iter().map(|m| m.text.as_str()).collect(),
            times: messages.iter().map(|m| m.sent_at).collect(),
            calls: messages.iter().map(|m| m.tool_calls.clone()).collect(),
            call_ids: messages.iter().map(|m| m.tool_call_id.as_deref()).collect(),
            edited: messages.iter().map(|m| m.edited_at).collect(),
            gone_ids: batch.deletions.iter().map(|d| d.id.as_str()).collect(),
            gone_edited: batch.deletions.iter().map(|d| d.edited_at).collect(),
            span: batch.span(),
            received: i32::try_from(batch.received()).unwrap_or(i32::MAX),
            batch_id: Uuid::now_v7(),
        }
    }

    /// No messages, no deletions (the columns of a group are gathered into it).
    fn empty() -> Self {
        ArchiveArgs {
            ids: Vec::new(),
            senders: Vec::new(),
            texts: Vec::new(),
            times: Vec::new(),
            calls: Vec::new(),
            call_ids: Vec::new(),
            edited: Vec::new(),
            gone_ids: Vec::new(),
            gone_edited: Vec::new(),
            span: None,
            received: 0,
            batch_id: Uuid::nil(),
        }
    }

    fn archived(self, row: ArchiveRow) -> Archived {
        let ArchiveRow {
            version,
            new_ids,
            updated_ids,
            deleted_ids,
            archived_at,
            message_count,
            summary_covers,
        } = row;
        let changed = new_ids.len() + updated_ids.len() + deleted_ids.len();
        let duplicates = i64::from(self.received) - i64::try_from(changed).unwrap_or(0);
        Archived {
            batch_id: self.batch_id,
            version,
            new_ids,
            updated_ids,
            deleted_ids,
            archived_at: archived_at.unwrap_or_else(Utc::now),
            duplicates,
            message_count,
            summary_covers,
        }
    }
}

/// Archives that arrive together, each `(session, agent, batch)` in order, as `caller` in one
/// call of `mnemo_write_archives`: one transaction and one round trip for the group, each archive
/// the statement of [`archive`], seeing the ones before it. The answers come in the same order.
pub async fn archive_group_in_one_call(
    caller: &Caller,
    group: &[(&str, &str, &Batch)],
) -> Result<Vec<Archived>, sqlx::Error> {
    let mut args: Vec<ArchiveArgs> = group.iter().map(|(_, _, b)| ArchiveArgs::of(b)).collect();
    let sessions: Vec<&str> = group.iter().map(|g| g.0).collect();
    let agents: Vec<&str> = group.iter().map(|g| g.1).collect();
    let batches: Vec<Uuid> = args.iter().map(|a| a.batch_id).collect();
    let starts: Vec<Option<DateTime<Utc>>> = args.iter().map(|a| a.span.map(|s| s.0)).collect();
    let ends: Vec<Option<DateTime<Utc>>> = args.iter().map(|a| a.span.map(|s| s.1)).collect();
    let received: Vec<i32> = args.iter().map(|a| a.received).collect();
    // Each archive's messages and deletions, one after another, and where each archive's end.
    let mut all = ArchiveArgs::empty();
    let (mut message_ends, mut deletion_ends) = (Vec::new(), Vec::new());
    for a in &mut args {
        all.ids.append(&mut a.ids);
        all.senders.append(&mut a.senders);
        all.texts.append(&mut a.texts);
        all.times.append(&mut a.times);
        all.calls.append(&mut a.calls);
        all.call_ids.append(&mut a.call_ids);
        all.edited.append(&mut a.edited);
        all.gone_ids.append(&mut a.gone_ids);
        all.gone_edited.append(&mut a.gone_edited);
        message_ends.push(i32::try_from(all.ids.len()).unwrap_or(i32::MAX));
        deletion_ends.push(i32::try_from(all.gone_ids.len()).unwrap_or(i32::MAX));
    }
    let queue = caller.queues_embeddings();
    let rows = caller
        .write_call(|tenant, user| {
            sqlx::query_as!(
                ArchiveRow,
                r#"SELECT version AS "version!", new_ids AS "new_ids!",
                          updated_ids AS "updated_ids!", deleted_ids AS "deleted_ids!",
                          archived_at, message_count AS "message_count!",
                          summary_covers AS "summary_covers!"
                   FROM mnemo_write_archives($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                       $13, $14, $15, $16, $17, $18, $19, $20)"#,
                &sessions as &[&str],
                &agents as &[&str],
                &batches,
                &starts as &[Option<DateTime<Utc>>],
                &ends as &[Option<DateTime<Utc>>],
                &received,
                &message_ends,
                &all.ids as &[&str],
                &all.senders as &[&str],
                &all.texts as &[&str],
                &all.times,
                &all.calls as &[Option<Value>],
                &all.call_ids as &[Option<&str>],
                &all.edited as &[Option<DateTime<Utc>>],
                &deletion_ends,
                &all.gone_ids as &[&str],
                &all.gone_edited as &[Option<DateTime<Utc>>],
                queue,
                tenant,
                user
            )
        })
        .await?;
    if rows.len() != args.len() {
        return Err(sqlx::Error::Protocol(format!(
            "mnemo_write_archives answered {} rows for {} archives",
            rows.len(),
            args.len()
        )));
    }
    Ok(args
        .into_iter()
        .zip(rows)
        .map(|(a, row)| a.archived(row))
        .collect())
}

/// The call of `mnemo_write_archive` `$sql` with the arguments of `$a` (an [`ArchiveArgs`]);
/// `$sql` names the function's last two, the tenant and user, given as `$scope`.
macro_rules! write_archive {
    ($a:expr, $session:expr, $agent:expr, $queue:expr, $sql:literal $(, $scope:expr)*) => {
        sqlx::query_as!(
            ArchiveRow,
            $sql,
            $session,
            $agent,
            // The macro expects arrays of owned, non-null elements (`&[String]` and the
            // like); `as` states these arrays' own types, which encode the same.
            &$a.ids as &[&str],
            &$a.senders as &[&str],
            &$a.texts as &[&str],
            &$a.times,
            &$a.calls as &[Option<Value>],
            &$a.call_ids as &[Option<&str>],
            $a.batch_id,
            $a.span.map(|s| s.0),
            $a.span.map(|s| s.1),
            $a.received,
            $queue,
            &$a.edited as &[Option<DateTime<Utc>>],
            &$a.gone_ids as &[&str],
            &$a.gone_edited as &[Option<DateTime<Utc>>]
            $(, $scope)*
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
/// updated or deleted one: its context vector was made with the old text. Without one, nothing
/// re-embeds an updated message, so the function deletes the vectors a former embedder made of
/// its old text (a later embedder's backfill queues it again); deleted messages lose theirs by
/// cascade.
///
/// In the caller's transaction (with the other archives of a group), through the same function
/// as [`archive_in_one_call`], which sets the transaction's scope again, to the same user.
pub async fn archive(
    conn: &mut Scoped,
    session_id: &str,
    agent: &str,
    batch: &Batch,
) -> Result<Archived, sqlx::Error> {
    let a = ArchiveArgs::of(batch);
    let row = write_archive!(
        a,
        session_id,
        agent,
        conn.queues_embeddings(),
        r#"SELECT version AS "version!", new_ids AS "new_ids!",
                  updated_ids AS "updated_ids!", deleted_ids AS "deleted_ids!",
                  archived_at, message_count AS "message_count!",
                  summary_covers AS "summary_covers!"
           FROM mnemo_write_archive($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
               $15, $16, current_setting('mnemo.tenant'), current_setting('mnemo.user'))"#
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(a.archived(row))
}

/// Archives `batch` into `session_id` as `caller` in one call of `mnemo_write_archive`, its own
/// transaction (see [`archive`]): one round trip instead of five.
pub async fn archive_in_one_call(
    caller: &Caller,
    session_id: &str,
    agent: &str,
    batch: &Batch,
) -> Result<Archived, sqlx::Error> {
    let a = ArchiveArgs::of(batch);
    let rows = caller
        .write_call(|tenant, user| {
            write_archive!(
                a,
                session_id,
                agent,
                caller.queues_embeddings(),
                r#"SELECT version AS "version!", new_ids AS "new_ids!",
                          updated_ids AS "updated_ids!", deleted_ids AS "deleted_ids!",
                          archived_at, message_count AS "message_count!",
                          summary_covers AS "summary_covers!"
                   FROM mnemo_write_archive($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                       $13, $14, $15, $16, $17, $18)"#,
                tenant,
                user
            )
        })
        .await?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| sqlx::Error::Protocol("mnemo_write_archive answered no row".into()))?;
    Ok(a.archived(row))
}

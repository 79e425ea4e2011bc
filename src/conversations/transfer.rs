//! Conversation history in an account export: sessions, their messages (in the order they were
//! archived) and the archive batches, as records written back as they were by an import.
//!
//! A message's `seq` is an identity the database hands out, so it is not carried: an import
//! inserts messages in export order, which keeps their relative order.
//!
//! Fields added after the first exports (a message's `edited_at`, a session's summary counters,
//! a batch's update and deletion counts) default when absent, so older archives still import.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::batch::check_id;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    pub session_id: String,
    pub agent_name: String,
    pub summary: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    /// Messages ever archived into the session; absent: the messages the archive holds.
    #[serde(default)]
    pub message_count: Option<i32>,
    /// How many of them `summary` covers.
    #[serde(default)]
    pub summary_message_count: i32,
    #[serde(default)]
    pub summary_updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRecord {
    pub session_id: String,
    pub message_id: String,
    pub sender: String,
    pub text: String,
    pub sent_at: DateTime<Utc>,
    pub archived_at: DateTime<Utc>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
    /// The client's time of the stored state; null as first written.
    #[serde(default)]
    pub edited_at: Option<DateTime<Utc>>,
}

/// One archive batch (what arrived when).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRecord {
    pub id: Uuid,
    pub session_id: String,
    pub archived_at: DateTime<Utc>,
    pub start_timestamp: Option<DateTime<Utc>>,
    pub end_timestamp: Option<DateTime<Utc>>,
    pub message_count: i32,
    pub new_count: i32,
    pub duplicate_count: i32,
    #[serde(default)]
    pub updated_count: i32,
    #[serde(default)]
    pub deleted_count: i32,
}

/// The caller's sessions after `after`, at most `limit`.
pub async fn sessions_page(
    conn: &mut Scoped,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<SessionRecord>, sqlx::Error> {
    // `message_count` is optional in a record (older exports lack it); the column is not.
    sqlx::query_as!(
        SessionRecord,
        r#"SELECT session_id, agent_name, summary, version, created_at, last_activity_at,
                message_count AS "message_count?", summary_message_count, summary_updated_at
         FROM agent_sessions
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND ($1::text IS NULL OR session_id > $1)
         ORDER BY session_id LIMIT $2"#,
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

/// The caller's messages after position `after` (a `seq`), at most `limit`, with the position
/// of each.
pub async fn messages_page(
    conn: &mut Scoped,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, MessageRecord)>, sqlx::Error> {
    struct MessageRow {
        seq: i64,
        session_id: String,
        message_id: String,
        sender: String,
        text: String,
        sent_at: DateTime<Utc>,
        archived_at: DateTime<Utc>,
        tool_calls: Option<Value>,
        tool_call_id: Option<String>,
        edited_at: Option<DateTime<Utc>>,
    }
    let rows = sqlx::query_as!(
        MessageRow,
        "SELECT seq, session_id, message_id, sender, text, sent_at, archived_at, tool_calls,
                tool_call_id, edited_at
         FROM conversation_messages
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND seq > $1
         ORDER BY seq LIMIT $2",
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let record = MessageRecord {
                session_id: r.session_id,
                message_id: r.message_id,
                sender: r.sender,
                text: r.text,
                sent_at: r.sent_at,
                archived_at: r.archived_at,
                tool_calls: r.tool_calls,
                tool_call_id: r.tool_call_id,
                edited_at: r.edited_at,
            };
            (r.seq, record)
        })
        .collect())
}

/// The caller's archive batches after `after`, at most `limit`.
pub async fn batches_page(
    conn: &mut Scoped,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<BatchRecord>, sqlx::Error> {
    sqlx::query_as!(
        BatchRecord,
        "SELECT id, session_id, archived_at, start_timestamp, end_timestamp, message_count,
                new_count, duplicate_count, updated_count, deleted_count
         FROM recent_conversation_history
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND ($1::uuid IS NULL OR id > $1)
         ORDER BY id LIMIT $2",
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

/// An id exactly as a write would have stored it (checked, and not in need of trimming).
fn exact_id(field: &str, value: &str) -> ApiResult<()> {
    let checked = check_id(field, Some(value))?;
    if checked != value {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` starts or ends with whitespace"),
        ));
    }
    Ok(())
}

pub fn check_session(record: &SessionRecord) -> ApiResult<()> {
    exact_id("session_id", &record.session_id)?;
    exact_id("agent_name", &record.agent_name)?;
    if record.version < 1 {
        return Err(ApiError::invalid("version", "`version` must be at least 1"));
    }
    if record.message_count.is_some_and(|n| n < 0) || record.summary_message_count < 0 {
        return Err(ApiError::invalid(
            "message_count",
            "message counts must not be negative",
        ));
    }
    Ok(())
}

pub fn check_message(record: &MessageRecord) -> ApiResult<()> {
    exact_id("session_id", &record.session_id)?;
    exact_id("message_id", &record.message_id)?;
    if !matches!(record.sender.as_str(), "user" | "ai" | "tool") {
        return Err(ApiError::invalid(
            "sender",
            format!("`sender` {:?} is not user, ai or tool", record.sender),
        ));
    }
    Ok(())
}

pub fn check_batch(record: &BatchRecord) -> ApiResult<()> {
    exact_id("session_id", &record.session_id)?;
    if [
        record.message_count,
        record.new_count,
        record.duplicate_count,
        record.updated_count,
        record.deleted_count,
    ]
    .iter()
    .any(|n| *n < 0)
    {
        return Err(ApiError::invalid(
            "message_count",
            "batch counts must not be negative",
        ));
    }
    Ok(())
}

pub async fn restore_sessions(
    conn: &mut Scoped,
    records: &[SessionRecord],
) -> Result<(), sqlx::Error> {
    let ids: Vec<&str> = records.iter().map(|r| r.session_id.as_str()).collect();
    let agents: Vec<&str> = records.iter().map(|r| r.agent_name.as_str()).collect();
    let summaries: Vec<Option<&str>> = records.iter().map(|r| r.summary.as_deref()).collect();
    let versions: Vec<i64> = records.iter().map(|r| r.version).collect();
    let created: Vec<DateTime<Utc>> = records.iter().map(|r| r.created_at).collect();
    let active: Vec<DateTime<Utc>> = records.iter().map(|r| r.last_activity_at).collect();
    let covers: Vec<i32> = records.iter().map(|r| r.summary_message_count).collect();
    let summarized: Vec<Option<DateTime<Utc>>> =
        records.iter().map(|r| r.summary_updated_at).collect();
    // `message_count` starts at 0: `restore_messages` counts the messages restored next, and
    // `restore_message_counts` then sets the exported counts. (The macro expects arrays of owned,
    // non-null elements; `as` states the arrays' own types, which encode the same. So below.)
    sqlx::query!(
        "INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name, summary, version,
                                     created_at, last_activity_at, summary_message_count,
                                     summary_updated_at)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), s, a, m, v, c, l,
                k, u
         FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::timestamptz[],
                     $6::timestamptz[], $7::int4[], $8::timestamptz[])
              AS x(s, a, m, v, c, l, k, u)",
        &ids as &[&str],
        &agents as &[&str],
        &summaries as &[Option<&str>],
        &versions,
        &created,
        &active,
        &covers,
        &summarized as &[Option<DateTime<Utc>>]
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Sets the exported `message_count` of restored sessions (after their messages are restored,
/// which counted only the messages the archive holds); sessions without one keep that count.
pub async fn restore_message_counts(
    conn: &mut Scoped,
    counts: &[(String, i32)],
) -> Result<(), sqlx::Error> {
    if counts.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = counts.iter().map(|(id, _)| id.as_str()).collect();
    let values: Vec<i32> = counts.iter().map(|(_, n)| *n).collect();
    sqlx::query!(
        "UPDATE agent_sessions s SET message_count = x.n
         FROM unnest($1::text[], $2::int4[]) AS x(id, n)
         WHERE s.session_id = x.id",
        &ids as &[&str],
        &values
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes messages back in the given order, counting them into their sessions' `message_count`
/// as an archive does; when the transaction queues embeddings, user and AI messages with text are
/// queued for the embedder as an archive would queue them.
pub async fn restore_messages(
    conn: &mut Scoped,
    records: &[MessageRecord],
) -> Result<(), sqlx::Error> {
    let embed = conn.queues_embeddings();
    let sessions: Vec<&str> = records.iter().map(|r| r.session_id.as_str()).collect();
    let ids: Vec<&str> = records.iter().map(|r| r.message_id.as_str()).collect();
    let senders: Vec<&str> = records.iter().map(|r| r.sender.as_str()).collect();
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let sent: Vec<DateTime<Utc>> = records.iter().map(|r| r.sent_at).collect();
    let archived: Vec<DateTime<Utc>> = records.iter().map(|r| r.archived_at).collect();
    let calls: Vec<Option<Value>> = records.iter().map(|r| r.tool_calls.clone()).collect();
    let call_ids: Vec<Option<&str>> = records.iter().map(|r| r.tool_call_id.as_deref()).collect();
    let edited: Vec<Option<DateTime<Utc>>> = records.iter().map(|r| r.edited_at).collect();
    sqlx::query!(
        "WITH inserted AS (
             INSERT INTO conversation_messages
                 (tenant_id, user_id, session_id, message_id, sender, text, sent_at, archived_at,
                  tool_calls, tool_call_id, edited_at)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), s, i, f, t, a,
                    r, nullif(c, 'null'::jsonb), k, e
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],
                         $6::timestamptz[], $7::jsonb[], $8::text[], $10::timestamptz[])
                  WITH ORDINALITY AS x(s, i, f, t, a, r, c, k, e, n)
             ORDER BY n
             RETURNING tenant_id, user_id, session_id, message_id, sender, text
         ), counted AS (
             UPDATE agent_sessions s SET message_count = s.message_count + c.n
             FROM (SELECT session_id, count(*)::int AS n FROM inserted GROUP BY session_id) c
             WHERE s.tenant_id = current_setting('mnemo.tenant')
               AND s.user_id = current_setting('mnemo.user') AND s.session_id = c.session_id
         )
         INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
         SELECT tenant_id, user_id, 'message', session_id, message_id FROM inserted
         WHERE $9 AND sender IN ('user', 'ai') AND text <> ''",
        &sessions as &[&str],
        &ids as &[&str],
        &senders as &[&str],
        &texts as &[&str],
        &sent,
        &archived,
        &calls as &[Option<Value>],
        &call_ids as &[Option<&str>],
        embed,
        &edited as &[Option<DateTime<Utc>>]
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub async fn restore_batches(
    conn: &mut Scoped,
    records: &[BatchRecord],
) -> Result<(), sqlx::Error> {
    let ids: Vec<Uuid> = records.iter().map(|r| r.id).collect();
    let sessions: Vec<&str> = records.iter().map(|r| r.session_id.as_str()).collect();
    let archived: Vec<DateTime<Utc>> = records.iter().map(|r| r.archived_at).collect();
    let starts: Vec<Option<DateTime<Utc>>> = records.iter().map(|r| r.start_timestamp).collect();
    let ends: Vec<Option<DateTime<Utc>>> = records.iter().map(|r| r.end_timestamp).collect();
    let counts: Vec<i32> = records.iter().map(|r| r.message_count).collect();
    let new: Vec<i32> = records.iter().map(|r| r.new_count).collect();
    let dups: Vec<i32> = records.iter().map(|r| r.duplicate_count).collect();
    let updated: Vec<i32> = records.iter().map(|r| r.updated_count).collect();
    let deleted: Vec<i32> = records.iter().map(|r| r.deleted_count).collect();
    sqlx::query!(
        "INSERT INTO recent_conversation_history
             (tenant_id, user_id, id, session_id, archived_at, start_timestamp, end_timestamp,
              message_count, new_count, duplicate_count, updated_count, deleted_count)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), i, s, a, b, e, m,
                n, d, u, g
         FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                     $5::timestamptz[], $6::int4[], $7::int4[], $8::int4[], $9::int4[],
                     $10::int4[])
              AS x(i, s, a, b, e, m, n, d, u, g)",
        &ids,
        &sessions as &[&str],
        &archived,
        &starts as &[Option<DateTime<Utc>>],
        &ends as &[Option<DateTime<Utc>>],
        &counts,
        &new,
        &dups,
        &updated,
        &deleted
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

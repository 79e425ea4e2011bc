//! Sessions: the list and one session, the running summary's state, the messages a summary is
//! made from, the summary's store with its digest state, and a session's deletion.

use chrono::{DateTime, Utc};

use crate::access::Caller;
use crate::conversations::model::Session;
use crate::conversations::summary::DigestState;
use crate::db::Scoped;

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

/// Expands to `$then!("...")` with the text of [`sessions_sql`] (see
/// [`ARCHIVE_SQL`](super::ARCHIVE_SQL)).
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

/// A session's message as its running summary reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryMessage {
    pub sender: String,
    pub text: String,
    pub seq: i64,
}

/// What a refresh of a session's running summary reads ([`summary_due`]): where the summary
/// stands, the digest's state with the last message it folded, and the messages since.
#[derive(Debug)]
pub struct SummaryDue {
    pub state: SummaryState,
    /// The digest's state and the `seq` of the last message it folded, when one is stored.
    pub digest: Option<(i64, DigestState)>,
    /// The messages since, oldest first; empty when fewer than the refresh interval arrived.
    pub messages: Vec<SummaryMessage>,
}

struct SummaryDueRow {
    summary: Option<String>,
    message_count: i32,
    covers: i32,
    through_seq: Option<i64>,
    state: Option<sqlx::types::Json<DigestState>>,
    sender: Option<String>,
    text: Option<String>,
    seq: Option<i64>,
}

/// Where session `session_id`'s summary stands, in one call of `mnemo_read_summary_due`; and
/// when `every` or more messages arrived since it, the unexpired messages since: those after
/// the digest's last (at most as many as arrived since, and `max`), or without a digest the
/// session's last `max`. `None`: no such session. The messages are read newest first along the
/// session's time index, so a refresh reads the few new ones however long the session.
pub async fn summary_due(
    caller: &Caller,
    retention_days: Option<i32>,
    session_id: &str,
    every: i32,
    max: i64,
) -> Result<Option<SummaryDue>, sqlx::Error> {
    let mut rows = caller
        .read_call(|tenant, user| {
            sqlx::query_as!(
                SummaryDueRow,
                r#"SELECT summary, message_count AS "message_count!", covers AS "covers!",
                          through_seq, state AS "state: sqlx::types::Json<DigestState>",
                          sender, text, seq
                   FROM mnemo_read_summary_due($1, $2, $3, $4, $5, $6)"#,
                session_id,
                every,
                max,
                retention_days,
                tenant,
                user
            )
        })
        .await?;
    let Some(first) = rows.first_mut() else {
        return Ok(None);
    };
    let state = SummaryState {
        summary: first.summary.take(),
        message_count: first.message_count,
        covers: first.covers,
    };
    let digest = first
        .through_seq
        .zip(first.state.take())
        .map(|(seq, s)| (seq, s.0));
    let messages = rows
        .into_iter()
        .filter_map(|r| {
            Some(SummaryMessage {
                sender: r.sender?,
                text: r.text?,
                seq: r.seq?,
            })
        })
        .collect();
    Ok(Some(SummaryDue {
        state,
        digest,
        messages,
    }))
}

/// Stores a running summary covering the first `covers` messages, with the digest state folded
/// through the message numbered `through_seq`, in one call of `mnemo_write_summary`, unless a
/// summary covering as many or more is stored already (a slower refresh never overwrites a
/// newer one). When stored, the messages archived since those it covers (`Some(0)`: none);
/// `None` when not.
pub async fn store_summary(
    caller: &Caller,
    session_id: &str,
    summary: &str,
    covers: i32,
    through_seq: i64,
    state: &DigestState,
) -> Result<Option<i32>, sqlx::Error> {
    let rows = caller
        .write_call(|tenant, user| {
            sqlx::query!(
                r#"SELECT stored AS "stored!", uncovered
                   FROM mnemo_write_summary($1, $2, $3, $4, $5, $6, $7)"#,
                session_id,
                summary,
                covers,
                through_seq,
                // Serialized by serde as `jsonb` (`as _`: the macro would otherwise want a
                // `Value`).
                sqlx::types::Json(state) as _,
                tenant,
                user
            )
        })
        .await?;
    Ok(rows
        .first()
        .filter(|r| r.stored)
        .map(|r| r.uncovered.unwrap_or(0)))
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

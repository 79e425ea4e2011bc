//! Sessions: the list and one session, the running summary's state, the messages a summary is
//! made from, the summary's store with its digest state, and a session's deletion.

use chrono::{DateTime, Utc};

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

/// A session's last `limit` unexpired messages archived after the one numbered `after_seq` (all
/// of them when `None`), oldest first. Read newest first along the session's time index, so when
/// `limit` is the number archived since (the usual case: they are the newest), only those are
/// read, however long the session.
pub async fn last_messages(
    conn: &mut Scoped,
    retention_days: Option<i32>,
    session_id: &str,
    after_seq: Option<i64>,
    limit: i64,
) -> Result<Vec<SummaryMessage>, sqlx::Error> {
    sqlx::query_as!(
        SummaryMessage,
        r#"SELECT m.sender AS "sender!", m.text AS "text!", m.seq AS "seq!" FROM agent_sessions s
         CROSS JOIN LATERAL (
             -- Through the session row, as `messages_sql` explains.
             SELECT c.sender, c.text, c.sent_at, c.seq FROM conversation_messages c
             WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
               AND c.session_id = s.session_id
               AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
               -- `+ 0`: not through the (tenant, user, seq) index, which reads every message
               -- the user archived since, in all sessions (27,000 for one busy user's refresh,
               -- 15 ms), where the session's time index reads the few new ones (0.3 ms).
               AND ($4::int8 IS NULL OR c.seq + 0 > $4)
             ORDER BY c.sent_at DESC, c.seq DESC LIMIT $3
         ) m
         WHERE s.session_id = $2
         ORDER BY m.sent_at, m.seq"#,
        retention_days,
        session_id,
        limit,
        after_seq
    )
    .fetch_all(&mut *conn)
    .await
}

/// The folded state of the session's model-less summary and the last message it covers, when
/// one is stored.
pub async fn digest_state(
    conn: &mut Scoped,
    session_id: &str,
) -> Result<Option<(i64, DigestState)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT through_seq, state AS "state: sqlx::types::Json<DigestState>"
           FROM session_digests WHERE session_id = $1"#,
        session_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| (r.through_seq, r.state.0)))
}

/// Stores a running summary covering the first `covers` messages, with the digest state folded
/// through the message numbered `through_seq`, unless a summary covering as many or more is
/// stored already (a slower refresh never overwrites a newer one). True when stored.
pub async fn set_summary(
    conn: &mut Scoped,
    session_id: &str,
    summary: &str,
    covers: i32,
    through_seq: i64,
    state: &DigestState,
) -> Result<bool, sqlx::Error> {
    let stored = sqlx::query_scalar!(
        r#"WITH s AS (
             UPDATE agent_sessions
             SET summary = $2, summary_message_count = $3, summary_updated_at = now()
             WHERE session_id = $1 AND summary_message_count < $3
             RETURNING tenant_id, user_id, session_id
         ), d AS (
             INSERT INTO session_digests (tenant_id, user_id, session_id, through_seq, state)
             SELECT tenant_id, user_id, session_id, $4, $5 FROM s
             ON CONFLICT (tenant_id, user_id, session_id)
             DO UPDATE SET through_seq = EXCLUDED.through_seq, state = EXCLUDED.state,
                           updated_at = now()
         )
         SELECT count(*) AS "stored!" FROM s"#,
        session_id,
        summary,
        covers,
        through_seq,
        // Serialized by serde as `jsonb` (`as _`: the macro would otherwise want a `Value`).
        sqlx::types::Json(state) as _
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(stored > 0)
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

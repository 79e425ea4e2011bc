//! A task's history: messages (with the digest's stored state), execution-log events and
//! context snapshots, each numbered by a counter on the task row, and what of it is queued for the
//! embedder.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Postgres, QueryBuilder};
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::tasks::digest;
use crate::tasks::digest_state::DigestState;

/// Messages between two checkpoints of a task's digest state.
pub const DIGEST_CHECKPOINT: i32 = 64;

/// The digest state of a task as last stored (empty when none is).
pub async fn digest_state(tx: &mut Scoped, task_id: Uuid) -> Result<DigestState, sqlx::Error> {
    let stored = sqlx::query_scalar!(
        r#"SELECT state AS "state: sqlx::types::Json<DigestState>"
           FROM task_digests WHERE task_id = $1"#,
        task_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let mut state = stored.map(|s| s.0).unwrap_or_default();
    state.take_stored_hashes();
    Ok(state)
}

/// A 64-bit detail hash as `task_digest_seen.hash` holds it (a signed integer, same bits).
fn hash_column(hash: u64) -> i64 {
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// A detail hash from `task_digest_seen.hash`.
fn hash_of_column(column: i64) -> u64 {
    u64::from_ne_bytes(column.to_ne_bytes())
}

/// Tells `state` the latest numbers of the detail hashes of `messages` it has not folded yet,
/// from `task_digest_seen`: what [`DigestState::fold`] needs to count each detail once. The
/// scope is compared through sub-selects (see [`crate::search::scope_unseen`]), so that the
/// lookup goes through the index by hash for any caller, not through the task's numbers.
pub async fn remember_seen(
    tx: &mut Scoped,
    task_id: Uuid,
    state: &mut DigestState,
    messages: &[digest::Message],
) -> Result<(), sqlx::Error> {
    let hashes: Vec<i64> = state
        .hashes_to_fold(messages)
        .into_iter()
        .map(hash_column)
        .collect();
    if hashes.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query!(
        r#"SELECT hash, max(n) AS "n!" FROM task_digest_seen
           WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
             AND user_id = (SELECT current_setting('mnemo.user'))
             AND task_id = $1 AND hash = ANY($2)
           GROUP BY hash"#,
        task_id,
        &hashes
    )
    .fetch_all(&mut *tx)
    .await?;
    state.remember(
        rows.into_iter()
            .map(|r| (hash_of_column(r.hash), usize::try_from(r.n).unwrap_or(0))),
    );
    Ok(())
}

/// Folds the messages written since the stored digest state into it, with the titles of the
/// active plan, and stores it, with the detail hashes it numbered.
pub async fn checkpoint_digest(tx: &mut Scoped, task_id: Uuid) -> Result<(), sqlx::Error> {
    let mut state = digest_state(&mut *tx, task_id).await?;
    let messages = digest_messages(&mut *tx, task_id, state.through).await?;
    if messages.is_empty() {
        return Ok(());
    }
    remember_seen(&mut *tx, task_id, &mut state, &messages).await?;
    let titles = sqlx::query_scalar!(
        "SELECT i.title FROM task_plan_items i JOIN tasks t ON t.id = i.task_id
         WHERE i.task_id = $1 AND i.version = t.plan_version ORDER BY i.ordinal",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    state.fold(&titles, &messages);
    let stored = sqlx::query!(
        "INSERT INTO task_digests (tenant_id, user_id, task_id, through_seq, state)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3)
         ON CONFLICT (tenant_id, user_id, task_id)
         DO UPDATE SET through_seq = EXCLUDED.through_seq, state = EXCLUDED.state,
                       updated_at = now()
         WHERE task_digests.through_seq < EXCLUDED.through_seq",
        task_id,
        state.through,
        // Serialized by serde as `jsonb` (`as _`: the macro would otherwise want a `Value`).
        sqlx::types::Json(&state) as _
    )
    .execute(&mut *tx)
    .await?;
    // A state already further along stays, with its hashes.
    if stored.rows_affected() == 0 {
        return Ok(());
    }
    let (numbered, forgotten_below) = state.numbered_to_store();
    let (numbers, hashes): (Vec<i64>, Vec<i64>) = numbered
        .into_iter()
        .map(|(n, h)| (i64::try_from(n).unwrap_or(i64::MAX), hash_column(h)))
        .unzip();
    sqlx::query!(
        "INSERT INTO task_digest_seen (tenant_id, user_id, task_id, n, hash)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, a.n, a.hash
         FROM unnest($2::int8[], $3::int8[]) AS a(n, hash)
         ON CONFLICT (tenant_id, user_id, task_id, n) DO UPDATE SET hash = EXCLUDED.hash",
        task_id,
        &numbers,
        &hashes
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "DELETE FROM task_digest_seen
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user'))
           AND task_id = $1 AND n < $2",
        task_id,
        i64::try_from(forgotten_below).unwrap_or(i64::MAX)
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Appends a message; returns its seq (also the task's message count), how many messages the
/// running summary covers and the message's time, or `None` when the task does not exist.
pub async fn append_message(
    tx: &mut Scoped,
    task_id: Uuid,
    role: Role,
    msg_type: MsgType,
    content: &str,
) -> Result<Option<(i32, i32, DateTime<Utc>)>, sqlx::Error> {
    let queue = tx.queues_embeddings();
    struct Appended {
        seq: i32,
        summary_message_count: i32,
        created_at: DateTime<Utc>,
    }
    let appended = sqlx::query_as!(
        Appended,
        "WITH t AS (
             UPDATE tasks SET message_count = message_count + 1, updated_at = now()
             WHERE id = $1
             RETURNING tenant_id, user_id, message_count, summary_message_count
         ), m AS (
             INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
             SELECT tenant_id, user_id, $1, message_count, $2, $3, $4 FROM t
             RETURNING tenant_id, user_id, seq, created_at
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
             SELECT tenant_id, user_id, 'task', $1, 'message', seq FROM m
             WHERE $5 AND btrim($3) <> ''
         )
         SELECT m.seq, t.summary_message_count, m.created_at FROM m, t",
        task_id,
        role.as_str(),
        content,
        msg_type.as_str(),
        queue
    )
    .fetch_optional(&mut *tx)
    .await?
    .map(|a| (a.seq, a.summary_message_count, a.created_at));
    // Every so many messages the digest's state takes in the latest, so that a digest never
    // reads more than that many.
    if let Some((seq, _, _)) = appended
        && seq % DIGEST_CHECKPOINT == 0
    {
        checkpoint_digest(tx, task_id).await?;
    }
    Ok(appended)
}

struct MessageRow {
    seq: i32,
    role: String,
    msg_type: String,
    content: String,
    created_at: DateTime<Utc>,
}

pub async fn messages(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
    limit: i64,
) -> Result<(Vec<Message>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        MessageRow,
        "SELECT seq, role, msg_type, content, created_at FROM task_messages
         WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(&mut *tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| Message {
                seq: r.seq,
                role: Role::parse(&r.role).unwrap_or(Role::Agent),
                msg_type: MsgType::parse(&r.msg_type).unwrap_or(MsgType::Text),
                content: r.content,
                created_at: r.created_at,
            })
            .collect(),
        more,
    ))
}

/// Every message after `after`, in order, for the digest and the summary.
/// The messages after `after`, in order.
pub async fn digest_messages(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
) -> Result<Vec<digest::Message>, sqlx::Error> {
    let rows = sqlx::query_as!(
        MessageRow,
        "SELECT seq, role, msg_type, content, created_at FROM task_messages
         WHERE task_id = $1 AND seq > $2 ORDER BY seq",
        task_id,
        after
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| digest::Message {
            seq: r.seq,
            role: r.role,
            msg_type: r.msg_type,
            content: r.content,
            created_at: r.created_at,
        })
        .collect())
}

/// Appends a batch of events in one statement: the task's counter moves by the batch size under
/// its row lock and one multi-row INSERT writes the events with consecutive sequence numbers.
/// `None` when the task does not exist.
pub async fn append_events(
    tx: &mut Scoped,
    task_id: Uuid,
    events: &[NewEvent],
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let n = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let mut insert =
        QueryBuilder::<Postgres>::new("WITH t AS (UPDATE tasks SET event_count = event_count + ");
    insert
        .push_bind(n)
        .push(", updated_at = now() WHERE id = ")
        .push_bind(task_id)
        .push(" RETURNING tenant_id, user_id, id, event_count - ")
        .push_bind(n)
        .push(
            " AS base) INSERT INTO task_events (tenant_id, user_id, task_id, seq, ts, stage, \
             sub_task_id, step_narrative, tool_name, status, input_payload, result_data, \
             error_info, duration_ms) \
             SELECT t.tenant_id, t.user_id, t.id, t.base + v.i, coalesce(v.ts, now()), \
             v.stage, v.sub_task_id, v.step_narrative, v.tool_name, v.status, v.input_payload, \
             v.result_data, v.error_info, v.duration_ms FROM t CROSS JOIN (",
        );
    insert.push_values(events.iter().enumerate(), |mut row, (i, e)| {
        row.push_bind(i64::try_from(i + 1).unwrap_or(i64::MAX))
            .push_bind(e.timestamp)
            .push_bind(e.stage.clone())
            .push_bind(e.sub_task_id.clone())
            .push_bind(e.step_narrative.clone())
            .push_bind(e.tool_name.clone())
            .push_bind(e.status.as_str())
            .push_bind(e.input_payload.clone())
            .push_bind(e.result_data.clone())
            .push_bind(
                e.error_info
                    .as_ref()
                    .and_then(|info| serde_json::to_value(info).ok()),
            )
            .push_bind(e.duration_ms);
    });
    insert.push(
        ") AS v(i, ts, stage, sub_task_id, step_narrative, tool_name, status, \
         input_payload, result_data, error_info, duration_ms) \
         RETURNING seq",
    );
    let queue = tx.queues_embeddings();
    let seqs: Vec<i64> = insert.build_query_scalar().fetch_all(&mut *tx).await?;
    if queue && !seqs.is_empty() {
        queue_task_items(tx, task_id, "event", &seqs).await?;
    }
    Ok(match (seqs.iter().min(), seqs.iter().max()) {
        (Some(first), Some(last)) => Some((*first, *last)),
        _ => None,
    })
}

struct EventRow {
    seq: i64,
    ts: DateTime<Utc>,
    stage: Option<Value>,
    sub_task_id: Option<String>,
    step_narrative: String,
    tool_name: Option<String>,
    status: String,
    input_payload: Option<Value>,
    result_data: Option<Value>,
    error_info: Option<Value>,
    duration_ms: Option<i64>,
}

pub async fn events(
    tx: &mut Scoped,
    task_id: Uuid,
    query: &EventQuery,
    after: i64,
    limit: i64,
) -> Result<(Vec<Event>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        EventRow,
        "SELECT seq, ts, stage, sub_task_id, step_narrative, tool_name, status, input_payload,
                result_data, error_info, duration_ms
         FROM task_events
         WHERE task_id = $1 AND seq > $2
           AND ($3::text IS NULL OR status = $3)
           AND ($4::text IS NULL OR tool_name = $4)
           AND ($5::text IS NULL OR sub_task_id = $5)
         ORDER BY seq LIMIT $6",
        task_id,
        after,
        query.status.as_deref(),
        query.tool_name.as_deref(),
        query.sub_task_id.as_deref(),
        limit + 1
    )
    .fetch_all(&mut *tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| Event {
                seq: r.seq,
                timestamp: r.ts,
                stage: r.stage,
                sub_task_id: r.sub_task_id,
                step_narrative: r.step_narrative,
                tool_name: r.tool_name,
                status: r.status,
                input_payload: r.input_payload,
                result_data: r.result_data,
                error_info: r.error_info,
                duration_ms: r.duration_ms,
            })
            .collect(),
        more,
    ))
}

pub async fn append_snapshot(
    tx: &mut Scoped,
    task_id: Uuid,
    snapshot: &NewSnapshot,
) -> Result<Option<Snapshot>, sqlx::Error> {
    let queue = tx.queues_embeddings();
    struct Appended {
        seq: i32,
        ts: DateTime<Utc>,
    }
    let row = sqlx::query_as!(
        Appended,
        "WITH t AS (
             UPDATE tasks SET snapshot_count = snapshot_count + 1, updated_at = now()
             WHERE id = $1
             RETURNING tenant_id, user_id, snapshot_count
         ), s AS (
             INSERT INTO task_snapshots (tenant_id, user_id, task_id, seq, label, content,
                                         is_summarized, ts)
             SELECT tenant_id, user_id, $1, snapshot_count, $2, $3, $4, coalesce($5, now())
             FROM t
             RETURNING tenant_id, user_id, seq, ts
         ), o AS (
             INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
             SELECT tenant_id, user_id, 'task', $1, 'snapshot', seq FROM s WHERE $6
         )
         SELECT seq, ts FROM s",
        task_id,
        snapshot.label,
        snapshot.content,
        snapshot.is_summarized,
        snapshot.timestamp,
        queue
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|Appended { seq, ts: timestamp }| Snapshot {
        seq,
        label: snapshot.label.clone(),
        content: snapshot.content.clone(),
        is_summarized: snapshot.is_summarized,
        timestamp,
    }))
}

/// Queues items of a task's history for the embedder: `source` is `message`, `event`,
/// `snapshot` or `step` (all text chunks of the step). The caller checks
/// [`Scoped::queues_embeddings`].
pub async fn queue_task_items(
    tx: &mut Scoped,
    task_id: Uuid,
    source: &str,
    seqs: &[i64],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'task', $1, $2, s
         FROM unnest($3::int8[]) AS s",
        task_id,
        source,
        seqs
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Queues every message, event and snapshot of a task for the embedder (an imported task; its
/// steps are queued as they are inserted). Nothing when the transaction queues no embeddings.
pub async fn queue_task_history(tx: &mut Scoped, task_id: Uuid) -> Result<(), sqlx::Error> {
    if !tx.queues_embeddings() {
        return Ok(());
    }
    // Runtime: the list of task items is the indexer's constant (one definition for the indexer
    // and for this), which a checked statement cannot splice in.
    let mut insert = QueryBuilder::<Postgres>::new(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
         SELECT i.tenant_id, i.user_id, 'task', i.task_id, i.source, i.seq
         FROM (",
    );
    insert
        .push(crate::search::indexer::TASK_ITEMS)
        .push(") i WHERE i.task_id = ")
        .push_bind(task_id)
        .push(" AND i.source <> 'step'");
    insert.build().execute(tx).await?;
    Ok(())
}

pub async fn snapshots(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
    limit: i64,
) -> Result<(Vec<Snapshot>, bool), sqlx::Error> {
    struct SnapshotRow {
        seq: i32,
        label: String,
        content: String,
        is_summarized: bool,
        ts: DateTime<Utc>,
    }
    let rows = sqlx::query_as!(
        SnapshotRow,
        "SELECT seq, label, content, is_summarized, ts FROM task_snapshots
         WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(&mut *tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((
        rows.into_iter()
            .map(|r| Snapshot {
                seq: r.seq,
                label: r.label,
                content: r.content,
                is_summarized: r.is_summarized,
                timestamp: r.ts,
            })
            .collect(),
        more,
    ))
}

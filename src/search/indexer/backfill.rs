//! Queueing work in bulk: the backfill of what has no vector of the current model yet, and the
//! full re-queue of `mnemo reindex`.

use crate::db::{Db, Job};

use super::*;
use crate::embed::Embedder;

/// Queues every memory, message and item of task history that has no vector of this model yet (after an embedder is first set or
/// its model changed). Returns how many were queued.
pub async fn backfill(db: &Db, embedder: &Embedder) -> Result<u64, sqlx::Error> {
    // One replica queues at a time; the others find the rows already there.
    let mut tx = begin(db, Job::Backfill).await?;
    let queued = sqlx::query!(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
         SELECT m.tenant_id, m.user_id, 'memory', m.id FROM agent_memories m
         WHERE NOT EXISTS (
                 SELECT 1 FROM memory_vectors v
                 WHERE v.tenant_id = m.tenant_id AND v.user_id = m.user_id
                   AND v.memory_id = m.id AND v.model = $1)
           AND NOT EXISTS (
                 SELECT 1 FROM embedding_outbox o
                 WHERE o.tenant_id = m.tenant_id AND o.user_id = m.user_id
                   AND o.kind = 'memory' AND o.memory_id = m.id)",
        embedder.model_id()
    )
    .execute(&mut tx)
    .await?
    .rows_affected();
    let messages = sqlx::query!(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
         SELECT m.tenant_id, m.user_id, 'message', m.session_id, m.message_id
         FROM conversation_messages m
         WHERE m.sender IN ('user', 'ai') AND m.text <> ''
           AND NOT EXISTS (
                 SELECT 1 FROM message_vectors v
                 WHERE v.tenant_id = m.tenant_id AND v.user_id = m.user_id
                   AND v.session_id = m.session_id AND v.message_id = m.message_id
                   AND v.model = $1)
           AND NOT EXISTS (
                 SELECT 1 FROM embedding_outbox o
                 WHERE o.tenant_id = m.tenant_id AND o.user_id = m.user_id
                   AND o.kind = 'message' AND o.session_id = m.session_id
                   AND o.message_id = m.message_id)",
        embedder.model_id()
    )
    .execute(&mut tx)
    .await?
    .rows_affected();
    // `i`: the items of [`TASK_ITEMS`], written out.
    let items = sqlx::query!(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
         SELECT i.tenant_id, i.user_id, 'task', i.task_id, i.source, i.seq
         FROM (
             SELECT tenant_id, user_id, task_id, 'message' AS source, seq::int8 AS seq
             FROM task_messages WHERE btrim(content) <> ''
             UNION ALL SELECT tenant_id, user_id, task_id, 'event', seq FROM task_events
             UNION ALL SELECT tenant_id, user_id, task_id, 'snapshot', seq FROM task_snapshots
             UNION ALL SELECT DISTINCT tenant_id, user_id, task_id, 'step', seq::int8
             FROM task_step_texts WHERE btrim(content) <> ''
         ) i
         WHERE NOT EXISTS (
                 SELECT 1 FROM task_vectors v
                 WHERE v.tenant_id = i.tenant_id AND v.user_id = i.user_id
                   AND v.task_id = i.task_id AND v.seq = i.seq AND v.model = $1
                   AND (v.source = i.source
                        OR (i.source = 'step' AND v.source IN ('step_text', 'tool_result'))))
           AND NOT EXISTS (
                 SELECT 1 FROM embedding_outbox o
                 WHERE o.tenant_id = i.tenant_id AND o.user_id = i.user_id
                   AND o.kind = 'task' AND o.task_id = i.task_id
                   AND o.task_source = i.source AND o.task_seq = i.seq)",
        embedder.model_id()
    )
    .execute(&mut tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(queued + messages + items)
}

/// Every item of task history that gets a vector, as outbox rows would name it: messages,
/// events, snapshots, and steps that have text. (Under row-level security, the caller's.) The
/// backfill and [`requeue_all`] write this list out in their statements (which the macros
/// check); a change here goes there too.
pub(crate) const TASK_ITEMS: &str = "
    SELECT tenant_id, user_id, task_id, 'message' AS source, seq::int8 AS seq FROM task_messages
    WHERE btrim(content) <> ''
    UNION ALL SELECT tenant_id, user_id, task_id, 'event', seq FROM task_events
    UNION ALL SELECT tenant_id, user_id, task_id, 'snapshot', seq FROM task_snapshots
    UNION ALL SELECT DISTINCT tenant_id, user_id, task_id, 'step', seq::int8 FROM task_step_texts
    WHERE btrim(content) <> ''";

/// Drops every vector (of every model) and queues every memory, message and item of task history
/// again (`mnemo reindex`).
pub async fn requeue_all(db: &Db) -> Result<u64, sqlx::Error> {
    let mut tx = begin(db, Job::Backfill).await?;
    sqlx::query!("DELETE FROM memory_vectors")
        .execute(&mut tx)
        .await?;
    sqlx::query!("DELETE FROM message_vectors")
        .execute(&mut tx)
        .await?;
    sqlx::query!("DELETE FROM task_vectors")
        .execute(&mut tx)
        .await?;
    sqlx::query!("DELETE FROM embedding_outbox")
        .execute(&mut tx)
        .await?;
    let queued = sqlx::query!(
        "INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
         SELECT tenant_id, user_id, 'memory', id FROM agent_memories"
    )
    .execute(&mut tx)
    .await?
    .rows_affected();
    let queued = queued
        + sqlx::query!(
            "INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
             SELECT tenant_id, user_id, 'message', session_id, message_id
             FROM conversation_messages WHERE sender IN ('user', 'ai') AND text <> ''"
        )
        .execute(&mut tx)
        .await?
        .rows_affected()
        // The items of [`TASK_ITEMS`], written out.
        + sqlx::query!(
            "INSERT INTO embedding_outbox (tenant_id, user_id, kind, task_id, task_source, task_seq)
             SELECT tenant_id, user_id, 'task', task_id, source, seq FROM (
                 SELECT tenant_id, user_id, task_id, 'message' AS source, seq::int8 AS seq
                 FROM task_messages WHERE btrim(content) <> ''
                 UNION ALL SELECT tenant_id, user_id, task_id, 'event', seq FROM task_events
                 UNION ALL SELECT tenant_id, user_id, task_id, 'snapshot', seq FROM task_snapshots
                 UNION ALL SELECT DISTINCT tenant_id, user_id, task_id, 'step', seq::int8
                 FROM task_step_texts WHERE btrim(content) <> ''
             ) i"
        )
        .execute(&mut tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(queued)
}

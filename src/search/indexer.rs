//! The background indexer: embeds what writes queued in `embedding_outbox` and stores the vectors.
//!
//! Writes never call a model; they add an outbox row in their own transaction. The indexer runs
//! as the `mnemo_indexer` role (its policies reach the outbox, the text to embed and the vectors
//! of every tenant, and nothing else), claims due rows with `FOR UPDATE SKIP LOCKED` so several
//! replicas share the work, embeds the chunks of each claimed memory, replaces their vectors and
//! deletes the rows, all in one transaction. A failed batch is retried with exponential backoff
//! (`attempts`, `not_before`, `last_error` on the rows). Rows survive restarts: they are only
//! deleted with the vectors they produced.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::db::{Db, Job, System};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::embed::Embedder;

/// Outbox rows claimed per transaction.
const BATCH_ROWS: i64 = 32;
/// Chunks of one memory that get vectors (the first 64 × 16 KiB = 1 MiB of its content); keyword
/// search covers the rest.
pub const MAX_CHUNKS_PER_MEMORY: i64 = 64;
/// Texts per call to the embedder within a pass.
const EMBED_SLICE: usize = 16;
/// Texts embedded in one pass (one transaction).
const MAX_TEXTS_PER_PASS: usize = 256;
/// Characters of a chunk handed to the embedder; the model reads at most 256 tokens anyway.
const MAX_CHARS: usize = 2000;
/// Characters of the preceding text embedded with a chunk or message as its context: about the
/// length of a conversational turn, short enough to leave the model room for the text itself.
const CONTEXT_CHARS: i32 = 300;
/// How often an idle indexer looks for work.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Longest wait before a failed row is tried again.
const MAX_BACKOFF_SECS: i64 = 600;

/// Counters the indexer keeps for `/metrics`.
#[derive(Debug, Default)]
pub struct IndexerStats {
    /// Rows waiting in the outbox, as `/metrics` last counted them.
    pub backlog: AtomicU64,
    /// Chunks embedded and stored.
    pub embedded: AtomicU64,
    /// Batches that failed (and were scheduled again).
    pub failures: AtomicU64,
}

impl IndexerStats {
    /// The Prometheus text of these figures.
    pub fn render(&self) -> String {
        format!(
            "# HELP mnemo_embedding_backlog Texts waiting for the embedder (0 when idle).\n\
             # TYPE mnemo_embedding_backlog gauge\n\
             mnemo_embedding_backlog {}\n\
             # HELP mnemo_embedded_total Texts embedded and stored.\n\
             # TYPE mnemo_embedded_total counter\n\
             mnemo_embedded_total {}\n\
             # HELP mnemo_embedding_failures_total Embedding batches that failed and were retried.\n\
             # TYPE mnemo_embedding_failures_total counter\n\
             mnemo_embedding_failures_total {}\n",
            self.backlog.load(Ordering::Relaxed),
            self.embedded.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}

/// An outbox row claimed by a pass.
struct Claimed {
    tenant_id: String,
    user_id: String,
    id: i64,
    kind: String,
    memory_id: Option<Uuid>,
    session_id: Option<String>,
    message_id: Option<String>,
    task_id: Option<Uuid>,
    task_source: Option<String>,
    task_seq: Option<i64>,
}

/// A text to embed and where its vector goes.
struct Text {
    tenant_id: String,
    user_id: String,
    /// Memory chunks: the memory and the chunk's offset.
    memory_id: Option<Uuid>,
    byte_start: Option<i64>,
    /// Messages: the session and message ids.
    session_id: Option<String>,
    message_id: Option<String>,
    /// Task history: the task, the item's source, seq, part and chunk offset (-1 for items that
    /// are not step texts).
    task_id: Option<Uuid>,
    task_source: Option<String>,
    task_seq: Option<i64>,
    part_index: Option<i32>,
    char_offset: Option<i32>,
    content: String,
    /// The end of the text written just before it in the same stream (the previous chunk, the
    /// memory before it in its agent's thread, the message before it in its session), if any.
    context: Option<String>,
}

/// A text, whether its context was embedded with it, and the vector.
type Embedded<'a> = (&'a Text, bool, Vec<f32>);

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pass {
    /// Nothing was due.
    Idle,
    /// Outbox rows done, chunks embedded.
    Done { rows: usize, chunks: usize },
    /// The embedder or the database failed (why); the rows wait for a later attempt.
    Failed(String),
}

/// Opens a transaction as `job` (the indexer or the backfill), which always runs.
async fn begin(db: &Db, job: Job) -> Result<System, sqlx::Error> {
    db.system(job)
        .await?
        .ok_or_else(|| sqlx::Error::Protocol(format!("{job:?} takes no lock and always runs")))
}

/// Makes sure the vector table exists (creating pgvector when allowed) and this model has its
/// HNSW index. Errors name what is missing.
pub async fn prepare_schema(db: &Db, embedder: &Embedder) -> Result<(), String> {
    let mut tx = begin(db, Job::Schema)
        .await
        .map_err(|e| format!("checking for pgvector failed: {e}"))?;
    let ready = sqlx::query_scalar!(r#"SELECT mnemo_create_vector_tables() AS "ready!""#)
        .fetch_one(&mut tx)
        .await
        .map_err(|e| format!("checking for pgvector failed: {e}"))?;
    if !ready {
        return Err(
            "MNEMO_EMBEDDER needs the PostgreSQL extension pgvector: install it, or have \
                    a superuser run `CREATE EXTENSION vector` in this database"
                .into(),
        );
    }
    // One partial index per table and model: the column has no fixed dimension, the cast gives
    // it one.
    for table in ["memory_vectors", "message_vectors", "task_vectors"] {
        let name = format!("{table}_hnsw_{}", short_hash(embedder.model_id()));
        let statement = sqlx::query_scalar!(
            "SELECT format('CREATE INDEX IF NOT EXISTS %I ON %I USING hnsw \
                            ((embedding::vector(%s)) vector_cosine_ops) WHERE model = %L',
                           $1::text, $2::text, $3::text, $4::text) AS \"statement!\"",
            name,
            table,
            embedder.dimensions().to_string(),
            embedder.model_id()
        )
        .fetch_one(&mut tx)
        .await
        .map_err(|e| format!("preparing the vector index failed: {e}"))?;
        sqlx::raw_sql(&statement)
            .execute(&mut tx)
            .await
            .map_err(|e| format!("creating the vector index on {table} failed: {e}"))?;
    }
    tx.commit()
        .await
        .map_err(|e| format!("creating the vector indexes failed: {e}"))
}

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

/// Rows waiting in the outbox (due or not).
pub async fn backlog(db: &Db) -> Result<u64, sqlx::Error> {
    let mut tx = begin(db, Job::Indexer).await?;
    let n = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM embedding_outbox"#)
        .fetch_one(&mut tx)
        .await?;
    tx.commit().await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Claims due rows, embeds their chunks and stores the vectors, in one transaction.
pub async fn run_once(db: &Db, embedder: &Embedder, stats: &IndexerStats) -> Pass {
    match pass(db, embedder).await {
        Ok(Some((rows, chunks))) => {
            stats.embedded.fetch_add(chunks as u64, Ordering::Relaxed);
            Pass::Done { rows, chunks }
        }
        Ok(None) => Pass::Idle,
        Err(err) => {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "embedding batch failed; it will be retried");
            Pass::Failed(err)
        }
    }
}

async fn pass(db: &Db, embedder: &Embedder) -> Result<Option<(usize, usize)>, String> {
    let mut tx = begin(db, Job::Indexer).await.map_err(|e| e.to_string())?;
    let claimed = sqlx::query_as!(
        Claimed,
        "SELECT tenant_id, user_id, id, kind, memory_id, session_id, message_id, task_id,
                task_source, task_seq
         FROM embedding_outbox
         WHERE not_before <= now()
         ORDER BY not_before, id
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
        BATCH_ROWS
    )
    .fetch_all(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    if claimed.is_empty() {
        return Ok(None);
    }
    let memories: Vec<&Claimed> = claimed.iter().filter(|c| c.kind == "memory").collect();
    let messages: Vec<&Claimed> = claimed.iter().filter(|c| c.kind == "message").collect();
    let m_tenants: Vec<&str> = memories.iter().map(|c| c.tenant_id.as_str()).collect();
    let m_users: Vec<&str> = memories.iter().map(|c| c.user_id.as_str()).collect();
    let m_ids: Vec<Uuid> = memories.iter().filter_map(|c| c.memory_id).collect();
    let s_tenants: Vec<&str> = messages.iter().map(|c| c.tenant_id.as_str()).collect();
    let s_users: Vec<&str> = messages.iter().map(|c| c.user_id.as_str()).collect();
    let s_sessions: Vec<&str> = messages
        .iter()
        .filter_map(|c| c.session_id.as_deref())
        .collect();
    let s_messages: Vec<&str> = messages
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    let tasks = TaskItems::of(claimed.iter());
    let (t_tenants, t_users, t_ids, t_sources, t_seqs) = tasks.columns();
    // The text of each claimed row that still exists (a deleted memory or message has nothing
    // left to embed; its row just goes, and so do the vectors of a message left without text).
    let texts = sqlx::query_as!(
        Text,
        r#"SELECT DISTINCT c.tenant_id AS "tenant_id!", c.user_id AS "user_id!",
                c.memory_id AS "memory_id?", c.byte_start AS "byte_start?",
                NULL::text AS "session_id?", NULL::text AS "message_id?", NULL::uuid AS "task_id?",
                NULL::text AS "task_source?", NULL::int8 AS "task_seq?",
                NULL::int4 AS "part_index?", NULL::int4 AS "char_offset?",
                left(c.content, $4) AS "content!",
                CASE WHEN c.byte_start > 0 THEN (
                    SELECT right(p.content, $10) FROM agent_memory_chunks p
                    WHERE p.tenant_id = c.tenant_id AND p.user_id = c.user_id
                      AND p.memory_id = c.memory_id AND p.byte_start < c.byte_start
                    ORDER BY p.byte_start DESC LIMIT 1
                ) ELSE (
                    SELECT right(pc.content, $10)
                    FROM agent_memories me
                    JOIN LATERAL (
                        SELECT pm.id FROM agent_memories pm
                        WHERE pm.tenant_id = me.tenant_id AND pm.user_id = me.user_id
                          AND coalesce(pm.agent_id, '') = coalesce(me.agent_id, '')
                          AND coalesce(pm.thread_id, '') = coalesce(me.thread_id, '')
                          AND (pm.created_at, pm.id) < (me.created_at, me.id)
                        ORDER BY pm.created_at DESC, pm.id DESC LIMIT 1
                    ) prev ON true
                    JOIN LATERAL (
                        SELECT p.content FROM agent_memory_chunks p
                        WHERE p.tenant_id = me.tenant_id AND p.user_id = me.user_id
                          AND p.memory_id = prev.id
                        ORDER BY p.byte_start DESC LIMIT 1
                    ) pc ON true
                    WHERE me.tenant_id = c.tenant_id AND me.user_id = c.user_id
                      AND me.id = c.memory_id
                ) END AS "context?"
         FROM unnest($1::text[], $2::text[], $3::uuid[]) AS o(tenant_id, user_id, memory_id)
         JOIN LATERAL (
             SELECT * FROM agent_memory_chunks c
             WHERE c.tenant_id = o.tenant_id AND c.user_id = o.user_id
               AND c.memory_id = o.memory_id
             ORDER BY c.byte_start
             LIMIT $5
         ) c ON true
         UNION ALL
         SELECT DISTINCT m.tenant_id, m.user_id, NULL::uuid, NULL::int8, m.session_id,
                m.message_id, NULL::uuid, NULL::text, NULL::int8, NULL::int4, NULL::int4,
                left(m.text, $4),
                (SELECT right(p.text, $10) FROM conversation_messages p
                 WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                   AND p.session_id = m.session_id AND (p.sent_at, p.seq) < (m.sent_at, m.seq)
                   AND p.sender IN ('user', 'ai') AND p.text <> ''
                 ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1)
         FROM unnest($6::text[], $7::text[], $8::text[], $9::text[])
                  AS o(tenant_id, user_id, session_id, message_id)
         JOIN conversation_messages m
           ON m.tenant_id = o.tenant_id AND m.user_id = o.user_id
          AND m.session_id = o.session_id AND m.message_id = o.message_id
         -- An update can leave a message with no text: its old vectors go, no new ones come.
         WHERE m.sender IN ('user', 'ai') AND m.text <> ''
         UNION ALL
         SELECT x.tenant_id, x.user_id, NULL::uuid, NULL::int8, NULL::text, NULL::text,
                x.task_id, x.source, x.seq, x.part_index, x.char_offset, left(x.content, $4),
                x.context
         FROM unnest($11::text[], $12::text[], $13::uuid[], $14::text[], $15::int8[])
                  AS o(tenant_id, user_id, task_id, source, seq)
         JOIN LATERAL (
             -- A task message, with the one before it as its context.
             SELECT m.tenant_id, m.user_id, m.task_id, 'message'::text AS source,
                    m.seq::int8 AS seq, -1 AS part_index, -1 AS char_offset, m.content,
                    (SELECT right(p.content, $10) FROM task_messages p
                     WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                       AND p.task_id = m.task_id AND p.seq < m.seq
                     ORDER BY p.seq DESC LIMIT 1) AS context
             FROM task_messages m
             WHERE o.source = 'message' AND m.tenant_id = o.tenant_id
               AND m.user_id = o.user_id AND m.task_id = o.task_id AND m.seq = o.seq
             UNION ALL
             SELECT e.tenant_id, e.user_id, e.task_id, 'event', e.seq, -1, -1,
                    mnemo_task_event_text(e.step_narrative, e.tool_name, e.result_data,
                                          e.error_info),
                    NULL
             FROM task_events e
             WHERE o.source = 'event' AND e.tenant_id = o.tenant_id
               AND e.user_id = o.user_id AND e.task_id = o.task_id AND e.seq = o.seq
             UNION ALL
             SELECT s.tenant_id, s.user_id, s.task_id, 'snapshot', s.seq, -1, -1,
                    s.label || E'\n' || s.content, NULL
             FROM task_snapshots s
             WHERE o.source = 'snapshot' AND s.tenant_id = o.tenant_id
               AND s.user_id = o.user_id AND s.task_id = o.task_id AND s.seq = o.seq
             UNION ALL
             (SELECT t.tenant_id, t.user_id, t.task_id, t.kind, t.seq, t.part_index,
                     t.char_offset, t.content, NULL
              FROM task_step_texts t
              WHERE o.source = 'step' AND t.tenant_id = o.tenant_id
                AND t.user_id = o.user_id AND t.task_id = o.task_id AND t.seq = o.seq
              ORDER BY t.part_index, t.chunk
              LIMIT $5)
         ) x ON true
         WHERE btrim(x.content) <> ''"#,
        &m_tenants as &[&str],
        &m_users as &[&str],
        &m_ids,
        i32::try_from(MAX_CHARS).unwrap_or(i32::MAX),
        MAX_CHUNKS_PER_MEMORY,
        &s_tenants as &[&str],
        &s_users as &[&str],
        &s_sessions as &[&str],
        &s_messages as &[&str],
        CONTEXT_CHARS,
        &t_tenants as &[&str],
        &t_users as &[&str],
        &t_ids,
        &t_sources as &[&str],
        &t_seqs
    )
    .fetch_all(&mut tx)
    .await
    .map_err(|e| e.to_string())?;

    // Big memories bring many chunks: keep the claimed rows (in order, at least one) whose texts
    // fit one embedding batch; the rest stay queued for the next pass.
    let mut kept = 0usize;
    let mut total = 0usize;
    for row in &claimed {
        let n = texts.iter().filter(|t| belongs(t, row)).count();
        if kept > 0 && total + n > MAX_TEXTS_PER_PASS {
            break;
        }
        kept += 1;
        total += n;
    }
    let claimed = &claimed[..kept];
    let texts: Vec<Text> = texts
        .into_iter()
        .filter(|t| claimed.iter().any(|row| belongs(t, row)))
        .collect();
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    let m_ids: Vec<Uuid> = claimed.iter().filter_map(|c| c.memory_id).collect();
    let m_tenants: Vec<&str> = claimed
        .iter()
        .filter(|c| c.memory_id.is_some())
        .map(|c| c.tenant_id.as_str())
        .collect();
    let m_users: Vec<&str> = claimed
        .iter()
        .filter(|c| c.memory_id.is_some())
        .map(|c| c.user_id.as_str())
        .collect();
    // Each text alone, and (when something precedes it) with its context: a search keeps the
    // closer of the two.
    let mut inputs: Vec<(usize, bool)> = Vec::with_capacity(texts.len() * 2);
    let mut contents: Vec<String> = Vec::with_capacity(texts.len() * 2);
    for (i, t) in texts.iter().enumerate() {
        inputs.push((i, false));
        contents.push(t.content.clone());
        if let Some(context) = t.context.as_deref().filter(|c| !c.trim().is_empty()) {
            inputs.push((i, true));
            contents.push(format!("{context}\n{}", t.content));
        }
    }
    let vectors = match embed_all(embedder, &contents).await {
        Ok(vectors) => vectors,
        Err(err) => {
            // Schedule the rows again, later each time; the claim ends with this commit.
            sqlx::query!(
                "UPDATE embedding_outbox
                 SET attempts = attempts + 1, last_error = left($2, 1000),
                     not_before = now() + make_interval(secs => least($3, 2 ^ least(attempts, 20)))
                 WHERE id = ANY($1)",
                &ids,
                err,
                MAX_BACKOFF_SECS as f64
            )
            .execute(&mut tx)
            .await
            .map_err(|e| e.to_string())?;
            tx.commit().await.map_err(|e| e.to_string())?;
            return Err(err);
        }
    };

    let model = embedder.model_id();
    sqlx::query!(
        "DELETE FROM memory_vectors v
         USING unnest($1::text[], $2::text[], $3::uuid[]) AS o(tenant_id, user_id, memory_id)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id
           AND v.memory_id = o.memory_id AND v.model = $4",
        &m_tenants as &[&str],
        &m_users as &[&str],
        &m_ids,
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let s_tenants: Vec<&str> = claimed
        .iter()
        .filter(|c| c.session_id.is_some())
        .map(|c| c.tenant_id.as_str())
        .collect();
    let s_users: Vec<&str> = claimed
        .iter()
        .filter(|c| c.session_id.is_some())
        .map(|c| c.user_id.as_str())
        .collect();
    let s_sessions: Vec<&str> = claimed
        .iter()
        .filter_map(|c| c.session_id.as_deref())
        .collect();
    let s_messages: Vec<&str> = claimed
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    sqlx::query!(
        "DELETE FROM message_vectors v
         USING unnest($1::text[], $2::text[], $3::text[], $4::text[])
               AS o(tenant_id, user_id, session_id, message_id)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id
           AND v.session_id = o.session_id AND v.message_id = o.message_id AND v.model = $5",
        &s_tenants as &[&str],
        &s_users as &[&str],
        &s_sessions as &[&str],
        &s_messages as &[&str],
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let tasks = TaskItems::of(claimed.iter());
    let (t_tenants, t_users, t_ids, t_sources, t_seqs) = tasks.columns();
    sqlx::query!(
        "DELETE FROM task_vectors v
         USING unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::int8[])
               AS o(tenant_id, user_id, task_id, source, seq)
         WHERE v.tenant_id = o.tenant_id AND v.user_id = o.user_id AND v.task_id = o.task_id
           AND v.seq = o.seq AND v.model = $6
           AND (v.source = o.source
                OR (o.source = 'step' AND v.source IN ('step_text', 'tool_result')))",
        &t_tenants as &[&str],
        &t_users as &[&str],
        &t_ids,
        &t_sources as &[&str],
        &t_seqs,
        model
    )
    .execute(&mut tx)
    .await
    .map_err(|e| e.to_string())?;
    let mut chunks: Vec<Embedded> = Vec::new();
    let mut notes: Vec<Embedded> = Vec::new();
    let mut items: Vec<Embedded> = Vec::new();
    for (&(i, with_context), v) in inputs.iter().zip(vectors) {
        let t = &texts[i];
        let group = if t.memory_id.is_some() {
            &mut chunks
        } else if t.task_id.is_some() {
            &mut items
        } else {
            &mut notes
        };
        group.push((t, with_context, v));
    }
    if !chunks.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO memory_vectors
                 (tenant_id, user_id, memory_id, byte_start, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.memory_id, u.byte_start, $6, u.with_context,
                    u.embedding
             FROM unnest($1::text[], $2::text[], $3::uuid[], $4::int8[], $5::vector[], $7::bool[])
                  AS u(tenant_id, user_id, memory_id, byte_start, embedding, with_context)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&chunks, |t| t.tenant_id.as_str()))
        .bind(column(&chunks, |t| t.user_id.as_str()))
        .bind(present(&chunks, |t| t.memory_id))
        .bind(column(&chunks, |t| t.byte_start.unwrap_or(0)))
        .bind(embeddings(&chunks))
        .bind(model)
        .bind(contexts(&chunks))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    if !notes.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO message_vectors
                 (tenant_id, user_id, session_id, message_id, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.session_id, u.message_id, $6, u.with_context,
                    u.embedding
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::vector[], $7::bool[])
                  AS u(tenant_id, user_id, session_id, message_id, embedding, with_context)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&notes, |t| t.tenant_id.as_str()))
        .bind(column(&notes, |t| t.user_id.as_str()))
        .bind(present(&notes, |t| t.session_id.as_deref()))
        .bind(present(&notes, |t| t.message_id.as_deref()))
        .bind(embeddings(&notes))
        .bind(model)
        .bind(contexts(&notes))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    if !items.is_empty() {
        // Runtime: it binds pgvector's `vector[]`, a type sqlx's macros do not know.
        sqlx::query(
            "INSERT INTO task_vectors (tenant_id, user_id, task_id, source, seq, part_index,
                                       char_offset, model, with_context, embedding)
             SELECT u.tenant_id, u.user_id, u.task_id, u.source, u.seq, u.part_index,
                    u.char_offset, $8, u.with_context, u.embedding
             FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::int8[], $6::int4[],
                         $7::int4[], $9::bool[], $10::vector[])
                  AS u(tenant_id, user_id, task_id, source, seq, part_index, char_offset,
                       with_context, embedding)
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&items, |t| t.tenant_id.as_str()))
        .bind(column(&items, |t| t.user_id.as_str()))
        .bind(present(&items, |t| t.task_id))
        .bind(column(&items, |t| {
            t.task_source.as_deref().unwrap_or_default()
        }))
        .bind(column(&items, |t| t.task_seq.unwrap_or(0)))
        .bind(column(&items, |t| t.part_index.unwrap_or(-1)))
        .bind(column(&items, |t| t.char_offset.unwrap_or(-1)))
        .bind(model)
        .bind(contexts(&items))
        .bind(embeddings(&items))
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    }
    sqlx::query!("DELETE FROM embedding_outbox WHERE id = ANY($1)", &ids)
        .execute(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(Some((claimed.len(), texts.len())))
}

/// One column of an embedded group, for an `unnest` bind.
fn column<'a, T>(group: &[Embedded<'a>], f: impl Fn(&'a Text) -> T) -> Vec<T> {
    group.iter().map(|(t, _, _)| f(t)).collect()
}

/// The values of an optional column that are present.
fn present<'a, T>(group: &[Embedded<'a>], f: impl Fn(&'a Text) -> Option<T>) -> Vec<T> {
    group.iter().filter_map(|(t, _, _)| f(t)).collect()
}

/// Whether each vector was made with the text's context.
fn contexts(group: &[Embedded<'_>]) -> Vec<bool> {
    group.iter().map(|(_, c, _)| *c).collect()
}

/// The vectors of a group.
fn embeddings(group: &[Embedded<'_>]) -> Vec<pgvector::Vector> {
    group
        .iter()
        .map(|(_, _, v)| pgvector::Vector::from(v.clone()))
        .collect()
}

/// Whether text `t` was fetched for outbox row `row`.
fn belongs(t: &Text, row: &Claimed) -> bool {
    t.tenant_id == row.tenant_id
        && t.user_id == row.user_id
        && match (row.memory_id, row.task_id) {
            (Some(id), _) => t.memory_id == Some(id),
            (None, Some(task)) => {
                t.task_id == Some(task)
                    && t.task_seq == row.task_seq
                    && match row.task_source.as_deref() {
                        Some("step") => {
                            matches!(t.task_source.as_deref(), Some("step_text" | "tool_result"))
                        }
                        source => t.task_source.as_deref() == source,
                    }
            }
            (None, None) => {
                t.task_id.is_none()
                    && t.memory_id.is_none()
                    && t.session_id == row.session_id
                    && t.message_id == row.message_id
            }
        }
}

/// The task-history rows among claimed outbox rows, as the parallel arrays statements take.
struct TaskItems<'a> {
    rows: Vec<&'a Claimed>,
}

/// Tenants, users, task ids, sources and seqs of task items.
type TaskColumns<'a> = (
    Vec<&'a str>,
    Vec<&'a str>,
    Vec<Uuid>,
    Vec<&'a str>,
    Vec<i64>,
);

impl<'a> TaskItems<'a> {
    fn of(rows: impl Iterator<Item = &'a Claimed>) -> Self {
        TaskItems {
            rows: rows.filter(|c| c.task_id.is_some()).collect(),
        }
    }

    fn columns(&self) -> TaskColumns<'a> {
        (
            self.rows.iter().map(|c| c.tenant_id.as_str()).collect(),
            self.rows.iter().map(|c| c.user_id.as_str()).collect(),
            self.rows.iter().filter_map(|c| c.task_id).collect(),
            self.rows
                .iter()
                .map(|c| c.task_source.as_deref().unwrap_or_default())
                .collect(),
            self.rows.iter().map(|c| c.task_seq.unwrap_or(0)).collect(),
        )
    }
}

async fn embed_all(embedder: &Embedder, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    // In slices, each its own job on the embedding threads, so that a search's query waits for
    // one slice at most rather than for the whole pass.
    let mut vectors = Vec::with_capacity(texts.len());
    for slice in texts.chunks(EMBED_SLICE) {
        vectors.extend(embedder.embed(slice).await.map_err(|e| e.to_string())?);
    }
    if vectors.len() != texts.len() {
        return Err(format!(
            "the embedder returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        ));
    }
    Ok(vectors)
}

/// Runs passes until `cancel` fires: back to back while there is work, every [`IDLE_POLL`] when
/// idle, backing off after a failure. (`/metrics` counts the backlog itself when scraped, so
/// the loop does not count it on every pass.)
pub async fn run(db: Db, embedder: Embedder, stats: Arc<IndexerStats>, cancel: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let wait = match run_once(&db, &embedder, &stats).await {
            Pass::Done { .. } => {
                failures = 0;
                Duration::ZERO
            }
            Pass::Idle => IDLE_POLL,
            Pass::Failed(_) => {
                failures = failures.saturating_add(1);
                Duration::from_millis(500u64.saturating_mul(1 << failures.min(6)))
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Eight hex digits naming a model in an index name.
fn short_hash(model_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(model_id.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

//! The background indexer: embeds what writes queued in `embedding_outbox` and stores the vectors.
//!
//! Writes never call a model; they add an outbox row in their own transaction. The indexer runs
//! as the `mnemo_indexer` role (its policies reach the outbox, the text to embed and the vectors
//! of every tenant, and nothing else), claims due rows with `FOR UPDATE SKIP LOCKED` so several
//! replicas share the work, embeds the chunks of each claimed memory, replaces their vectors and
//! deletes the rows, all in one transaction. A failed batch is retried with exponential backoff
//! (`attempts`, `not_before`, `last_error` on the rows). Rows survive restarts: they are only
//! deleted with the vectors they produced.
//!
//! This file holds the tunables, the counters and the row types; the work by part: `pass.rs`
//! (claiming, embedding and storing, in one transaction), `columns.rs` (what a pass binds),
//! `run.rs` (the loop and the backlog), `backfill.rs` (queueing in bulk), `schema.rs` (the vector
//! table and indexes).

mod backfill;
mod columns;
mod pass;
mod run;
mod schema;

pub use backfill::*;
pub use run::*;
pub use schema::*;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::db::{Db, Job, System};
use uuid::Uuid;

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

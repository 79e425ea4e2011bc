//! The account export as a stream.
//!
//! The handler opens one read-only REPEATABLE READ transaction as the caller (so everything comes
//! from one snapshot), counts what it holds for the manifest, and answers at once; then two
//! workers run while the client downloads:
//!
//! - the producer (async) reads the caller's rows page by page and turns them into archive
//!   members, sending them through a small bounded channel;
//! - the packer (a blocking thread) appends each member to a tar stream, gzips it and hands the
//!   compressed bytes to the response body through another bounded channel.
//!
//! So at most a few members are in memory at once, whatever the size of the account: the largest
//! is one memory's content or one task's bundle. A client that stops reading stops both workers.
//! A failure after the answer began aborts the body, so a client never takes a cut-off archive
//! for a whole one (the manifest's counts tell too).

use std::io::Write;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use uuid::Uuid;

use super::layout::*;
use crate::conversations::transfer as conversations;
use crate::db::Scoped;
use crate::error::ApiResult;
use crate::memories::transfer as memories;
use crate::notes::transfer as notes;
use crate::tasks::workspace::{bundle, export as task_export, transfer as task_transfer};

/// Rows read per query.
const PAGE: i64 = 500;
/// Memories read per query (each is followed by a read of its content).
const MEMORY_PAGE: i64 = 100;
/// Compressed bytes collected before they go to the body.
const BODY_CHUNK: usize = 64 * 1024;

/// What the producer hands the packer.
enum Message {
    Member {
        path: String,
        bytes: Vec<u8>,
        mtime: u64,
    },
    /// Everything was sent: close the archive.
    Done,
    /// Reading failed: abort the body.
    Failed(String),
}

/// The manifest of the caller's data in `tx`'s snapshot.
pub async fn manifest(tx: &mut Scoped, tenant_id: &str, user_id: &str) -> ApiResult<Manifest> {
    struct CountsRow {
        memories: i64,
        notes: i64,
        note_revisions: i64,
        sessions: i64,
        messages: i64,
        session_batches: i64,
        tasks: i64,
        created_at: DateTime<Utc>,
    }
    let row = sqlx::query_as!(
        CountsRow,
        r#"SELECT (SELECT count(*) FROM agent_memories) AS "memories!",
                (SELECT count(*) FROM agent_long_term_memory) AS "notes!",
                (SELECT count(*) FROM agent_long_term_memory_revisions) AS "note_revisions!",
                (SELECT count(*) FROM agent_sessions) AS "sessions!",
                (SELECT count(*) FROM conversation_messages) AS "messages!",
                (SELECT count(*) FROM recent_conversation_history) AS "session_batches!",
                (SELECT count(*) FROM tasks) AS "tasks!",
                now() AS "created_at!""#
    )
    .fetch_one(&mut *tx)
    .await?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Manifest {
        format: FORMAT.into(),
        version: VERSION,
        created_at: row.created_at,
        tenant_id: tenant_id.into(),
        user_id: user_id.into(),
        counts: Counts {
            memories: n(row.memories),
            notes: n(row.notes),
            note_revisions: n(row.note_revisions),
            sessions: n(row.sessions),
            messages: n(row.messages),
            session_batches: n(row.session_batches),
            tasks: n(row.tasks),
        },
    })
}

/// Starts the workers and returns the body stream. `permit` (the export slot) is held until the
/// producer ends.
pub fn stream(
    tx: Scoped,
    manifest: Manifest,
    permit: OwnedSemaphorePermit,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let (members_tx, members_rx) = mpsc::channel::<Message>(4);
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::task::spawn_blocking(move || pack(members_rx, body_tx));
    tokio::spawn(async move {
        let _permit = permit;
        let mut producer = Producer {
            tx,
            out: members_tx,
            mtime: u64::try_from(manifest.created_at.timestamp()).unwrap_or(0),
        };
        match producer.run(&manifest).await {
            Ok(()) => {
                let _ = producer.out.send(Message::Done).await;
            }
            Err(Stop::Closed) => {}
            Err(Stop::Failed(detail)) => {
                tracing::error!(error = %detail, "account export failed while streaming");
                let _ = producer.out.send(Message::Failed(detail)).await;
            }
        }
        // Only read: the transaction ends without waiting.
        producer.tx.end_read_only();
    });
    futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

enum Stop {
    /// The packer or the client went away.
    Closed,
    Failed(String),
}

impl From<sqlx::Error> for Stop {
    fn from(err: sqlx::Error) -> Self {
        Stop::Failed(format!("reading the account: {err}"))
    }
}

impl From<crate::error::ApiError> for Stop {
    fn from(err: crate::error::ApiError) -> Self {
        Stop::Failed(format!("reading a task: {err}"))
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, Stop> {
    serde_json::to_vec(value).map_err(|e| Stop::Failed(format!("serializing: {e}")))
}

struct Producer {
    tx: Scoped,
    out: mpsc::Sender<Message>,
    mtime: u64,
}

/// JSON Lines members of one kind, closed at [`SEGMENT_LINES`] lines or [`SEGMENT_BYTES`].
struct Segments {
    kind: Kind,
    number: usize,
    lines: usize,
    buf: Vec<u8>,
}

impl Segments {
    fn new(kind: Kind) -> Self {
        Segments {
            kind,
            number: 0,
            lines: 0,
            buf: Vec::new(),
        }
    }
}

impl Producer {
    async fn send(&mut self, path: String, bytes: Vec<u8>, mtime: u64) -> Result<(), Stop> {
        self.out
            .send(Message::Member { path, bytes, mtime })
            .await
            .map_err(|_| Stop::Closed)
    }

    async fn push<T: Serialize>(&mut self, seg: &mut Segments, record: &T) -> Result<(), Stop> {
        let mut line = to_json(record)?;
        line.push(b'\n');
        seg.buf.extend_from_slice(&line);
        seg.lines += 1;
        if seg.lines >= SEGMENT_LINES || seg.buf.len() >= SEGMENT_BYTES {
            self.flush(seg).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, seg: &mut Segments) -> Result<(), Stop> {
        if seg.lines == 0 {
            return Ok(());
        }
        seg.number += 1;
        seg.lines = 0;
        let bytes = std::mem::take(&mut seg.buf);
        let mtime = self.mtime;
        self.send(segment_name(seg.kind, seg.number), bytes, mtime)
            .await
    }

    async fn run(&mut self, manifest: &Manifest) -> Result<(), Stop> {
        let mut bytes = serde_json::to_vec_pretty(manifest)
            .map_err(|e| Stop::Failed(format!("serializing: {e}")))?;
        bytes.push(b'\n');
        let mtime = self.mtime;
        self.send(MANIFEST.into(), bytes, mtime).await?;
        self.memories().await?;
        self.notes().await?;
        self.sessions().await?;
        self.tasks().await
    }

    async fn memories(&mut self) -> Result<(), Stop> {
        let mut after = None;
        loop {
            let page = memories::page(&mut self.tx, after, MEMORY_PAGE).await?;
            for record in &page {
                let content = memories::content(&mut self.tx, record.id).await?;
                let mut json = to_json(record)?;
                json.push(b'\n');
                let mtime = u64::try_from(record.updated_at.timestamp()).unwrap_or(0);
                self.send(memory_record_name(record.id), json, mtime)
                    .await?;
                self.send(memory_content_name(record.id), content.into_bytes(), mtime)
                    .await?;
            }
            match page.last() {
                Some(last) if i64::try_from(page.len()).unwrap_or(0) == MEMORY_PAGE => {
                    after = Some(last.id);
                }
                _ => return Ok(()),
            }
        }
    }

    async fn notes(&mut self) -> Result<(), Stop> {
        let mut seg = Segments::new(Kind::Notes);
        let mut after: Option<String> = None;
        loop {
            let page = notes::notes_page(&mut self.tx, after.as_deref(), PAGE).await?;
            for record in &page {
                self.push(&mut seg, record).await?;
            }
            match page.last() {
                Some(last) if i64::try_from(page.len()).unwrap_or(0) == PAGE => {
                    after = Some(last.agent_name.clone());
                }
                _ => break,
            }
        }
        self.flush(&mut seg).await?;

        let mut seg = Segments::new(Kind::NoteRevisions);
        let mut after: Option<(String, i64)> = None;
        loop {
            let position = after.as_ref().map(|(a, v)| (a.as_str(), *v));
            let page = notes::revisions_page(&mut self.tx, position, PAGE).await?;
            for record in &page {
                self.push(&mut seg, record).await?;
            }
            match page.last() {
                Some(last) if i64::try_from(page.len()).unwrap_or(0) == PAGE => {
                    after = Some((last.agent_name.clone(), last.version));
                }
                _ => break,
            }
        }
        self.flush(&mut seg).await
    }

    async fn sessions(&mut self) -> Result<(), Stop> {
        let mut seg = Segments::new(Kind::Sessions);
        let mut after: Option<String> = None;
        loop {
            let page = conversations::sessions_page(&mut self.tx, after.as_deref(), PAGE).await?;
            for record in &page {
                self.push(&mut seg, record).await?;
            }
            match page.last() {
                Some(last) if i64::try_from(page.len()).unwrap_or(0) == PAGE => {
                    after = Some(last.session_id.clone());
                }
                _ => break,
            }
        }
        self.flush(&mut seg).await?;

        let mut seg = Segments::new(Kind::Messages);
        let mut after = 0i64;
        loop {
            let page = conversations::messages_page(&mut self.tx, after, PAGE).await?;
            for (_, record) in &page {
                self.push(&mut seg, record).await?;
            }
            match page.last() {
                Some((seq, _)) if i64::try_from(page.len()).unwrap_or(0) == PAGE => after = *seq,
                _ => break,
            }
        }
        self.flush(&mut seg).await?;

        let mut seg = Segments::new(Kind::SessionBatches);
        let mut after: Option<Uuid> = None;
        loop {
            let page = conversations::batches_page(&mut self.tx, after, PAGE).await?;
            for record in &page {
                self.push(&mut seg, record).await?;
            }
            match page.last() {
                Some(last) if i64::try_from(page.len()).unwrap_or(0) == PAGE => {
                    after = Some(last.id);
                }
                _ => break,
            }
        }
        self.flush(&mut seg).await
    }

    async fn tasks(&mut self) -> Result<(), Stop> {
        let mut after: Option<Uuid> = None;
        loop {
            let ids = sqlx::query_scalar!(
                "SELECT id FROM tasks
                 WHERE tenant_id = current_setting('mnemo.tenant')
                   AND user_id = current_setting('mnemo.user')
                   AND ($1::uuid IS NULL OR id > $1)
                 ORDER BY id LIMIT $2",
                after,
                PAGE
            )
            .fetch_all(&mut self.tx)
            .await?;
            for id in &ids {
                // The per-task export, file for file.
                let task = task_transfer::load(&mut self.tx, *id).await?;
                let mtime = u64::try_from(task.metadata.timestamps.last_updated_at.timestamp())
                    .unwrap_or(0);
                let files = task_export::render(&task)
                    .map_err(|e| Stop::Failed(format!("rendering task {id}: {e}")))?;
                drop(task);
                for (path, bytes) in files {
                    self.send(format!("{}/{id}/{path}", bundle::ROOT), bytes, mtime)
                        .await?;
                }
            }
            match ids.last() {
                Some(last) if i64::try_from(ids.len()).unwrap_or(0) == PAGE => after = Some(*last),
                _ => return Ok(()),
            }
        }
    }
}

/// Compressed output on its way to the body; a send fails once the client is gone.
struct BodyWriter {
    buf: Vec<u8>,
    tx: Option<mpsc::Sender<Result<Bytes, std::io::Error>>>,
}

impl BodyWriter {
    fn send_buf(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        match &self.tx {
            Some(tx) => tx
                .blocking_send(Ok(chunk))
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        }
    }

    /// Ends the body with an error; nothing written afterwards is sent.
    fn abort(&mut self, detail: String) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.blocking_send(Err(std::io::Error::other(detail)));
        }
    }
}

impl Write for BodyWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.tx.is_none() {
            return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= BODY_CHUNK {
            self.send_buf()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_buf()
    }
}

fn header(path: &str, size: u64, mtime: u64) -> std::io::Result<tar::Header> {
    let mut header = tar::Header::new_ustar();
    header.set_path(path)?;
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_size(size);
    header.set_mtime(mtime);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    Ok(header)
}

/// The packer: members in, `.tar.gz` bytes out.
fn pack(mut rx: mpsc::Receiver<Message>, body: mpsc::Sender<Result<Bytes, std::io::Error>>) {
    let writer = BodyWriter {
        buf: Vec::with_capacity(BODY_CHUNK),
        tx: Some(body),
    };
    let mut builder = tar::Builder::new(GzEncoder::new(writer, Compression::new(6)));
    let failure = loop {
        match rx.blocking_recv() {
            Some(Message::Member { path, bytes, mtime }) => {
                let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                let appended =
                    header(&path, size, mtime).and_then(|h| builder.append(&h, bytes.as_slice()));
                if let Err(err) = appended {
                    break format!("packing {path}: {err}");
                }
            }
            Some(Message::Done) => {
                let finished = builder
                    .into_inner()
                    .and_then(GzEncoder::finish)
                    .and_then(|mut w| w.flush());
                if let Err(err) = finished {
                    tracing::debug!(error = %err, "account export: the client went away at the end");
                }
                return;
            }
            Some(Message::Failed(detail)) => break detail,
            None => break "the export stopped before its end".to_string(),
        }
    };
    builder.get_mut().get_mut().abort(failure);
}

//! The account import: an archive in the export layout restored into the caller's account, in one
//! transaction (a refused archive stores nothing).
//!
//! The body is never held whole. A blocking thread reads it as it arrives (gunzip, tar), checks
//! every member header before reading its data (type, path, place in the layout and in the order,
//! size against the caps), parses and checks each member's records, and hands them to the request
//! task through a small bounded channel; the request task writes them in its transaction. At the
//! end the counts read must equal the manifest's, so an archive cut at a member boundary is
//! refused too.
//!
//! Answers: a body or archive past a size cap is 413 (`limit_bytes`); an archive that is not
//! gzip/tar, does not follow the layout, or holds invalid records is 422 naming the `member` (and
//! the `line` of a JSON Lines member); anything that already exists in the account (a memory id or
//! key, an agent's notes, a session id, a task id) is 409 naming the member.

mod read;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use futures::StreamExt;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::layout::*;
use crate::access::Caller;
use crate::conversations::transfer::{
    self as conversations, BatchRecord, MessageRecord, SessionRecord,
};
use crate::error::{ApiError, ApiResult};
use crate::memories::transfer::{self as memories, MemoryRecord};
use crate::notes::transfer::{self as notes, NotesRecord, RevisionRecord};
use crate::state::AppState;
use crate::tasks::workspace::bundle::Bundle;
use crate::tasks::workspace::transfer as task_transfer;
use read::read_archive;

/// Largest manifest.
const MANIFEST_MAX_BYTES: u64 = 64 * 1024;
/// Largest memory record (its metadata is at most 64 KiB).
const MEMORY_RECORD_MAX_BYTES: u64 = 1024 * 1024;
/// Largest JSON Lines member: an export closes them at 8 MiB plus one record.
pub const SEGMENT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The caps an import is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The body as sent (compressed).
    pub body_bytes: u64,
    /// The sum of all member sizes (unpacked).
    pub unpacked_bytes: u64,
    /// A memory's content (`MNEMO_MEMORY_MAX_BYTES`).
    pub memory_bytes: u64,
    /// A notes document or revision (`MNEMO_NOTES_MAX_BYTES`).
    pub notes_bytes: usize,
    /// One file of a task (`MNEMO_TASKS_ARTIFACT_MAX_BYTES`).
    pub task_member_bytes: u64,
    /// All files of one task (`MNEMO_TASKS_IMPORT_MAX_BYTES`).
    pub task_bytes: u64,
    /// Files of one task (`MNEMO_TASKS_IMPORT_MAX_MEMBERS`).
    pub task_members: usize,
}

impl Limits {
    pub fn of(state: &AppState) -> Self {
        let c = &state.config;
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        Limits {
            body_bytes: n(c.rights.account_import_max_bytes),
            unpacked_bytes: n(c.rights.account_import_max_unpacked_bytes),
            memory_bytes: n(c.memory_max_bytes),
            notes_bytes: c.notes.max_bytes,
            task_member_bytes: n(c.tasks.artifact_max_bytes),
            task_bytes: n(c.tasks.import_max_bytes),
            task_members: c.tasks.import_max_members,
        }
    }
}

/// What the reader hands the writer.
enum Item {
    Manifest(Manifest),
    Memory {
        member: String,
        record: Box<MemoryRecord>,
        content: String,
    },
    Notes(String, Vec<NotesRecord>),
    Revisions(String, Vec<RevisionRecord>),
    Sessions(String, Vec<SessionRecord>),
    Messages(String, Vec<MessageRecord>),
    Batches(String, Vec<BatchRecord>),
    Task {
        dir: String,
        id: Uuid,
        bundle: Box<Bundle>,
    },
}

/// 422 naming the member.
fn refuse(member: &str, detail: impl std::fmt::Display) -> ApiError {
    ApiError::invalid("archive", format!("archive member {member:?}: {detail}"))
        .with("member", member)
}

/// 413 naming the member and the cap.
fn too_large(member: &str, detail: impl std::fmt::Display, limit: u64) -> ApiError {
    ApiError::too_large(format!("archive member {member:?}: {detail}"))
        .with("member", member)
        .with("limit_bytes", limit)
}

fn broken(detail: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(
        "archive",
        format!("the body is not a readable .tar.gz archive: {detail}"),
    )
}

/// A check of a record (a 422 or 413 of its own), restated for the member and line it came from.
fn at_record(member: &str, line: Option<usize>, err: ApiError) -> ApiError {
    let ApiError::Problem(problem) = err else {
        return err;
    };
    let place = match line {
        Some(line) => format!("archive member {member:?}, line {line}"),
        None => format!("archive member {member:?}"),
    };
    let mut out =
        crate::error::Problem::new(problem.status(), format!("{place}: {}", problem.detail));
    out.extensions = problem.extensions;
    let mut err = ApiError::problem(out).with("member", member);
    if let Some(line) = line {
        err = err.with("line", line);
    }
    err
}

/// A database refusal while writing `member`: a duplicate is 409, another violated rule or bad
/// value 422, anything else is what it is.
fn db_refusal(member: &str, err: sqlx::Error) -> ApiError {
    if let sqlx::Error::Database(db) = &err {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        let constraint = db.constraint().unwrap_or_default().to_string();
        if code == "23505" {
            return ApiError::conflict(format!(
                "archive member {member:?}: it holds something this account already has \
                 ({constraint}); nothing was imported"
            ))
            .with("member", member)
            .with("constraint", constraint);
        }
        if code.starts_with("54") {
            // A value past what PostgreSQL can hold (a text too long to index, ...).
            return ApiError::too_large(format!(
                "archive member {member:?}: a value is too large to store: {}",
                db.message()
            ))
            .with("member", member);
        }
        if code.starts_with("23") || code.starts_with("22") {
            return refuse(member, format!("refused by the database: {}", db.message()))
                .with("constraint", constraint);
        }
    }
    ApiError::from(err)
}

/// The same for errors of the task store, which come as [`ApiError`]s.
fn task_refusal(member: &str, err: ApiError) -> ApiError {
    match err {
        ApiError::Problem(p) if p.status == 409 => ApiError::conflict(format!(
            "archive member {member:?}: this account already has the task; nothing was imported"
        ))
        .with("member", member),
        ApiError::Problem(_) => err,
        ApiError::Internal(inner) => match inner.downcast::<sqlx::Error>() {
            Ok(db) => db_refusal(member, db),
            Err(inner) => ApiError::Internal(inner),
        },
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Restores the archive in `body` into `principal`'s account; answers what it restored.
pub async fn run(state: &AppState, caller: &Caller, body: Body) -> ApiResult<Counts> {
    let limits = Limits::of(state);
    let over = Arc::new(AtomicBool::new(false));
    let seen = over.clone();
    let cap = limits.body_bytes;
    let mut received = 0u64;
    let stream = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        received = received.saturating_add(count(chunk.len()));
        if received > cap {
            seen.store(true, Ordering::SeqCst);
            return Err(std::io::Error::other(
                "the body is larger than the import cap",
            ));
        }
        Ok(chunk)
    });
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let (items_tx, mut items) = mpsc::channel::<ApiResult<Item>>(2);
    tokio::task::spawn_blocking(move || {
        let result = read_archive(
            reader,
            &limits,
            || !items_tx.is_closed(),
            |item| items_tx.blocking_send(Ok(item)).is_ok(),
        );
        if let Err(err) = result {
            let _ = items_tx.blocking_send(Err(err));
        }
    });
    let body_too_large = || {
        ApiError::too_large(format!(
            "the archive is larger than {cap} bytes (MNEMO_ACCOUNT_IMPORT_MAX_BYTES)"
        ))
        .with("limit_bytes", cap)
    };

    let caps = task_transfer::ImportCaps {
        max_plan_steps: state.config.tasks.max_plan_steps,
        max_parts: state.config.tasks.step_max_parts,
    };
    let mut tx = caller.begin().await?;
    let mut manifest: Option<Manifest> = None;
    let mut got = Counts::default();
    // Exported message counts, set once the messages are restored (which count themselves).
    let mut message_counts: Vec<(String, i32)> = Vec::new();
    while let Some(item) = items.recv().await {
        let item = match item {
            Ok(item) => item,
            Err(_) if over.load(Ordering::SeqCst) => return Err(body_too_large()),
            Err(err) => return Err(err),
        };
        match item {
            Item::Manifest(m) => manifest = Some(m),
            Item::Memory {
                member,
                record,
                content,
            } => {
                memories::restore(&mut tx, &record, content)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.memories += 1;
            }
            Item::Notes(member, records) => {
                notes::restore_notes(&mut tx, &records)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.notes += count(records.len());
            }
            Item::Revisions(member, records) => {
                notes::restore_revisions(&mut tx, &records)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.note_revisions += count(records.len());
            }
            Item::Sessions(member, records) => {
                conversations::restore_sessions(&mut tx, &records)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.sessions += count(records.len());
                message_counts.extend(
                    records
                        .iter()
                        .filter_map(|r| Some((r.session_id.clone(), r.message_count?))),
                );
            }
            Item::Messages(member, records) => {
                conversations::restore_messages(&mut tx, &records)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.messages += count(records.len());
            }
            Item::Batches(member, records) => {
                conversations::restore_batches(&mut tx, &records)
                    .await
                    .map_err(|e| db_refusal(&member, e))?;
                got.session_batches += count(records.len());
            }
            Item::Task { dir, id, bundle } => {
                let member = format!("{}/{dir}/", crate::tasks::workspace::bundle::ROOT);
                task_transfer::store(&mut tx, &dir, *bundle, id, caps)
                    .await
                    .map_err(|e| task_refusal(&member, e))?;
                got.tasks += 1;
            }
        }
    }
    if over.load(Ordering::SeqCst) {
        return Err(body_too_large());
    }
    let Some(manifest) = manifest else {
        return Err(ApiError::invalid(
            "archive",
            format!("the archive holds no {MANIFEST}"),
        ));
    };
    if manifest.counts != got {
        return Err(ApiError::invalid(
            "archive",
            format!(
                "the archive is incomplete or altered: the manifest counts {:?}, the archive holds {:?}",
                manifest.counts, got
            ),
        )
        .with("member", MANIFEST));
    }
    conversations::restore_message_counts(&mut tx, &message_counts).await?;
    tx.commit().await?;
    Ok(got)
}

//! A task's artifacts, free of HTTP: storing one (checked, hashed, the task touched), reading
//! one under the conditions of a request (`If-None-Match`, `Range`, `If-Range`), deleting one no
//! step refers to.

use uuid::Uuid;

use super::model::*;
use super::range::{self, RangeAnswer};
use super::{import, parts, store};
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// The bytes of an upload with their media type and an optional file name.
pub struct Upload {
    pub bytes: Vec<u8>,
    pub mime_type: String,
    pub name: Option<String>,
}

impl Upload {
    /// The upload with `name` (when given) in place of the form's file name, checked: 422
    /// naming `name` for a bad one.
    pub fn named(mut self, name: Option<String>) -> ApiResult<Self> {
        self.name = name.or(self.name);
        if let Some(name) = &self.name {
            parts::check_name("name", name)?;
        }
        Ok(self)
    }
}

/// Stores an upload as a new artifact of task `id` (404 when the caller has no such task).
pub async fn store(tx: &mut Scoped, id: Uuid, upload: &Upload) -> ApiResult<Artifact> {
    let sha = import::sha256_hex(&upload.bytes);
    store::touch_task(tx, id).await?;
    let artifact = store::insert_artifact(
        tx,
        id,
        &store::ArtifactWrite {
            id: Uuid::now_v7(),
            name: upload.name.as_deref(),
            mime_type: &upload.mime_type,
            sha256: &sha,
            content: &upload.bytes,
            created_at: None,
        },
    )
    .await?;
    Ok(artifact)
}

/// The conditions a read is asked under: the raw values of `If-None-Match`, `Range` and
/// `If-Range`.
#[derive(Debug, Default)]
pub struct Conditions {
    pub if_none_match: Option<String>,
    pub range: Option<String>,
    pub if_range: Option<String>,
}

/// What a read answers.
pub enum Read {
    /// The caller's copy is current (`If-None-Match` named the ETag).
    NotModified { etag: String },
    /// The range misses the artifact's `size` bytes.
    Unsatisfiable { answer: RangeAnswer, size: u64 },
    /// The whole artifact or the asked range of it.
    Bytes {
        artifact: Artifact,
        etag: String,
        answer: RangeAnswer,
        bytes: Vec<u8>,
    },
}

impl Read {
    /// An artifact's ETag: its sha256, quoted.
    fn etag(artifact: &Artifact) -> String {
        format!("\"{}\"", artifact.sha256)
    }
}

/// Reads artifact `artifact_id` of task `id` under `conditions`; only the asked bytes are read.
/// 404 when the caller has no such task or artifact.
pub async fn read(
    tx: &mut Scoped,
    id: Uuid,
    artifact_id: Uuid,
    conditions: &Conditions,
) -> ApiResult<Read> {
    let artifact = store::artifact(tx, id, artifact_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no artifact {artifact_id}")))?;
    let etag = Read::etag(&artifact);
    let size = u64::try_from(artifact.size).unwrap_or(0);
    if conditions
        .if_none_match
        .as_deref()
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        return Ok(Read::NotModified { etag });
    }
    let range_header = conditions.range.as_deref().filter(|_| {
        conditions
            .if_range
            .as_deref()
            .is_none_or(|v| v.trim() == etag)
    });
    let answer = range::answer(range_header, size);
    let (start, count) = match answer {
        RangeAnswer::Full => (0, size),
        RangeAnswer::Partial { start, end } => (start, end - start + 1),
        RangeAnswer::Unsatisfiable => return Ok(Read::Unsatisfiable { answer, size }),
    };
    let bytes = store::artifact_bytes(
        tx,
        id,
        artifact_id,
        i64::try_from(start).unwrap_or(i64::MAX),
        i64::try_from(count).unwrap_or(i64::MAX),
    )
    .await?;
    Ok(Read::Bytes {
        artifact,
        etag,
        answer,
        bytes,
    })
}

/// Deletes an artifact no step refers to: 409 naming the step that does (the history is
/// immutable), 404 when the caller has no such task or artifact.
pub async fn delete(tx: &mut Scoped, id: Uuid, artifact_id: Uuid) -> ApiResult<()> {
    store::touch_task(tx, id).await?;
    if let Some(step_id) = store::artifact_referrer(tx, id, artifact_id).await? {
        return Err(ApiError::conflict(format!(
            "step {step_id} refers to artifact {artifact_id}; the history cannot lose it"
        ))
        .with("step_id", step_id));
    }
    if !store::delete_artifact(tx, id, artifact_id).await? {
        return Err(ApiError::not_found(format!(
            "task {id} has no artifact {artifact_id}"
        )));
    }
    Ok(())
}

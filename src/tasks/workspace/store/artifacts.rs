//! Artifacts: storing, listing, reading (whole or a byte range), finding a referring step and
//! deleting.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::Scoped;
use crate::error::ApiResult;
use crate::tasks::workspace::model::*;
use crate::tasks::workspace::parts;

/// A `task_artifacts` row without its bytes, as the statements below select it (`task_id, id,
/// name, mime_type, size, sha256, created_at`).
struct ArtifactRow {
    task_id: Uuid,
    id: Uuid,
    name: Option<String>,
    mime_type: String,
    size: i64,
    sha256: String,
    created_at: DateTime<Utc>,
}

impl From<ArtifactRow> for Artifact {
    fn from(r: ArtifactRow) -> Self {
        Artifact {
            artifact_id: r.id,
            uri: parts::artifact_uri(r.task_id, r.id),
            mime_type: r.mime_type,
            size: r.size,
            sha256: r.sha256,
            name: r.name,
            created_at: r.created_at,
        }
    }
}

/// An artifact to store.
pub struct ArtifactWrite<'a> {
    pub id: Uuid,
    pub name: Option<&'a str>,
    pub mime_type: &'a str,
    pub sha256: &'a str,
    pub content: &'a [u8],
    /// Default: now.
    pub created_at: Option<DateTime<Utc>>,
}

pub async fn insert_artifact(
    tx: &mut Scoped,
    task_id: Uuid,
    a: &ArtifactWrite<'_>,
) -> ApiResult<Artifact> {
    let row = sqlx::query_as!(
        ArtifactRow,
        "INSERT INTO task_artifacts (tenant_id, user_id, task_id, id, name, mime_type, size, sha256, content, created_at)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4,
                 octet_length($6::bytea), $5, $6, coalesce($7, now()))
         RETURNING task_id, id, name, mime_type, size, sha256, created_at",
        task_id,
        a.id,
        a.name,
        a.mime_type,
        a.sha256,
        a.content,
        a.created_at
    )
    .fetch_one(tx)
    .await?;
    Ok(row.into())
}

pub async fn artifact(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
) -> Result<Option<Artifact>, sqlx::Error> {
    let row = sqlx::query_as!(
        ArtifactRow,
        "SELECT task_id, id, name, mime_type, size, sha256, created_at FROM task_artifacts
          WHERE task_id = $1 AND id = $2",
        task_id,
        id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Into::into))
}

/// Bytes `start..start + len` of an artifact (only the TOAST chunks holding them are read).
pub async fn artifact_bytes(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
    start: i64,
    len: i64,
) -> Result<Vec<u8>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT substring(content FROM $3::int FOR $4::int) AS "bytes!" FROM task_artifacts WHERE task_id = $1 AND id = $2"#,
        task_id,
        id,
        // Bound as int8, as always: the statement's `::int` narrows them, and a value past
        // int4 is PostgreSQL's error.
        (start + 1) as _,
        len as _
    )
    .fetch_one(tx)
    .await
}

pub async fn artifacts_after(
    tx: &mut Scoped,
    task_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Artifact>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        ArtifactRow,
        "SELECT task_id, id, name, mime_type, size, sha256, created_at FROM task_artifacts
         WHERE task_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(tx)
    .await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    Ok((rows.into_iter().map(Into::into).collect(), more))
}

/// Every artifact of a task with its bytes, oldest first (export).
pub async fn all_artifacts(
    tx: &mut Scoped,
    task_id: Uuid,
) -> Result<Vec<(Artifact, Vec<u8>)>, sqlx::Error> {
    struct Full {
        task_id: Uuid,
        id: Uuid,
        name: Option<String>,
        mime_type: String,
        size: i64,
        sha256: String,
        created_at: DateTime<Utc>,
        content: Vec<u8>,
    }
    let rows = sqlx::query_as!(
        Full,
        "SELECT task_id, id, name, mime_type, size, sha256, created_at, content FROM task_artifacts
          WHERE task_id = $1 ORDER BY id",
        task_id
    )
    .fetch_all(tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let meta = ArtifactRow {
                task_id: r.task_id,
                id: r.id,
                name: r.name,
                mime_type: r.mime_type,
                size: r.size,
                sha256: r.sha256,
                created_at: r.created_at,
            };
            (meta.into(), r.content)
        })
        .collect())
}

/// The id of a step referring to the artifact, if any.
pub async fn artifact_referrer(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    let probe = serde_json::json!([{"type": "artifact", "artifact_id": id}]);
    sqlx::query_scalar!(
        "SELECT step_id FROM task_steps WHERE task_id = $1 AND parts @> $2 ORDER BY seq LIMIT 1",
        task_id,
        probe
    )
    .fetch_optional(tx)
    .await
}

pub async fn delete_artifact(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM task_artifacts WHERE task_id = $1 AND id = $2",
        task_id,
        id
    )
    .execute(tx)
    .await?;
    Ok(done.rows_affected() > 0)
}

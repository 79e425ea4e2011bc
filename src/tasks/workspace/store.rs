//! The SQL of the task workspace: steps, tool calls, searchable step text, artifacts, the
//! configuration snapshot, waits, and search. Every function runs inside the caller's [`Scoped`]
//! transaction (row-level security limits it to the caller); inserts write `tenant_id`/`user_id`
//! from the transaction's settings.
//!
//! [`Scoped`]: crate::db::Scoped

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::model::*;
use super::parts::{self, Part, StepRefs};
use super::waits::WaitStatus;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// 404 for a task the caller does not have.
pub fn task_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("no task {id}"))
}

/// Characters per indexed chunk of step text.
pub const CHUNK_CHARS: usize = 20_000;

/// Locks the task row and moves its `lastUpdatedAt` (a paused task resumes: see migration 0006);
/// 404 when the caller has no such task.
pub async fn touch_task(tx: &mut Scoped, task_id: Uuid) -> ApiResult<()> {
    sqlx::query_scalar!(
        "UPDATE tasks SET updated_at = now() WHERE id = $1 RETURNING id",
        task_id
    )
    .fetch_optional(tx)
    .await?
    .map(|_| ())
    .ok_or_else(|| task_not_found(task_id))
}

/// 404 unless the caller has the task.
pub async fn require_task(tx: &mut Scoped, task_id: Uuid) -> ApiResult<()> {
    sqlx::query_scalar!("SELECT 1 FROM tasks WHERE id = $1", task_id)
        .fetch_optional(tx)
        .await?
        .map(|_| ())
        .ok_or_else(|| task_not_found(task_id))
}

// ---------------------------------------------------------------------------------------------
// Steps

/// A `task_steps` row as the statements below select it (`seq, step_id, agent_name, parts,
/// created_at`).
struct StepRow {
    seq: i32,
    step_id: String,
    agent_name: String,
    parts: Value,
    created_at: DateTime<Utc>,
}

impl StepRow {
    fn into_step(self) -> ApiResult<Step> {
        let parts: Vec<Part> = serde_json::from_value(self.parts)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored step parts: {e}")))?;
        Ok(Step {
            seq: self.seq,
            step_id: self.step_id,
            agent_name: self.agent_name,
            parts,
            created_at: self.created_at,
        })
    }
}

pub async fn step_by_id(tx: &mut Scoped, task_id: Uuid, step_id: &str) -> ApiResult<Option<Step>> {
    let row = sqlx::query_as!(
        StepRow,
        "SELECT seq, step_id, agent_name, parts, created_at FROM task_steps
          WHERE task_id = $1 AND step_id = $2",
        task_id,
        step_id
    )
    .fetch_optional(tx)
    .await?;
    row.map(StepRow::into_step).transpose()
}

/// Which of `ids` are tool calls this task already made.
pub async fn known_calls(
    tx: &mut Scoped,
    task_id: Uuid,
    ids: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar!(
        "SELECT tool_call_id FROM task_tool_calls WHERE task_id = $1 AND tool_call_id = ANY($2)",
        task_id,
        ids
    )
    .fetch_all(tx)
    .await
}

/// An artifact's id and mime type.
pub struct ArtifactType {
    pub id: Uuid,
    pub mime_type: String,
}

/// The mime types of those of `ids` that are artifacts of this task.
pub async fn artifact_types(
    tx: &mut Scoped,
    task_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<ArtifactType>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        ArtifactType,
        "SELECT id, mime_type FROM task_artifacts WHERE task_id = $1 AND id = ANY($2)",
        task_id,
        ids
    )
    .fetch_all(tx)
    .await
}

/// Confirms a checked step's references against the database and fills in artifact types:
/// results must answer a call of this task, calls must be new, artifacts must exist.
pub async fn confirm_refs(
    tx: &mut Scoped,
    task_id: Uuid,
    parts: &mut [Part],
    refs: &StepRefs,
) -> ApiResult<()> {
    let earlier: Vec<String> = refs
        .earlier_calls
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    let known = known_calls(tx, task_id, &earlier).await?;
    if let Some((i, id)) = refs
        .earlier_calls
        .iter()
        .find(|(_, id)| !known.contains(id))
    {
        return Err(parts::unknown_call(*i, id));
    }
    let calls: Vec<String> = refs.calls.iter().map(|(_, id)| id.clone()).collect();
    let used = known_calls(tx, task_id, &calls).await?;
    if let Some((i, id)) = refs.calls.iter().find(|(_, id)| used.contains(id)) {
        return Err(parts::duplicate_call(*i, id));
    }
    let ids: Vec<Uuid> = refs.artifacts.iter().map(|(_, id)| *id).collect();
    let found = artifact_types(tx, task_id, &ids).await?;
    for (i, id) in &refs.artifacts {
        let Some(found) = found.iter().find(|a| a.id == *id) else {
            return Err(parts::unknown_artifact(*i, *id));
        };
        if let Some(Part::Artifact { mime_type, .. }) = parts.get_mut(*i)
            && mime_type.is_empty()
        {
            mime_type.clone_from(&found.mime_type);
        }
    }
    Ok(())
}

/// A step ready to store.
#[derive(Debug, Clone)]
pub struct StepWrite {
    pub step_id: String,
    pub agent_name: String,
    pub parts: Vec<Part>,
    /// Default: now.
    pub created_at: Option<DateTime<Utc>>,
}

/// Appends steps after the task's last one, with their tool calls and searchable text: three
/// statements whatever the count. The caller holds the task row lock ([`touch_task`]), which
/// keeps `seq` gap-free under concurrent appends.
pub async fn insert_steps(
    tx: &mut Scoped,
    task_id: Uuid,
    steps: &[StepWrite],
) -> ApiResult<Vec<Step>> {
    let base = sqlx::query_scalar!(
        r#"SELECT coalesce(max(seq), 0) AS "base!" FROM task_steps WHERE task_id = $1"#,
        task_id
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut seqs = Vec::with_capacity(steps.len());
    let mut ids = Vec::with_capacity(steps.len());
    let mut agents = Vec::with_capacity(steps.len());
    let mut bodies = Vec::with_capacity(steps.len());
    let mut times = Vec::with_capacity(steps.len());
    let (mut call_seq, mut call_index, mut call_id, mut call_tool) =
        (vec![], vec![], vec![], vec![]);
    let (
        mut text_seq,
        mut text_index,
        mut text_chunk,
        mut text_kind,
        mut text_offset,
        mut text_body,
    ) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (n, step) in steps.iter().enumerate() {
        let seq = base + i32::try_from(n + 1).unwrap_or(i32::MAX);
        seqs.push(seq);
        ids.push(step.step_id.clone());
        agents.push(step.agent_name.clone());
        bodies.push(
            serde_json::to_value(&step.parts)
                .map_err(|e| ApiError::Internal(anyhow::anyhow!("step parts: {e}")))?,
        );
        times.push(step.created_at);
        for (i, part) in step.parts.iter().enumerate() {
            if let Part::ToolCall {
                tool_call_id,
                tool_name,
                ..
            } = part
            {
                call_seq.push(seq);
                call_index.push(i32::try_from(i).unwrap_or(i32::MAX));
                call_id.push(tool_call_id.clone());
                call_tool.push(tool_name.clone());
            }
        }
        for (i, kind, text) in parts::searchable(&step.parts) {
            for (chunk, (offset, piece)) in
                parts::chunks(&text, CHUNK_CHARS).into_iter().enumerate()
            {
                text_seq.push(seq);
                text_index.push(i32::try_from(i).unwrap_or(i32::MAX));
                text_chunk.push(i32::try_from(chunk).unwrap_or(i32::MAX));
                text_kind.push(kind.as_str().to_string());
                text_offset.push(i32::try_from(offset).unwrap_or(i32::MAX));
                text_body.push(piece.to_string());
            }
        }
    }
    let rows = sqlx::query_as!(
        StepRow,
        "INSERT INTO task_steps (tenant_id, user_id, task_id, seq, step_id, agent_name, parts, created_at)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, s, i, a, p, coalesce(t, now())
         FROM unnest($2::int[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[]) AS v(s, i, a, p, t)
         RETURNING seq, step_id, agent_name, parts, created_at",
        task_id,
        &seqs,
        &ids,
        &agents,
        &bodies,
        // Elements may be NULL (a step without a time is stamped now()), which the macro's
        // check of a timestamptz[] parameter does not allow for.
        &times as &[Option<DateTime<Utc>>]
    )
    .fetch_all(&mut *tx)
    .await?;
    if !call_id.is_empty() {
        sqlx::query!(
            "INSERT INTO task_tool_calls (tenant_id, user_id, task_id, tool_call_id, seq, part_index, tool_name)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, c, s, i, n
             FROM unnest($2::int[], $3::int[], $4::text[], $5::text[]) AS v(s, i, c, n)",
            task_id,
            &call_seq,
            &call_index,
            &call_id,
            &call_tool
        )
        .execute(&mut *tx)
        .await?;
    }
    if !text_body.is_empty() {
        sqlx::query!(
            "INSERT INTO task_step_texts (tenant_id, user_id, task_id, seq, part_index, chunk, kind, char_offset, content)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, s, i, c, k, o, b
             FROM unnest($2::int[], $3::int[], $4::int[], $5::text[], $6::int[], $7::text[]) AS v(s, i, c, k, o, b)",
            task_id,
            &text_seq,
            &text_index,
            &text_chunk,
            &text_kind,
            &text_offset,
            &text_body
        )
        .execute(&mut *tx)
        .await?;
        if tx.queues_embeddings() {
            let mut seqs: Vec<i64> = text_seq.iter().map(|s| i64::from(*s)).collect();
            seqs.dedup();
            crate::tasks::store::queue_task_items(tx, task_id, "step", &seqs).await?;
        }
    }
    let mut out = rows
        .into_iter()
        .map(StepRow::into_step)
        .collect::<ApiResult<Vec<_>>>()?;
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// Steps after `after` in order; `limit + 1` are fetched to tell whether more follow.
pub async fn steps_after(
    tx: &mut Scoped,
    task_id: Uuid,
    after: i32,
    limit: i64,
) -> ApiResult<(Vec<Step>, bool)> {
    let rows = sqlx::query_as!(
        StepRow,
        "SELECT seq, step_id, agent_name, parts, created_at FROM task_steps
          WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(tx)
    .await?;
    let more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    let steps = rows
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(StepRow::into_step)
        .collect::<ApiResult<Vec<_>>>()?;
    Ok((steps, more))
}

/// The last `n` steps, in order.
pub async fn recent_steps(tx: &mut Scoped, task_id: Uuid, n: i64) -> ApiResult<Vec<Step>> {
    let rows = sqlx::query_as!(
        StepRow,
        "SELECT seq, step_id, agent_name, parts, created_at FROM (
             SELECT seq, step_id, agent_name, parts, created_at FROM task_steps
              WHERE task_id = $1 ORDER BY seq DESC LIMIT $2
         ) last ORDER BY seq",
        task_id,
        n
    )
    .fetch_all(tx)
    .await?;
    rows.into_iter().map(StepRow::into_step).collect()
}

/// Every step of a task, in order (export).
pub async fn all_steps(tx: &mut Scoped, task_id: Uuid) -> ApiResult<Vec<Step>> {
    let rows = sqlx::query_as!(
        StepRow,
        "SELECT seq, step_id, agent_name, parts, created_at FROM task_steps
          WHERE task_id = $1 ORDER BY seq",
        task_id
    )
    .fetch_all(tx)
    .await?;
    rows.into_iter().map(StepRow::into_step).collect()
}

// ---------------------------------------------------------------------------------------------
// Configuration snapshot

/// A `task_configs` row: the snapshot and when it was stored.
struct ConfigRow {
    config: Value,
    created_at: DateTime<Utc>,
}

/// Stores the snapshot once. Returns it and whether this call created it; a different snapshot
/// already stored is 409.
pub async fn put_config(
    tx: &mut Scoped,
    task_id: Uuid,
    config: &Value,
    created_at: Option<DateTime<Utc>>,
) -> ApiResult<(TaskConfigSnapshot, bool)> {
    let inserted = sqlx::query_as!(
        ConfigRow,
        "INSERT INTO task_configs (tenant_id, user_id, task_id, config, created_at)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, coalesce($3, now()))
         ON CONFLICT DO NOTHING RETURNING config, created_at",
        task_id,
        config,
        created_at
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(ConfigRow { config, created_at }) = inserted {
        return Ok((
            TaskConfigSnapshot {
                task_id,
                config,
                created_at,
            },
            true,
        ));
    }
    let existing = get_config(tx, task_id)
        .await?
        .ok_or_else(|| task_not_found(task_id))?;
    if existing.config != *config {
        return Err(ApiError::conflict(
            "this task's configuration snapshot is already stored and cannot change",
        )
        .with("created_at", existing.created_at.to_rfc3339()));
    }
    Ok((existing, false))
}

pub async fn get_config(
    tx: &mut Scoped,
    task_id: Uuid,
) -> Result<Option<TaskConfigSnapshot>, sqlx::Error> {
    let row = sqlx::query_as!(
        ConfigRow,
        "SELECT config, created_at FROM task_configs WHERE task_id = $1",
        task_id
    )
    .fetch_optional(tx)
    .await?;
    Ok(
        row.map(|ConfigRow { config, created_at }| TaskConfigSnapshot {
            task_id,
            config,
            created_at,
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// Artifacts

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
    let more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    Ok((
        rows.into_iter()
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .map(Into::into)
            .collect(),
        more,
    ))
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

// ---------------------------------------------------------------------------------------------
// Waits

/// A `task_waits` row as the statements below select it (`id, task_id, target_type, target_id,
/// criteria, timeout_seconds, poll_interval, status, result_message, created_at, resolved_at`).
struct WaitRow {
    id: Uuid,
    task_id: Uuid,
    target_type: String,
    target_id: String,
    criteria: String,
    timeout_seconds: Option<i64>,
    poll_interval: Option<f64>,
    status: String,
    result_message: Option<String>,
    created_at: DateTime<Utc>,
    resolved_at: Option<DateTime<Utc>>,
}

impl From<WaitRow> for Wait {
    fn from(r: WaitRow) -> Self {
        Wait {
            wait_id: r.id,
            task_id: r.task_id,
            target_type: r.target_type,
            target_id: r.target_id,
            criteria: r.criteria,
            timeout_seconds: r.timeout_seconds,
            poll_interval: r.poll_interval,
            status: WaitStatus::parse(&r.status).unwrap_or(WaitStatus::Error),
            result_message: r.result_message,
            created_at: r.created_at,
            resolved_at: r.resolved_at,
            message_seq: None,
        }
    }
}

/// The task's metadata and coarse status, its row locked until the transaction ends; `None`
/// when there is no task.
pub async fn metadata_for_update(
    tx: &mut Scoped,
    task_id: Uuid,
) -> Result<Option<(Map<String, Value>, String)>, sqlx::Error> {
    struct MetadataRow {
        metadata: Value,
        status: String,
    }
    let row = sqlx::query_as!(
        MetadataRow,
        "SELECT metadata, status FROM tasks WHERE id = $1 FOR UPDATE",
        task_id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|MetadataRow { metadata, status }| {
        let map = match metadata {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        (map, status)
    }))
}

/// The task's metadata, its row locked until the transaction ends; 404 when there is no task.
pub async fn lock_metadata(tx: &mut Scoped, task_id: Uuid) -> ApiResult<Map<String, Value>> {
    metadata_for_update(tx, task_id)
        .await?
        .map(|(metadata, _)| metadata)
        .ok_or_else(|| task_not_found(task_id))
}

/// Writes the task's metadata and moves `lastUpdatedAt`.
pub async fn save_metadata(
    tx: &mut Scoped,
    task_id: Uuid,
    metadata: Map<String, Value>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE tasks SET metadata = $2, updated_at = now() WHERE id = $1",
        task_id,
        Value::Object(metadata)
    )
    .execute(tx)
    .await?;
    Ok(())
}

pub async fn insert_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
    wait: &NewWait,
) -> Result<Wait, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "INSERT INTO task_waits (tenant_id, user_id, task_id, id, target_type, target_id, criteria,
                                 timeout_seconds, poll_interval)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4, $5, $6, $7)
         RETURNING id, task_id, target_type, target_id, criteria, timeout_seconds,
                   poll_interval, status, result_message, created_at, resolved_at",
        task_id,
        id,
        wait.target_type.trim(),
        wait.target_id.trim(),
        wait.criteria.trim(),
        wait.timeout_seconds,
        wait.poll_interval
    )
    .fetch_one(tx)
    .await?;
    Ok(row.into())
}

/// The wait.
pub async fn wait(tx: &mut Scoped, task_id: Uuid, id: Uuid) -> Result<Option<Wait>, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits WHERE task_id = $1 AND id = $2",
        task_id,
        id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Into::into))
}

/// The wait, locked until the transaction ends.
pub async fn lock_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
) -> Result<Option<Wait>, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits WHERE task_id = $1 AND id = $2 FOR UPDATE",
        task_id,
        id
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(Into::into))
}

pub async fn end_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    id: Uuid,
    status: WaitStatus,
    result_message: Option<&str>,
) -> Result<Wait, sqlx::Error> {
    let row = sqlx::query_as!(
        WaitRow,
        "UPDATE task_waits SET status = $3, result_message = $4, resolved_at = now()
         WHERE task_id = $1 AND id = $2
         RETURNING id, task_id, target_type, target_id, criteria, timeout_seconds,
                   poll_interval, status, result_message, created_at, resolved_at",
        task_id,
        id,
        status.as_str(),
        result_message
    )
    .fetch_one(tx)
    .await?;
    Ok(row.into())
}

/// What ending a wait did: the ended wait (with `message_seq`), and the task's message count
/// after the note and how many of its messages the running summary covers.
#[derive(Debug, Clone)]
pub struct WaitEnd {
    pub wait: Wait,
    pub message_count: i32,
    pub summary_covers: i32,
}

/// Ends a watching wait as `status` and records it: the wait row, the task metadata
/// (`active_wait_ids`, `last_wait_state`, `last_wait_event_at`) and `note` as a system message of
/// type wait. The caller holds the task's row lock (`metadata` was read under it) and has checked
/// the wait is still watching. The one path for a client's resolution and for a timeout.
pub async fn finish_wait(
    tx: &mut Scoped,
    task_id: Uuid,
    wait_id: Uuid,
    mut metadata: Map<String, Value>,
    status: WaitStatus,
    result_message: Option<&str>,
    note: &str,
) -> Result<WaitEnd, sqlx::Error> {
    let mut wait = end_wait(&mut *tx, task_id, wait_id, status, result_message).await?;
    let at = wait.resolved_at.unwrap_or(wait.created_at);
    super::waits::record_in_metadata(&mut metadata, &wait_id.to_string(), status, at);
    save_metadata(&mut *tx, task_id, metadata).await?;
    let (seq, covered, _) = crate::tasks::store::append_message(
        &mut *tx,
        task_id,
        crate::tasks::model::Role::System,
        crate::tasks::model::MsgType::Wait,
        note,
    )
    .await?
    .ok_or(sqlx::Error::RowNotFound)?;
    wait.message_seq = Some(seq);
    Ok(WaitEnd {
        wait,
        message_count: seq,
        summary_covers: covered,
    })
}

pub async fn waits_after(
    tx: &mut Scoped,
    task_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<(Vec<Wait>, bool), sqlx::Error> {
    let rows = sqlx::query_as!(
        WaitRow,
        "SELECT id, task_id, target_type, target_id, criteria, timeout_seconds,
                poll_interval, status, result_message, created_at, resolved_at
         FROM task_waits
         WHERE task_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
        task_id,
        after,
        limit + 1
    )
    .fetch_all(tx)
    .await?;
    let more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    Ok((
        rows.into_iter()
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .map(Into::into)
            .collect(),
        more,
    ))
}

//! Steps: appending them with their tool calls and searchable text, checking the references a
//! step makes, and reading steps back by id, page, recent tail or in full.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::tasks::workspace::model::*;
use crate::tasks::workspace::parts::{self, Part, StepRefs};

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
    let (rows, more) = crate::pagination::split(rows, limit);
    let steps = rows
        .into_iter()
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

//! What a pass binds and calls: the parallel-array columns of an embedded group and of task items,
//! which fetched text answers which outbox row, and embedding in slices.

use uuid::Uuid;

use super::*;
use crate::embed::Embedder;

/// One column of an embedded group, for an `unnest` bind.
pub(super) fn column<'a, T>(group: &[Embedded<'a>], f: impl Fn(&'a Text) -> T) -> Vec<T> {
    group.iter().map(|(t, _, _)| f(t)).collect()
}

/// The values of an optional column that are present.
pub(super) fn present<'a, T>(group: &[Embedded<'a>], f: impl Fn(&'a Text) -> Option<T>) -> Vec<T> {
    group.iter().filter_map(|(t, _, _)| f(t)).collect()
}

/// Whether each vector was made with the text's context.
pub(super) fn contexts(group: &[Embedded<'_>]) -> Vec<bool> {
    group.iter().map(|(_, c, _)| *c).collect()
}

/// The vectors of a group.
pub(super) fn embeddings(group: &[Embedded<'_>]) -> Vec<pgvector::Vector> {
    group
        .iter()
        .map(|(_, _, v)| pgvector::Vector::from(v.clone()))
        .collect()
}

/// Whether text `t` was fetched for outbox row `row`.
pub(super) fn belongs(t: &Text, row: &Claimed) -> bool {
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
pub(super) struct TaskItems<'a> {
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
    pub(super) fn of(rows: impl Iterator<Item = &'a Claimed>) -> Self {
        TaskItems {
            rows: rows.filter(|c| c.task_id.is_some()).collect(),
        }
    }

    pub(super) fn columns(&self) -> TaskColumns<'a> {
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

pub(super) async fn embed_all(
    embedder: &Embedder,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, String> {
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

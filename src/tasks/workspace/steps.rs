//! Appending a step to a task's history, free of HTTP: the step checked, then stored once (a
//! retry of the same step with the same id is answered with the stored one).

use uuid::Uuid;

use super::model::*;
use super::parts::{self, Part, StepRefs};
use super::store;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// A step to append, checked: its agent's name, its id (given or new), its parts and the
/// artifacts they name.
pub struct StepPost {
    step_id: String,
    /// Whether the client named the step (so a retry may find it stored).
    named: bool,
    agent_name: String,
    parts: Vec<Part>,
    refs: StepRefs,
}

impl StepPost {
    /// 422 naming the field for a bad agent name, step id or part; at most `max_parts` parts.
    pub fn parse(task_id: Uuid, body: NewStep, max_parts: usize) -> ApiResult<Self> {
        parts::check_name("agent_name", &body.agent_name)?;
        let step_id = match &body.step_id {
            Some(step_id) => {
                parts::check_step_id(step_id)?;
                step_id.clone()
            }
            None => parts::new_step_id(),
        };
        let mut new_parts = body.parts;
        let refs = parts::check_parts(task_id, &mut new_parts, max_parts)?;
        Ok(StepPost {
            step_id,
            named: body.step_id.is_some(),
            agent_name: body.agent_name,
            parts: new_parts,
            refs,
        })
    }
}

/// What appending did.
pub enum Appended {
    Stored(Step),
    /// The same step was stored before under this id: nothing changed.
    Retried(Step),
}

/// Appends `step` to task `task_id`'s history: 404 for no such task, 409 when its id is taken by
/// a step with other content, the stored step for a retry.
pub async fn append(tx: &mut Scoped, task_id: Uuid, step: StepPost) -> ApiResult<Appended> {
    let StepPost {
        step_id,
        named,
        agent_name,
        mut parts,
        refs,
    } = step;
    store::touch_task(tx, task_id).await?;
    if named && let Some(existing) = store::step_by_id(tx, task_id, &step_id).await? {
        if !same_step(&existing, &agent_name, &parts) {
            return Err(ApiError::conflict(format!(
                "step {step_id} already exists with other content"
            ))
            .with("field", "step_id"));
        }
        return Ok(Appended::Retried(existing));
    }
    store::confirm_refs(tx, task_id, &mut parts, &refs).await?;
    let mut stored = store::insert_steps(
        tx,
        task_id,
        &[store::StepWrite {
            step_id,
            agent_name,
            parts,
            created_at: None,
        }],
    )
    .await?;
    let step = stored
        .pop()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("step insert returned no row")))?;
    Ok(Appended::Stored(step))
}

/// True when a retried step matches the stored one (artifact types the client left out are the
/// stored ones).
fn same_step(existing: &Step, agent_name: &str, new_parts: &[Part]) -> bool {
    existing.agent_name == agent_name
        && existing.parts.len() == new_parts.len()
        && existing
            .parts
            .iter()
            .zip(new_parts)
            .all(|(old, new)| match (old, new) {
                (
                    Part::Artifact {
                        artifact_id: a,
                        uri: ua,
                        mime_type: ma,
                    },
                    Part::Artifact {
                        artifact_id: b,
                        uri: ub,
                        mime_type: mb,
                    },
                ) => a == b && ua == ub && (mb.is_empty() || ma == mb),
                _ => old == new,
            })
}

/// Which steps a listing asks for: the last `recent` in order, or a page after a position.
pub enum Listing {
    Recent(i64),
    Page { after: i32, limit: i64 },
}

impl Listing {
    /// 422 naming the parameter: `limit` is checked even when `recent` makes it unused (a bad
    /// parameter is never silently ignored); `recent` is 1 to 500 and excludes `cursor`.
    pub fn parse(query: &StepQuery) -> ApiResult<Self> {
        let limit = crate::pagination::size(query.limit, 50, 500)?;
        let Some(recent) = query.recent else {
            let after = crate::pagination::position::<i32>(query.cursor.as_deref())?;
            return Ok(Listing::Page {
                after: after.unwrap_or(0),
                limit,
            });
        };
        if query.cursor.is_some() {
            return Err(ApiError::invalid(
                "recent",
                "`recent` and `cursor` cannot be combined",
            ));
        }
        if !(1..=500).contains(&recent) {
            return Err(ApiError::invalid(
                "recent",
                "`recent` must be between 1 and 500",
            ));
        }
        Ok(Listing::Recent(recent))
    }
}

/// The steps of task `id` a listing asks for (404 when the caller has no such task).
pub async fn list(tx: &mut Scoped, id: Uuid, listing: Listing) -> ApiResult<StepPage> {
    store::require_task(tx, id).await?;
    let (items, more) = match listing {
        Listing::Recent(recent) => (store::recent_steps(tx, id, recent).await?, false),
        Listing::Page { after, limit } => store::steps_after(tx, id, after, limit).await?,
    };
    let position = items.last().map(|s| s.seq);
    Ok(StepPage {
        items,
        next_cursor: crate::pagination::next(more, position),
    })
}

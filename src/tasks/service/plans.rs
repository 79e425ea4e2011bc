//! Plans and their steps: replans, step status, the actions taken for a step.

use uuid::Uuid;

use super::*;
use crate::tasks::TasksConfig;
use crate::tasks::lifecycle;

/// A replan, checked.
pub struct Replan<'a> {
    sent: &'a serde_json::Value,
    steps: Vec<plan::Step>,
    reason: Option<&'a str>,
}

impl<'a> Replan<'a> {
    /// 422 naming the field for a malformed plan or a blank reason.
    pub fn parse(config: &TasksConfig, body: &'a PutPlan) -> ApiResult<Self> {
        Ok(Replan {
            sent: &body.plan,
            steps: plan::parse(&body.plan, "plan", config.max_plan_steps).map_err(plan_error)?,
            reason: body
                .reason
                .as_deref()
                .map(|r| required_text("reason", r, 10_000))
                .transpose()?,
        })
    }
}

/// Adds plan version N+1. Each new step whose title matches a step of the previous version takes
/// over its status, timestamps and duration; the phase moves to `PLANNING_COMPLETED` (before
/// execution) or `EXECUTING_REPLAN` (during it); a finished task cannot be replanned (409). A
/// plan message records the replan.
pub async fn replan(tx: &mut Scoped, id: Uuid, replan: &Replan<'_>) -> ApiResult<Written<Plan>> {
    let row = store::lock_task(tx, id).await?;
    let target = lifecycle::on_plan(row.phase(), row.status()).map_err(illegal)?;
    let previous = if row.plan_version > 0 {
        store::previous_items(tx, id, row.plan_version).await?
    } else {
        Vec::new()
    };
    let carried = plan::rebase(&replan.steps, &previous);
    let version = row.plan_version + 1;
    store::insert_plan(
        tx,
        id,
        version,
        replan.sent,
        replan.reason,
        &replan.steps,
        &carried,
    )
    .await?;
    let change = match target {
        Some(phase) => {
            lifecycle::apply(row.phase(), row.status(), Some(phase), None).map_err(illegal)?
        }
        None => no_change(&row),
    };
    let write = TaskWrite {
        plan_version: Some(version),
        ..write_for(&row, change)
    };
    store::save_task(tx, id, &write).await?;
    let kept = carried.iter().filter(|c| c.is_some()).count();
    let note = format!(
        "plan v{version}{}: {} steps, {kept} carried over from v{}{}",
        if version > 1 { " (replan)" } else { "" },
        replan.steps.len(),
        row.plan_version,
        replan
            .reason
            .map(|r| format!("; reason: {r}"))
            .unwrap_or_default()
    );
    let mut latest = store::append_message(tx, id, Role::System, MsgType::Plan, &note)
        .await?
        .map(|(seq, covered, _)| (seq, covered));
    if let Some(appended) = note_change(tx, &row, &change).await? {
        latest = Some(appended);
    }
    let plan = store::plan(tx, id, version)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    Ok(Written::new(plan, latest))
}

/// Sets the status of step `ordinal` of the active plan; the first step to start moves a task
/// that has not begun executing to `EXECUTING_PLAN`. 404 for a step the plan does not have.
pub async fn set_step_status(
    tx: &mut Scoped,
    id: Uuid,
    ordinal: i32,
    status: ItemStatus,
) -> ApiResult<Written<PlanItem>> {
    let row = store::lock_task(tx, id).await?;
    let item = store::set_item_status(tx, id, row.plan_version, ordinal, status)
        .await?
        .ok_or_else(|| no_step(ordinal, &row))?;
    let change = match lifecycle::on_item_progress(row.phase()) {
        Some(phase) if status != ItemStatus::Pending => {
            lifecycle::apply(row.phase(), row.status(), Some(phase), None)
                .unwrap_or_else(|_| no_change(&row))
        }
        _ => no_change(&row),
    };
    store::save_task(tx, id, &write_for(&row, change)).await?;
    let appended = note_change(tx, &row, &change).await?;
    Ok(Written::new(item, appended))
}

/// Checks an action: a summary of at most 10,000 characters (422 otherwise).
pub fn check_action(action: &NewAction) -> ApiResult<()> {
    required_text("summary", &action.summary, 10_000).map(drop)
}

/// Records a checked action taken for step `ordinal` of the active plan (404 when it has no such
/// step).
pub async fn add_action(
    tx: &mut Scoped,
    id: Uuid,
    ordinal: i32,
    action: &NewAction,
) -> ApiResult<Action> {
    let row = store::get_task(tx, id).await?;
    // The step's existence is checked by its foreign key (404 through the constraint table);
    // the answer then names the plan version and the step.
    store::insert_action(tx, id, row.plan_version, ordinal, action)
        .await
        .map_err(|err| match ApiError::from(err) {
            missing if missing.is_not_found() => no_step(ordinal, &row),
            other => other,
        })
}

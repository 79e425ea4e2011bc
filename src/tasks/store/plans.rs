//! Plans and their items: versions written by replans, item status.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Postgres, QueryBuilder};
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::tasks::plan::{Previous, Step};

/// A previous item's state carried over by a replan.
#[derive(Debug, Clone)]
pub struct ItemState {
    pub status: String,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub duration_seconds: Option<f64>,
}

pub async fn previous_items(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Vec<Previous<ItemState>>, sqlx::Error> {
    struct Row {
        ordinal: i32,
        title: String,
        status: String,
        started_at: Option<DateTime<Utc>>,
        completed_at: Option<DateTime<Utc>>,
        duration_seconds: Option<f64>,
    }
    let rows = sqlx::query_as!(
        Row,
        "SELECT ordinal, title, status, started_at, completed_at, duration_seconds
         FROM task_plan_items WHERE task_id = $1 AND version = $2 ORDER BY ordinal",
        task_id,
        version
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Previous {
            ordinal: r.ordinal,
            title: r.title,
            state: ItemState {
                status: r.status,
                started_at: r.started_at,
                completed_at: r.completed_at,
                duration_seconds: r.duration_seconds,
            },
        })
        .collect())
}

/// Stores plan `version` and its items (one multi-row INSERT); `carried[i]` is the previous item
/// step `i` takes its state from.
pub async fn insert_plan(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    plan: &Value,
    reason: Option<&str>,
    steps: &[Step],
    carried: &[Option<&Previous<ItemState>>],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO task_plans (tenant_id, user_id, task_id, version, plan, reason)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4)",
        task_id,
        version,
        plan,
        reason
    )
    .execute(&mut *tx)
    .await?;
    let mut insert = QueryBuilder::<Postgres>::new(
        "INSERT INTO task_plan_items (tenant_id, user_id, task_id, version, ordinal, id, stage, \
         title, tool, input, narrative, status, started_at, completed_at, duration_seconds, \
         rebased_from) ",
    );
    insert.push_values(steps.iter().enumerate(), |mut row, (i, step)| {
        let from = carried.get(i).copied().flatten();
        row.push("current_setting('mnemo.tenant')")
            .push("current_setting('mnemo.user')")
            .push_bind(task_id)
            .push_bind(version)
            .push_bind(i32::try_from(i + 1).unwrap_or(i32::MAX))
            .push_bind(Uuid::now_v7())
            .push_bind(step.stage)
            .push_bind(step.title.clone())
            .push_bind(step.tool.clone())
            .push_bind(step.input.clone())
            .push_bind(step.narrative.clone())
            .push_bind(from.map_or_else(|| "pending".to_owned(), |p| p.state.status.clone()))
            .push_bind(from.and_then(|p| p.state.started_at))
            .push_bind(from.and_then(|p| p.state.completed_at))
            .push_bind(from.and_then(|p| p.state.duration_seconds))
            .push_bind(from.map(|p| p.ordinal));
    });
    insert.build().execute(tx).await?;
    Ok(())
}

struct ItemRow {
    id: Uuid,
    ordinal: i32,
    stage: Option<i32>,
    title: String,
    tool: Option<String>,
    input: Option<Value>,
    narrative: Option<String>,
    status: String,
    started_at: Option<DateTime<Utc>>,
    completed_at: Option<DateTime<Utc>>,
    duration_seconds: Option<f64>,
    rebased_from: Option<i32>,
}

impl From<ItemRow> for PlanItem {
    fn from(r: ItemRow) -> Self {
        PlanItem {
            id: r.id,
            ordinal: r.ordinal,
            stage: r.stage,
            title: r.title,
            tool: r.tool,
            input: r.input,
            narrative: r.narrative,
            status: ItemStatus::parse(&r.status).unwrap_or(ItemStatus::Pending),
            started_at: r.started_at,
            completed_at: r.completed_at,
            duration_seconds: r.duration_seconds,
            rebased_from: r.rebased_from,
        }
    }
}

pub async fn plan_items(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Vec<PlanItem>, sqlx::Error> {
    let rows = sqlx::query_as!(
        ItemRow,
        "SELECT id, ordinal, stage, title, tool, input, narrative, status, started_at,
                   completed_at, duration_seconds, rebased_from
         FROM task_plan_items WHERE task_id = $1 AND version = $2
         ORDER BY ordinal",
        task_id,
        version
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(PlanItem::from).collect())
}

pub async fn plan(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Option<Plan>, sqlx::Error> {
    struct Head {
        reason: Option<String>,
        created_at: DateTime<Utc>,
        plan: Value,
    }
    let head = sqlx::query_as!(
        Head,
        "SELECT reason, created_at, plan FROM task_plans WHERE task_id = $1 AND version = $2",
        task_id,
        version
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(Head {
        reason,
        created_at,
        plan,
    }) = head
    else {
        return Ok(None);
    };
    Ok(Some(Plan {
        version,
        reason,
        created_at,
        plan,
        items: plan_items(tx, task_id, version).await?,
    }))
}

pub async fn plan_versions(
    tx: &mut Scoped,
    task_id: Uuid,
    active: i32,
) -> Result<Vec<PlanVersion>, sqlx::Error> {
    struct VersionRow {
        version: i32,
        reason: Option<String>,
        created_at: DateTime<Utc>,
        steps: i64,
    }
    // A scalar `count(*)` subquery always yields a number.
    let rows = sqlx::query_as!(
        VersionRow,
        r#"SELECT p.version, p.reason, p.created_at,
                (SELECT count(*) FROM task_plan_items i
                 WHERE i.task_id = p.task_id AND i.version = p.version) AS "steps!"
         FROM task_plans p WHERE p.task_id = $1 ORDER BY p.version"#,
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PlanVersion {
            version: r.version,
            reason: r.reason,
            created_at: r.created_at,
            steps: r.steps,
            active: r.version == active,
        })
        .collect())
}

/// Sets an item's status; timestamps and duration follow. `None`: no such ordinal.
pub async fn set_item_status(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
    ordinal: i32,
    status: ItemStatus,
) -> Result<Option<PlanItem>, sqlx::Error> {
    // An unchanged status keeps its timestamps, so repeating a PATCH is harmless.
    let row = sqlx::query_as!(
        ItemRow,
        "UPDATE task_plan_items SET
             status = $4,
             started_at = CASE WHEN status = $4 THEN started_at
                               WHEN $4 = 'pending' THEN NULL
                               WHEN $4 = 'active' THEN now()
                               ELSE started_at END,
             completed_at = CASE WHEN status = $4 THEN completed_at
                                 WHEN $4 IN ('pending', 'active') THEN NULL
                                 ELSE now() END,
             duration_seconds = CASE WHEN status = $4 THEN duration_seconds
                                     WHEN $4 IN ('pending', 'active') THEN NULL
                                     ELSE extract(epoch FROM now() - started_at)::float8 END
         WHERE task_id = $1 AND version = $2 AND ordinal = $3
         RETURNING id, ordinal, stage, title, tool, input, narrative, status, started_at,
                   completed_at, duration_seconds, rebased_from",
        task_id,
        version,
        ordinal,
        status.as_str()
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(PlanItem::from))
}

/// The item of the active plan most likely to be where a task failed: a failed one, else the
/// active one.
pub async fn failing_item(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Option<(i32, Option<i32>, String)>, sqlx::Error> {
    struct Failing {
        ordinal: i32,
        stage: Option<i32>,
        title: String,
    }
    let row = sqlx::query_as!(
        Failing,
        "SELECT ordinal, stage, title FROM task_plan_items
         WHERE task_id = $1 AND version = $2 AND status IN ('failed', 'active')
         ORDER BY status = 'failed' DESC, ordinal LIMIT 1",
        task_id,
        version
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|r| (r.ordinal, r.stage, r.title)))
}

/// Counts of the active plan's items by status.
pub async fn item_counts(
    tx: &mut Scoped,
    task_id: Uuid,
    version: i32,
) -> Result<Counts, sqlx::Error> {
    struct StatusCount {
        status: String,
        n: i64,
    }
    let rows = sqlx::query_as!(
        StatusCount,
        r#"SELECT status, count(*) AS "n!" FROM task_plan_items WHERE task_id = $1 AND version = $2
         GROUP BY status"#,
        task_id,
        version
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut counts = Counts::default();
    for StatusCount { status, n } in rows {
        counts.items += n;
        match ItemStatus::parse(&status) {
            Some(ItemStatus::Pending) => counts.pending = n,
            Some(ItemStatus::Active) => counts.active = n,
            Some(ItemStatus::Completed) => counts.completed = n,
            Some(ItemStatus::Failed) => counts.failed = n,
            Some(ItemStatus::Skipped) => counts.skipped = n,
            None => {}
        }
    }
    Ok(counts)
}

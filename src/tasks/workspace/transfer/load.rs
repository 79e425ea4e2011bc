//! The export side: a task and everything under it (plans, events, messages, snapshots, actions,
//! waits, steps, artifacts, the configuration snapshot) read from the database as a [`Bundle`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::error::ApiResult;
use crate::tasks::store as tasks;
use crate::tasks::store::ActionRow;
use crate::tasks::workspace::bundle::*;
use crate::tasks::workspace::store as ws;

/// A `task_plans` row: one plan version.
struct PlanRow {
    version: i32,
    plan: Value,
    reason: Option<String>,
    created_at: DateTime<Utc>,
}

/// A `task_messages` row as exported.
struct MessageRow {
    created_at: DateTime<Utc>,
    role: String,
    msg_type: String,
    content: String,
}

/// A `task_snapshots` row as exported.
struct SnapshotRow {
    label: String,
    content: String,
    is_summarized: bool,
    ts: DateTime<Utc>,
}

/// A `task_action_logs` row as exported, with the action it belongs to.
struct ActionLogRow {
    action_id: Uuid,
    log_type: String,
    content: String,
    created_at: DateTime<Utc>,
}

/// Loads a task and everything under it; 404 when the caller has no such task.
pub async fn load(tx: &mut Scoped, task_id: Uuid) -> ApiResult<Bundle> {
    let row = tasks::get_task(&mut *tx, task_id).await?;
    let archived_at = sqlx::query_scalar!("SELECT archived_at FROM tasks WHERE id = $1", task_id)
        .fetch_one(&mut *tx)
        .await?;

    let plan_rows = sqlx::query_as!(
        PlanRow,
        "SELECT version, plan, reason, created_at FROM task_plans WHERE task_id = $1 ORDER BY version",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let items = sqlx::query_as!(
        ItemState,
        "SELECT version, ordinal, status, started_at, completed_at, duration_seconds, rebased_from
         FROM task_plan_items WHERE task_id = $1 ORDER BY version, ordinal",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut plan_versions = Vec::with_capacity(plan_rows.len());
    let mut plans = Vec::with_capacity(plan_rows.len());
    for PlanRow {
        version,
        plan,
        reason,
        created_at,
    } in plan_rows
    {
        let state = PlanVersionState {
            version,
            reason,
            created_at,
            items: items
                .iter()
                .filter(|i| i.version == version)
                .cloned()
                .collect(),
        };
        plan_versions.push(serde_json::to_value(state).map_err(internal)?);
        plans.push(PlanFile { version, plan });
    }

    // Every event, in log order, through the task log's own reader.
    let (event_rows, _) = crate::tasks::store::events(
        &mut *tx,
        task_id,
        &crate::tasks::model::EventQuery::default(),
        0,
        i64::MAX - 1,
    )
    .await?;
    let events = event_rows
        .into_iter()
        .map(|e| {
            serde_json::to_value(EventLine {
                timestamp: e.timestamp,
                stage: e.stage,
                sub_task_id: e.sub_task_id,
                step_narrative: e.step_narrative,
                tool_name: e.tool_name,
                status: e.status,
                input_payload: e.input_payload,
                result_data: e.result_data,
                error_info: e.error_info,
                duration_ms: e.duration_ms,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;

    let message_rows = sqlx::query_as!(
        MessageRow,
        "SELECT created_at, role, msg_type, content FROM task_messages WHERE task_id = $1 ORDER BY seq",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let messages = message_rows
        .into_iter()
        .map(|m| {
            serde_json::to_value(MessageLine {
                timestamp: m.created_at,
                role: m.role,
                msg_type: m.msg_type,
                content: m.content,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;

    let snapshot_rows = sqlx::query_as!(
        SnapshotRow,
        "SELECT label, content, is_summarized, ts FROM task_snapshots WHERE task_id = $1 ORDER BY seq",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let snapshots = snapshot_rows
        .into_iter()
        .map(|s| Snapshot {
            label: s.label,
            content: s.content,
            is_summarized: s.is_summarized,
            timestamp: s.ts,
        })
        .collect();

    // The actions and their logs by task, for any caller: the scope compared through
    // sub-selects (see `crate::search::scope_unseen`), so that a user the statistics do not know
    // has them read through the indexes by task, not all of the user's through the primary key.
    let action_rows = sqlx::query_as!(
        ActionRow,
        "SELECT id, task_id, version, ordinal, action_type, summary, status,
                input_data, output_data, created_at, updated_at
         FROM task_actions
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user'))
           AND task_id = $1
         ORDER BY created_at, id",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let log_rows = sqlx::query_as!(
        ActionLogRow,
        "SELECT action_id, log_type, content, created_at FROM task_action_logs
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user'))
           AND task_id = $1
         ORDER BY created_at, id",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let actions = action_rows
        .into_iter()
        .map(|a| {
            let logs = log_rows
                .iter()
                .filter(|l| l.action_id == a.id)
                .map(|l| ActionLogLine {
                    log_type: l.log_type.clone(),
                    content: l.content.clone(),
                    created_at: l.created_at,
                })
                .collect();
            serde_json::to_value(ActionLine {
                plan_version: a.version,
                ordinal: a.ordinal,
                action_type: a.action_type,
                summary: a.summary,
                status: a.status,
                input_data: a.input_data,
                output_data: a.output_data,
                created_at: a.created_at,
                updated_at: a.updated_at,
                logs,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    let wait_rows = sqlx::query_as!(
        WaitLine,
        "SELECT id AS wait_id, target_type, target_id, criteria, timeout_seconds, poll_interval,
                status, result_message, created_at, resolved_at
         FROM task_waits WHERE task_id = $1 ORDER BY created_at, id",
        task_id
    )
    .fetch_all(&mut *tx)
    .await?;
    let waits = wait_rows
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;

    let team = ws::get_config(&mut *tx, task_id).await?.map(|c| c.config);
    let steps = ws::all_steps(&mut *tx, task_id)
        .await?
        .into_iter()
        .map(|s| StepRecord {
            step_id: s.step_id,
            agent_name: s.agent_name,
            parts: s.parts,
            created_at: s.created_at,
        })
        .collect();
    let artifacts = ws::all_artifacts(&mut *tx, task_id)
        .await?
        .into_iter()
        .map(|(a, bytes)| ArtifactFile {
            entry: ArtifactIndexEntry {
                artifact_id: a.artifact_id,
                file: artifact_file_name(a.artifact_id, &a.mime_type),
                name: a.name,
                mime_type: a.mime_type,
                size: u64::try_from(a.size).unwrap_or(0),
                sha256: a.sha256,
                created_at: a.created_at,
            },
            bytes,
        })
        .collect();

    Ok(Bundle {
        metadata: Metadata {
            parent_task_id: row.id.to_string(),
            original_user_task: row.original_user_task.clone(),
            task_status: row.phase.clone(),
            final_answer_file: row.final_answer.as_ref().map(|_| FINAL_ANSWER.to_string()),
            error_summary: row.error_summary.clone(),
            timestamps: Timestamps {
                created_at: row.created_at,
                plan_generated_at: row.plan_generated_at,
                execution_started_at: row.execution_started_at,
                synthesis_started_at: row.synthesis_started_at,
                completed_at: row.completed_at,
                last_updated_at: row.updated_at,
            },
            version: SCHEMA_VERSION.to_string(),
            mnemo: Some(MnemoFields {
                name: row.name.clone(),
                status: row.status.clone(),
                metadata: row.metadata.clone(),
                running_summary: row.running_summary.clone(),
                summary_message_count: row.summary_message_count,
                active_plan_version: row.plan_version,
                archived_at,
                plan_versions,
            }),
        },
        plans,
        events,
        messages,
        actions,
        waits,
        final_answer: row.final_answer,
        snapshots,
        team,
        steps,
        artifacts,
    })
}

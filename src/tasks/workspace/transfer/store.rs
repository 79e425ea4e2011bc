//! The import side: a bundle checked in full (plans, events, messages, actions, waits, steps,
//! artifact hashes) and then written back as a new task of the caller.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::tasks::lifecycle::{Phase, Status};
use crate::tasks::model::{ActionStatus, ActionType, EventStatus, MsgType, Role};
use crate::tasks::workspace::bundle::*;
use crate::tasks::workspace::import::{
    refuse, retarget_steps, sha256_hex, time_refused, unstorable_time,
};
use crate::tasks::workspace::parts::{self, Part};
use crate::tasks::workspace::store::{self as ws, ArtifactWrite, StepWrite};
use crate::tasks::workspace::waits::WaitStatus;
use crate::tasks::{plan, store as tasks};

/// Caps an import is checked against.
#[derive(Debug, Clone, Copy)]
pub struct ImportCaps {
    pub max_plan_steps: usize,
    pub max_parts: usize,
}

fn detail_of(err: ApiError) -> String {
    match err {
        ApiError::Problem(p) => match p.extensions.get("field").and_then(Value::as_str) {
            Some(field) if !field.is_empty() => format!("{field}: {}", p.detail),
            _ => p.detail,
        },
        ApiError::Internal(e) => e.to_string(),
    }
}

/// Validates a bundle and writes it as task `new_id` of the caller. Everything is checked before
/// the first write; the caller's transaction makes it all-or-nothing anyway.
pub async fn store(
    tx: &mut Scoped,
    task_dir: &str,
    mut bundle: Bundle,
    new_id: Uuid,
    caps: ImportCaps,
) -> ApiResult<()> {
    let member = |file: &str| format!("{ROOT}/{task_dir}/{file}");
    let meta = &bundle.metadata;
    let phase = Phase::parse(&meta.task_status).ok_or_else(|| {
        refuse(
            &member(METADATA),
            format!("taskStatus {:?} is not a known status", meta.task_status),
        )
    })?;
    let mnemo = meta.mnemo.clone();
    let status = match &mnemo {
        Some(m) => Status::parse(&m.status).ok_or_else(|| {
            refuse(
                &member(METADATA),
                format!("mnemo.status {:?} is not a known status", m.status),
            )
        })?,
        None => phase.status(),
    };
    let name = mnemo
        .as_ref()
        .map(|m| m.name.trim().to_string())
        .filter(|n| !n.is_empty())
        .or_else(|| {
            meta.original_user_task
                .as_deref()
                .map(|t| t.chars().take(200).collect::<String>())
                .filter(|t| !t.trim().is_empty())
        })
        .unwrap_or_else(|| format!("Imported task {}", meta.parent_task_id));

    // Plans: each must parse; item state comes from mnemo.planVersions when present.
    let mut parsed_plans = Vec::with_capacity(bundle.plans.len());
    for p in &bundle.plans {
        let steps = plan::parse(&p.plan, "plan", caps.max_plan_steps).map_err(|e| {
            refuse(
                &member(&plan_file_name(p.version)),
                format!("{}: {}", e.path, e.detail),
            )
        })?;
        parsed_plans.push(steps);
    }
    let mut states: Vec<PlanVersionState> = Vec::new();
    if let Some(m) = &mnemo {
        for v in &m.plan_versions {
            let state: PlanVersionState = serde_json::from_value(v.clone())
                .map_err(|e| refuse(&member(METADATA), format!("mnemo.planVersions: {e}")))?;
            if state.items.iter().any(|i| {
                !matches!(
                    i.status.as_str(),
                    "pending" | "active" | "completed" | "failed" | "skipped"
                )
            }) {
                return Err(refuse(
                    &member(METADATA),
                    format!(
                        "mnemo.planVersions: version {} has an unknown item status",
                        state.version
                    ),
                ));
            }
            let times = state
                .items
                .iter()
                .flat_map(|i| [i.started_at.as_ref(), i.completed_at.as_ref()]);
            if let Some(t) = unstorable_time([Some(&state.created_at)].into_iter().chain(times)) {
                let at = format!("mnemo.planVersions: version {}: ", state.version);
                return Err(time_refused(&member(METADATA), &at, t));
            }
            states.push(state);
        }
    }
    let plan_version = mnemo
        .as_ref()
        .map_or(i32::try_from(bundle.plans.len()).unwrap_or(0), |m| {
            m.active_plan_version
        });
    if plan_version < 0 || usize::try_from(plan_version).unwrap_or(0) > bundle.plans.len() {
        return Err(refuse(
            &member(METADATA),
            format!("mnemo.activePlanVersion {plan_version} names no plan file"),
        ));
    }

    // Events and messages: the shapes, statuses and roles as the task API knows them.
    let mut events = Vec::with_capacity(bundle.events.len());
    for (n, v) in bundle.events.iter().enumerate() {
        let line: EventLine = serde_json::from_value(v.clone()).map_err(|e| {
            refuse(&member(EXECUTION_LOG), format!("line {}: {e}", n + 1)).with("line", n + 1)
        })?;
        if EventStatus::parse(&line.status).is_none() {
            return Err(refuse(
                &member(EXECUTION_LOG),
                format!("line {}: unknown status {:?}", n + 1, line.status),
            )
            .with("line", n + 1));
        }
        if let Some(t) = unstorable_time([Some(&line.timestamp)]) {
            let at = format!("line {}: ", n + 1);
            return Err(time_refused(&member(EXECUTION_LOG), &at, t).with("line", n + 1));
        }
        events.push(serde_json::to_value(line).map_err(internal)?);
    }
    let mut messages = Vec::with_capacity(bundle.messages.len());
    for (n, v) in bundle.messages.iter().enumerate() {
        let line: MessageLine = serde_json::from_value(v.clone()).map_err(|e| {
            refuse(&member(MESSAGES), format!("line {}: {e}", n + 1)).with("line", n + 1)
        })?;
        if Role::parse(&line.role).is_none() || MsgType::parse(&line.msg_type).is_none() {
            return Err(refuse(
                &member(MESSAGES),
                format!("line {}: unknown role or msg_type", n + 1),
            )
            .with("line", n + 1));
        }
        if let Some(t) = unstorable_time([Some(&line.timestamp)]) {
            let at = format!("line {}: ", n + 1);
            return Err(time_refused(&member(MESSAGES), &at, t).with("line", n + 1));
        }
        messages.push(serde_json::to_value(line).map_err(internal)?);
    }

    // Actions hang under plan items of the archive; waits keep their ids (the metadata names them).
    let mut actions = Vec::with_capacity(bundle.actions.len());
    for (n, v) in bundle.actions.iter().enumerate() {
        let at = |detail: String| {
            refuse(&member(ACTIONS), format!("line {}: {detail}", n + 1)).with("line", n + 1)
        };
        let line: ActionLine = serde_json::from_value(v.clone()).map_err(|e| at(e.to_string()))?;
        let items = usize::try_from(line.plan_version)
            .ok()
            .and_then(|v| v.checked_sub(1))
            .and_then(|v| parsed_plans.get(v))
            .map_or(0, Vec::len);
        if line.ordinal < 1 || usize::try_from(line.ordinal).unwrap_or(usize::MAX) > items {
            return Err(at(format!(
                "plan v{} has no step {}",
                line.plan_version, line.ordinal
            )));
        }
        if ActionType::parse(&line.action_type).is_none()
            || ActionStatus::parse(&line.status).is_none()
        {
            return Err(at("unknown action_type or status".into()));
        }
        let times = [Some(&line.created_at), Some(&line.updated_at)]
            .into_iter()
            .chain(line.logs.iter().map(|l| Some(&l.created_at)));
        if let Some(t) = unstorable_time(times) {
            let at = format!("line {}: ", n + 1);
            return Err(time_refused(&member(ACTIONS), &at, t).with("line", n + 1));
        }
        actions.push(line);
    }
    let mut wait_lines = Vec::with_capacity(bundle.waits.len());
    let mut wait_ids = HashSet::new();
    for (n, v) in bundle.waits.iter().enumerate() {
        let at = |detail: String| {
            refuse(&member(WAITS), format!("line {}: {detail}", n + 1)).with("line", n + 1)
        };
        let line: WaitLine = serde_json::from_value(v.clone()).map_err(|e| at(e.to_string()))?;
        if WaitStatus::parse(&line.status).is_none() {
            return Err(at(format!("unknown status {:?}", line.status)));
        }
        if !wait_ids.insert(line.wait_id) {
            return Err(at(format!("wait {} appears twice", line.wait_id)));
        }
        if let Some(t) = unstorable_time([Some(&line.created_at), line.resolved_at.as_ref()]) {
            let at = format!("line {}: ", n + 1);
            return Err(time_refused(&member(WAITS), &at, t).with("line", n + 1));
        }
        wait_lines.push(line);
    }

    // Steps: the same checks as an append, with calls and artifacts resolved within the archive.
    retarget_steps(&mut bundle.steps, &meta.parent_task_id, new_id);
    let artifact_ids: HashSet<Uuid> = bundle
        .artifacts
        .iter()
        .map(|a| a.entry.artifact_id)
        .collect();
    let mut calls: HashSet<String> = HashSet::new();
    let mut step_ids: HashSet<String> = HashSet::new();
    let mut steps = Vec::with_capacity(bundle.steps.len());
    for (n, step) in bundle.steps.iter_mut().enumerate() {
        let at = |detail: String| {
            refuse(&member(HISTORY), format!("line {}: {detail}", n + 1)).with("line", n + 1)
        };
        parts::check_step_id(&step.step_id).map_err(|e| at(detail_of(e)))?;
        if !step_ids.insert(step.step_id.clone()) {
            return Err(at(format!("step_id {:?} appears twice", step.step_id)));
        }
        parts::check_name("agent_name", &step.agent_name).map_err(|e| at(detail_of(e)))?;
        let refs = parts::check_parts(new_id, &mut step.parts, caps.max_parts)
            .map_err(|e| at(detail_of(e)))?;
        if let Some((i, id)) = refs
            .earlier_calls
            .iter()
            .find(|(_, id)| !calls.contains(id))
        {
            return Err(at(detail_of(parts::unknown_call(*i, id))));
        }
        for (i, id) in &refs.calls {
            if !calls.insert(id.clone()) {
                return Err(at(detail_of(parts::duplicate_call(*i, id))));
            }
        }
        if let Some((i, id)) = refs
            .artifacts
            .iter()
            .find(|(_, id)| !artifact_ids.contains(id))
        {
            return Err(at(detail_of(parts::unknown_artifact(*i, *id))));
        }
        steps.push(StepWrite {
            step_id: step.step_id.clone(),
            agent_name: step.agent_name.clone(),
            parts: step.parts.clone(),
            created_at: Some(step.created_at),
        });
    }
    for a in &bundle.artifacts {
        if sha256_hex(&a.bytes) != a.entry.sha256.to_ascii_lowercase() {
            return Err(refuse(&member(&a.entry.file), "does not match its sha256"));
        }
    }

    // Writes.
    let ts = &meta.timestamps;
    let metadata = mnemo
        .as_ref()
        .map(|m| m.metadata.clone())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    sqlx::query!(
        "INSERT INTO tasks (tenant_id, user_id, id, name, original_user_task, status, phase, metadata,
                            final_answer, error_summary, running_summary, summary_message_count,
                            plan_version, event_count, message_count, snapshot_count, created_at,
                            plan_generated_at, execution_started_at, synthesis_started_at,
                            completed_at, updated_at, archived_at)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4, $5,
                 $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
        new_id,
        &name,
        meta.original_user_task.as_deref(),
        status.as_str(),
        phase.as_str(),
        &metadata,
        bundle.final_answer.as_deref(),
        meta.error_summary.clone().filter(|v| !v.is_null()),
        mnemo.as_ref().and_then(|m| m.running_summary.clone()),
        mnemo.as_ref().map_or(0, |m| m.summary_message_count),
        plan_version,
        i64::try_from(events.len()).unwrap_or(i64::MAX),
        i32::try_from(messages.len()).unwrap_or(i32::MAX),
        i32::try_from(bundle.snapshots.len()).unwrap_or(i32::MAX),
        ts.created_at,
        ts.plan_generated_at,
        ts.execution_started_at,
        ts.synthesis_started_at,
        ts.completed_at,
        ts.last_updated_at,
        mnemo.as_ref().and_then(|m| m.archived_at)
    )
    .execute(&mut *tx)
    .await?;

    for (p, steps) in bundle.plans.iter().zip(&parsed_plans) {
        let state = states.iter().find(|s| s.version == p.version);
        tasks::insert_plan(
            &mut *tx,
            new_id,
            p.version,
            &p.plan,
            state.and_then(|s| s.reason.as_deref()),
            steps,
            &[],
        )
        .await?;
        if let Some(state) = state {
            sqlx::query!(
                "UPDATE task_plans SET created_at = $3 WHERE task_id = $1 AND version = $2",
                new_id,
                p.version,
                state.created_at
            )
            .execute(&mut *tx)
            .await?;
            let items = serde_json::to_value(&state.items).map_err(internal)?;
            sqlx::query!(
                "UPDATE task_plan_items i
                 SET status = s.status, started_at = s.\"startedAt\", completed_at = s.\"completedAt\",
                     duration_seconds = s.\"durationSeconds\", rebased_from = s.\"rebasedFrom\"
                 FROM jsonb_to_recordset($3) AS s(ordinal int, status text, \"startedAt\" timestamptz,
                      \"completedAt\" timestamptz, \"durationSeconds\" double precision, \"rebasedFrom\" int)
                 WHERE i.task_id = $1 AND i.version = $2 AND i.ordinal = s.ordinal",
                new_id,
                p.version,
                items
            )
            .execute(&mut *tx)
            .await?;
        }
    }

    if !events.is_empty() {
        sqlx::query!(
            "INSERT INTO task_events (tenant_id, user_id, task_id, seq, ts, stage, sub_task_id,
                                      step_narrative, tool_name, status, input_payload, result_data,
                                      error_info, duration_ms)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, e.n,
                    (e.v ->> 'timestamp')::timestamptz, nullif(e.v -> 'stage', 'null'),
                    e.v ->> 'sub_task_id', e.v ->> 'step_narrative', e.v ->> 'tool_name',
                    e.v ->> 'status', nullif(e.v -> 'input_payload', 'null'),
                    nullif(e.v -> 'result_data', 'null'), nullif(e.v -> 'error_info', 'null'),
                    (e.v ->> 'duration_ms')::bigint
             FROM jsonb_array_elements($2) WITH ORDINALITY AS e(v, n)",
            new_id,
            Value::Array(events)
        )
        .execute(&mut *tx)
        .await?;
    }
    if !messages.is_empty() {
        sqlx::query!(
            "INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type, created_at)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, e.n,
                    e.v ->> 'role', e.v ->> 'content', e.v ->> 'msg_type', (e.v ->> 'timestamp')::timestamptz
             FROM jsonb_array_elements($2) WITH ORDINALITY AS e(v, n)",
            new_id,
            Value::Array(messages)
        )
        .execute(&mut *tx)
        .await?;
    }
    if !bundle.snapshots.is_empty() {
        let labels: Vec<&str> = bundle.snapshots.iter().map(|s| s.label.as_str()).collect();
        let contents: Vec<&str> = bundle
            .snapshots
            .iter()
            .map(|s| s.content.as_str())
            .collect();
        let flags: Vec<bool> = bundle.snapshots.iter().map(|s| s.is_summarized).collect();
        let times: Vec<DateTime<Utc>> = bundle.snapshots.iter().map(|s| s.timestamp).collect();
        sqlx::query!(
            "INSERT INTO task_snapshots (tenant_id, user_id, task_id, seq, label, content, is_summarized, ts)
             SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, n, l, c, f, t
             FROM unnest($2::text[], $3::text[], $4::bool[], $5::timestamptz[]) WITH ORDINALITY AS v(l, c, f, t, n)",
            new_id,
            // Borrowed text (`&[&str]`), which the macro's check of a text[] parameter (`&[String]`)
            // does not take.
            &labels as &[&str],
            &contents as &[&str],
            &flags,
            &times
        )
        .execute(&mut *tx)
        .await?;
    }
    crate::tasks::store::queue_task_history(&mut *tx, new_id).await?;
    for action in &actions {
        let action_id = sqlx::query_scalar!(
            "INSERT INTO task_actions (tenant_id, user_id, id, task_id, version, ordinal, action_type,
                                       summary, status, input_data, output_data, created_at, updated_at)
             VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4,
                     $5, $6, $7, $8, $9, $10, $11)
             RETURNING id",
            Uuid::now_v7(),
            new_id,
            action.plan_version,
            action.ordinal,
            &action.action_type,
            &action.summary,
            &action.status,
            action.input_data.as_ref(),
            action.output_data.as_ref(),
            action.created_at,
            action.updated_at
        )
        .fetch_one(&mut *tx)
        .await?;
        if !action.logs.is_empty() {
            let ids: Vec<Uuid> = action.logs.iter().map(|_| Uuid::now_v7()).collect();
            let types: Vec<&str> = action.logs.iter().map(|l| l.log_type.as_str()).collect();
            let contents: Vec<&str> = action.logs.iter().map(|l| l.content.as_str()).collect();
            let times: Vec<DateTime<Utc>> = action.logs.iter().map(|l| l.created_at).collect();
            sqlx::query!(
                "INSERT INTO task_action_logs (tenant_id, user_id, id, task_id, action_id, log_type, content, created_at)
                 SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), i, $1, $2, l, c, t
                 FROM unnest($3::uuid[], $4::text[], $5::text[], $6::timestamptz[]) AS v(i, l, c, t)",
                new_id,
                action_id,
                &ids,
                // Borrowed text, as for the snapshots.
                &types as &[&str],
                &contents as &[&str],
                &times
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    for w in &wait_lines {
        sqlx::query!(
            "INSERT INTO task_waits (tenant_id, user_id, task_id, id, target_type, target_id, criteria,
                                     timeout_seconds, poll_interval, status, result_message,
                                     created_at, resolved_at)
             VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3, $4,
                     $5, $6, $7, $8, $9, $10, $11)",
            new_id,
            w.wait_id,
            &w.target_type,
            &w.target_id,
            &w.criteria,
            w.timeout_seconds,
            w.poll_interval,
            &w.status,
            w.result_message.as_deref(),
            w.created_at,
            w.resolved_at
        )
        .execute(&mut *tx)
        .await?;
    }
    if let Some(team) = &bundle.team {
        ws::put_config(&mut *tx, new_id, team, None).await?;
    }
    for a in &bundle.artifacts {
        ws::insert_artifact(
            &mut *tx,
            new_id,
            &ArtifactWrite {
                id: a.entry.artifact_id,
                name: a.entry.name.as_deref(),
                mime_type: &a.entry.mime_type,
                sha256: &a.entry.sha256.to_ascii_lowercase(),
                content: &a.bytes,
                created_at: Some(a.entry.created_at),
            },
        )
        .await?;
    }
    if !steps.is_empty() {
        // Artifact parts read their type from the archive's artifacts.
        for step in &mut steps {
            for part in &mut step.parts {
                if let Part::Artifact {
                    artifact_id,
                    mime_type,
                    ..
                } = part
                    && mime_type.is_empty()
                    && let Some(a) = bundle
                        .artifacts
                        .iter()
                        .find(|a| a.entry.artifact_id == *artifact_id)
                {
                    mime_type.clone_from(&a.entry.mime_type);
                }
            }
        }
        ws::insert_steps(&mut *tx, new_id, &steps).await?;
    }
    Ok(())
}

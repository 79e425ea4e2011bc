//! A task's history: execution-log events, messages (with the stuck-alert cooldown) and context
//! snapshots.

use uuid::Uuid;

use super::*;
use crate::tasks::{TasksConfig, stuck, workspace};

/// Checks a batch of events: not empty, at most `MNEMO_TASKS_MAX_BATCH_EVENTS`, each with a
/// narrative, a number or string `stage`, a non-negative duration. 422 names the event's field.
pub fn check_events(config: &TasksConfig, events: &[NewEvent]) -> ApiResult<()> {
    let max = config.max_batch_events;
    if events.is_empty() {
        return Err(ApiError::invalid("events", "`events` must not be empty"));
    }
    if events.len() > max {
        return Err(ApiError::invalid(
            "events",
            format!(
                "a batch has at most {max} events; this one has {}",
                events.len()
            ),
        )
        .with("limit", max));
    }
    for (i, event) in events.iter().enumerate() {
        required_text(
            &format!("events[{i}].step_narrative"),
            &event.step_narrative,
            100_000,
        )?;
        if matches!(&event.stage, Some(v) if !(v.is_number() || v.is_string() || v.is_null())) {
            return Err(ApiError::invalid(
                format!("events[{i}].stage"),
                "`stage` is a number or a string",
            ));
        }
        if event.duration_ms.is_some_and(|d| d < 0) {
            return Err(ApiError::invalid(
                format!("events[{i}].duration_ms"),
                "`duration_ms` must not be negative",
            ));
        }
    }
    Ok(())
}

/// Appends checked events in the order given; sequence numbers are per task and gap-free.
pub async fn append_events(tx: &mut Scoped, id: Uuid, events: &[NewEvent]) -> ApiResult<Appended> {
    let (first_seq, last_seq) = store::append_events(tx, id, events)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    Ok(Appended {
        count: events.len(),
        first_seq,
        last_seq,
    })
}

/// What posting a message did.
pub enum Posted {
    Stored(Message),
    /// A `stuck` message inside the cooldown after the last one: nothing stored.
    Suppressed(StuckSuppressed),
}

/// A message to post, checked.
#[derive(Clone, Copy)]
pub struct MessagePost<'a> {
    content: &'a str,
    role: Role,
    msg_type: MsgType,
}

impl<'a> MessagePost<'a> {
    /// 422 for blank content; the role defaults to `agent`, the type to `text`.
    pub fn parse(body: &'a NewMessage) -> ApiResult<Self> {
        Ok(MessagePost {
            content: required_text("content", &body.content, 100_000)?,
            role: body.role.unwrap_or(Role::Agent),
            msg_type: body.msg_type.unwrap_or(MsgType::Text),
        })
    }
}

/// Appends a message. A `stuck` message takes the task's row lock first (so two alerts at once
/// see each other) and records its time in the metadata; within the cooldown after the last one
/// it is not stored.
pub async fn post_message(
    tx: &mut Scoped,
    config: &TasksConfig,
    id: Uuid,
    post: &MessagePost<'_>,
) -> ApiResult<Written<Posted>> {
    let MessagePost {
        content,
        role,
        msg_type,
    } = *post;
    let stuck_metadata = if msg_type == MsgType::Stuck {
        let (metadata, _) = workspace::store::metadata_for_update(tx, id)
            .await?
            .ok_or_else(|| store::task_not_found(id))?;
        let cooldown = config.stuck_cooldown_secs;
        let now = store::now(tx).await?;
        if let Some((last, ends)) = stuck::suppressed_until(&metadata, now, cooldown) {
            let answer = StuckSuppressed {
                suppressed: true,
                last_stuck_alert_at: last,
                cooldown_ends_at: ends,
                cooldown_seconds: cooldown,
            };
            return Ok(Written::new(Posted::Suppressed(answer), None));
        }
        Some(metadata)
    } else {
        None
    };
    let (seq, covered, created_at) = store::append_message(tx, id, role, msg_type, content)
        .await?
        .ok_or_else(|| store::task_not_found(id))?;
    if let Some(mut metadata) = stuck_metadata {
        stuck::record(&mut metadata, created_at);
        workspace::store::save_metadata(tx, id, metadata).await?;
    }
    let message = Message {
        seq,
        role,
        msg_type,
        content: content.to_owned(),
        created_at,
    };
    Ok(Written::new(Posted::Stored(message), Some((seq, covered))))
}

/// Checks a snapshot: a label of at most 200 characters (422 otherwise).
pub fn check_snapshot(body: &NewSnapshot) -> ApiResult<()> {
    required_text("label", &body.label, 200).map(drop)
}

/// Stores a checked context snapshot.
pub async fn add_snapshot(tx: &mut Scoped, id: Uuid, body: &NewSnapshot) -> ApiResult<Snapshot> {
    store::append_snapshot(tx, id, body)
        .await?
        .ok_or_else(|| store::task_not_found(id))
}

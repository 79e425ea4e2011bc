//! The running summary (the first tier): refreshed in the background once enough messages arrived
//! since the last one, never on the write path. Without a model it is the digest's own summary.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use uuid::Uuid;

use super::digest::{self, Digest, TaskFacts};
use super::prompt;
use super::store::{self, TaskRow};
use crate::access::Caller;
use crate::db::Scoped;
use crate::error::ApiResult;
use crate::llm::LlmClient;
use crate::state::AppState;

/// What the digest of a task was built from, and the digest.
pub struct Loaded {
    pub digest: Digest,
    pub items: Vec<digest::Item>,
    pub messages: Vec<digest::Message>,
}

impl Loaded {
    /// The messages after the first `covered` ones.
    pub fn since(&self, covered: i32) -> &[digest::Message] {
        let start = self.messages.partition_point(|m| m.seq <= covered);
        &self.messages[start..]
    }
}

/// Most messages a digest hands a model along with it (those since the running summary).
const MAX_PROMPT_MESSAGES: i32 = 200;

/// Builds the digest of a task from its active plan, the stored digest state and the messages
/// written since it: a bounded read however long the task's history.
pub async fn load_digest(tx: &mut Scoped, row: &TaskRow, recent: usize) -> ApiResult<Loaded> {
    let items: Vec<digest::Item> = store::plan_items(&mut *tx, row.id, row.plan_version)
        .await?
        .into_iter()
        .map(|i| digest::Item {
            ordinal: i.ordinal,
            title: i.title,
            stage: i.stage,
            status: i.status,
        })
        .collect();
    let mut state = store::digest_state(&mut *tx, row.id).await?;
    // One read from the first message needed: those the state has not taken in, those since the
    // running summary (at most the newest MAX_PROMPT_MESSAGES, for a model) and the latest
    // `recent`. By seq, so that a message appended meanwhile cannot push one out of the read.
    let recent_from = row
        .message_count
        .saturating_sub(i32::try_from(recent).unwrap_or(i32::MAX));
    let prompt_from = row
        .summary_message_count
        .max(row.message_count - MAX_PROMPT_MESSAGES);
    let after = state.through.min(prompt_from).min(recent_from).max(0);
    let messages = store::digest_messages(&mut *tx, row.id, after).await?;
    store::remember_seen(&mut *tx, row.id, &mut state, &messages).await?;
    state.fold(&digest::item_titles(&items), &messages);
    let facts = TaskFacts {
        name: row.name.clone(),
        status: row.status().as_str().to_owned(),
        phase: row.phase().as_str().to_owned(),
        plan_version: row.plan_version,
    };
    let recent_messages = &messages[messages.len().saturating_sub(recent)..];
    let count = usize::try_from(row.message_count).unwrap_or(0);
    let digest = digest::build_from(&facts, &items, &state, recent_messages, count);
    Ok(Loaded {
        digest,
        items,
        messages,
    })
}

/// Starts a background refresh when `message_count` is at least `summary_every` past what the
/// summary covers. Returns at once; the refresh runs in its own transactions.
pub fn schedule(
    state: &AppState,
    caller: &Caller,
    task_id: Uuid,
    message_count: i32,
    covered: i32,
) {
    let every = state.config.tasks.summary_every;
    if every == 0 || i64::from(message_count) - i64::from(covered) < i64::from(every) {
        return;
    }
    // One refresh per task at a time: a burst of messages past the threshold starts one job, and
    // the first write after it finishes starts the next if still due.
    if !IN_FLIGHT
        .lock()
        .is_ok_and(|mut running| running.insert(task_id))
    {
        return;
    }
    let state = state.clone();
    let caller = caller.clone();
    state.jobs.clone().spawn(async move {
        let _running = Running(task_id);
        if let Err(err) = refresh(&state, &caller, task_id).await {
            tracing::warn!(%task_id, error = %err, "running summary refresh failed");
        }
    });
}

/// Removes its task from [`IN_FLIGHT`] when the job ends, however it ends.
struct Running(Uuid);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut running) = IN_FLIGHT.lock() {
            running.remove(&self.0);
        }
    }
}

/// Tasks whose summary is being refreshed by this process.
static IN_FLIGHT: LazyLock<Mutex<HashSet<Uuid>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Recomputes and stores the running summary; false when a newer one was stored meanwhile.
pub async fn refresh(state: &AppState, caller: &Caller, task_id: Uuid) -> ApiResult<bool> {
    let mut tx = caller.begin().await?;
    let row = store::get_task(&mut tx, task_id).await?;
    let loaded = load_digest(&mut tx, &row, state.config.tasks.digest_recent).await?;
    tx.end_read_only();
    let covers = i32::try_from(loaded.digest.message_count).unwrap_or(i32::MAX);
    let summary = match &state.llm {
        Some(llm) => {
            let (system, user) = prompt::summary(
                &loaded.digest,
                &loaded.items,
                row.running_summary.as_deref(),
                loaded.since(row.summary_message_count),
            );
            match llm.complete_text(system, user).await {
                Ok(text) => text,
                Err(err) => {
                    tracing::warn!(%task_id, error = %err, "model summary failed; using the digest");
                    digest::summary(&loaded.digest)
                }
            }
        }
        None => digest::summary(&loaded.digest),
    };
    let mut tx = caller.begin().await?;
    let stored = store::set_running_summary(&mut tx, task_id, &summary, covers).await?;
    tx.commit().await?;
    Ok(stored)
}

/// The model's answer to `query`, grounded on the running summary (the second tier): the summary as
/// stored, the messages since it, and the exact digest.
pub async fn ask_model(
    llm: &LlmClient,
    loaded: &Loaded,
    row: &TaskRow,
    query: &str,
) -> Result<String, String> {
    let covered = row.summary_message_count;
    let (system, user) = prompt::query(
        &loaded.digest,
        &loaded.items,
        row.running_summary.as_deref(),
        covered,
        loaded.since(covered),
        query,
    );
    llm.complete_text(system, user).await
}

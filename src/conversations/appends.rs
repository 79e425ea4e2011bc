//! Archives of one user, committed together.
//!
//! Every archive moves its session's version (the window cache checks it), so archives to one
//! session take that row's lock in turn: each waits for the one before it to commit, and commits
//! are flushed to disk one at a time. Under many concurrent archives to one session (a chat app
//! with many tabs, a replayed outbox, a busy agent) the session became a queue of transactions.
//! Archives of one user to many sessions (an agent serving many conversations) did not queue, but
//! each paid a transaction of its own: `BEGIN`, the scope, the statement, `COMMIT` and its flush.
//!
//! Here, archives of a user that arrive while one of theirs is being written wait for it and are
//! then written together: one transaction, in arrival order (so a session's archives keep their
//! order), one commit, all in one call of `mnemo_write_archives` (one statement for the group
//! when no message appears twice in it and nothing is deleted, else one archive statement each).
//! The first archive of a quiet user is written at once, alone, in the same kind of call (its own
//! transaction, one round trip). Each request still gets its own answer (its own counts and batch
//! id), exactly what it would have got alone. When the group's transaction fails, each of its
//! archives is retried alone, so one batch's error is never another's.
//!
//! A user's archives are written by one job at a time, whatever their sessions. Splitting them
//! into four lanes by session (four jobs, four connections) wrote more archives a second while
//! each archive of a group was its own statement; with the group in one statement, one lane
//! writes more, at less CPU each (see README).
//!
//! The group is written by a background job (drained on shutdown), not by the request that
//! started it: a client that hangs up does not cancel the others' writes. Archives that carry an
//! `Idempotency-Key` are not grouped (their stored answer is part of their own transaction).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::batch::Batch;
use super::store::{self, Archived};
use super::{chat, summary};
use crate::access::{Caller, Target};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Archives written in one transaction at most.
const MAX_GROUP: usize = 64;

/// Users with an archive being written, and the archives waiting for it.
#[derive(Default)]
pub struct SessionAppends {
    /// A user is here while a job writes their archives; the list holds the ones that arrived
    /// meanwhile.
    busy: Mutex<HashMap<UserKey, Vec<Pending>>>,
}

/// A user whose archives are written together.
#[derive(Clone, PartialEq, Eq, Hash)]
struct UserKey {
    tenant: String,
    user: String,
}

/// An archive waiting to be written, and where its answer goes.
struct Pending {
    session: String,
    agent: String,
    batch: Batch,
    answer: oneshot::Sender<ApiResult<Archived>>,
}

impl SessionAppends {
    /// Archives `batch` into `session_id` as `caller`, with the caller's archives that arrive
    /// meanwhile; answers once it is committed. Updates the window cache and schedules the
    /// session's summary like any archive.
    pub async fn archive(
        &self,
        state: &AppState,
        caller: &Caller,
        session_id: &str,
        agent: String,
        batch: Batch,
    ) -> ApiResult<Archived> {
        let key = UserKey {
            tenant: caller.tenant_id.clone(),
            user: caller.user_id.clone(),
        };
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            session: session_id.to_owned(),
            agent,
            batch,
            answer,
        };
        let lead = {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            match busy.get_mut(&key) {
                Some(waiting) => {
                    waiting.push(pending);
                    None
                }
                None => {
                    busy.insert(key.clone(), Vec::new());
                    Some(pending)
                }
            }
        };
        if let Some(first) = lead {
            let (state_, caller) = (state.clone(), caller.clone());
            state
                .jobs
                .spawn(async move { write_user(state_, caller, key, first).await });
        }
        answered.await.unwrap_or_else(|_| {
            Err(ApiError::Internal(anyhow::anyhow!(
                "the archive job of the user ended without an answer"
            )))
        })
    }

    /// Archives waiting for the group before them to commit, over every user.
    pub fn waiting(&self) -> usize {
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.values().map(Vec::len).sum()
    }

    /// Takes the archives that arrived while a group was written (at most [`MAX_GROUP`]), or
    /// marks the user idle when there are none.
    fn next_group(&self, key: &UserKey) -> Vec<Pending> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let Some(waiting) = busy.get_mut(key) else {
            return Vec::new();
        };
        if waiting.is_empty() {
            busy.remove(key);
            return Vec::new();
        }
        let take = waiting.len().min(MAX_GROUP);
        waiting.drain(..take).collect()
    }
}

/// Writes `first`, then each group that arrived meanwhile, until none is waiting.
async fn write_user(state: AppState, caller: Caller, key: UserKey, first: Pending) {
    let mut leading = Leading {
        appends: &state.session_appends,
        key: &key,
        idle: false,
    };
    let mut group = vec![first];
    while !group.is_empty() {
        write_group(&state, &caller, group).await;
        group = state.session_appends.next_group(&key);
    }
    leading.idle = true;
}

/// Should the job writing a user's archives end before the user is idle (a panic), the user is
/// released and their waiting archives answered with an error rather than left waiting.
struct Leading<'a> {
    appends: &'a SessionAppends,
    key: &'a UserKey,
    idle: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if !self.idle {
            let mut busy = self.appends.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.remove(self.key);
        }
    }
}

/// Writes `group` in one transaction; when that fails, each archive alone.
async fn write_group(state: &AppState, caller: &Caller, group: Vec<Pending>) {
    match archive_all(caller, &group).await {
        Ok(archived) => {
            for (pending, archived) in group.into_iter().zip(archived) {
                let session_id = pending.session.as_str();
                // In commit order, so that each archive finds the window the one before left.
                let before = state
                    .window_cache
                    .get(&caller.tenant_id, &caller.user_id, session_id)
                    .map(|(version, messages)| (Some(version), messages));
                chat::remember_archive(
                    state,
                    caller,
                    session_id,
                    before,
                    &pending.batch,
                    &archived,
                );
                // As after any archive (one refresh per session at a time).
                summary::schedule_after(state, caller, session_id, &archived);
                // A request that hung up no longer listens; its archive stands.
                let _ = pending.answer.send(Ok(archived));
            }
        }
        Err(err) if group.len() == 1 => {
            if let Some(pending) = group.into_iter().next() {
                let _ = pending.answer.send(Err(ApiError::from(err)));
            }
        }
        Err(_) => {
            for pending in group {
                Box::pin(write_group(state, caller, vec![pending])).await;
            }
        }
    }
}

/// One transaction, in one call: each archive of `group` in order, then the commit.
async fn archive_all(caller: &Caller, group: &[Pending]) -> Result<Vec<Archived>, sqlx::Error> {
    let group: Vec<(&str, &str, &Batch)> = group
        .iter()
        .map(|p| (p.session.as_str(), p.agent.as_str(), &p.batch))
        .collect();
    store::archive_group(Target::Call(caller), &group).await
}

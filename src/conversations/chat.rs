//! A chat turn: store the new messages, compile the working memory, and (for `/api/chat`) let the
//! model answer, running its memory tool calls server-side in a bounded loop.

use axum::response::sse::Event;
use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::batch::{self, Batch, NewMessage};
use super::model::{ChatRequest, ChatResponse, StoredMessage};
use super::store::{self, Archived, WindowMessage, WindowRead};
use super::{context, summary, tools, window};
use crate::access::Caller;
use crate::auth::Principal;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::llm::{AssistantReply, ChatMessage, LlmClient, StreamEvent};
use crate::state::AppState;

/// A prepared turn: the compiled messages and what storing the new messages did.
#[derive(Debug, Clone)]
pub struct Turn {
    pub session_id: String,
    pub agent: String,
    pub messages: Vec<ChatMessage>,
    pub window_messages: usize,
    pub new: i64,
    pub updated: i64,
    pub deleted: i64,
    pub duplicates: i64,
    /// The newest time among this turn's messages (replies are stored after it).
    pub latest: Option<DateTime<Utc>>,
    /// What was recalled into the context for the turn's user message.
    pub recalled: Vec<crate::recall::RecallHit>,
}

fn retention(state: &AppState) -> (Option<i32>, Option<DateTime<Utc>>) {
    let days = state
        .config
        .conversations
        .history_retention_days
        .and_then(|d| i32::try_from(d).ok());
    let cutoff = days.map(|d| Utc::now() - TimeDelta::days(i64::from(d)));
    (days, cutoff)
}

/// The session's short-term window (cache first, checked against the database's version).
/// Returns the version it belongs to (`None`: no such session) and the messages, oldest first.
pub async fn read_window(
    state: &AppState,
    principal: &Principal,
    tx: &mut Scoped,
    session_id: &str,
) -> ApiResult<(Option<i64>, Vec<WindowMessage>)> {
    let (days, cutoff) = retention(state);
    let size = state.config.conversations.window_messages;
    let cache = &state.window_cache;
    let cached = cache
        .get(&principal.tenant_id, &principal.user_id, session_id)
        .filter(|(_, messages)| !window::has_expired(messages, cutoff));
    let read = store::window(
        tx,
        session_id,
        i64::try_from(size).unwrap_or(i64::MAX),
        days,
        cached.as_ref().map(|c| c.0),
    )
    .await?;
    Ok(match (read, cached) {
        (WindowRead::NoSession, _) => (None, Vec::new()),
        (WindowRead::Unchanged, Some((version, messages))) => (Some(version), messages),
        (WindowRead::Unchanged, None) => (None, Vec::new()),
        (WindowRead::Fresh(version, messages), _) => {
            cache.put(
                &principal.tenant_id,
                &principal.user_id,
                session_id,
                version,
                messages.clone(),
            );
            (Some(version), messages)
        }
    })
}

/// After an archive into a session whose window (at `before`) is known: brings the cached window
/// up to date when this archive was the only write since (`version` moved by exactly one).
pub fn remember_archive(
    state: &AppState,
    principal: &Principal,
    session_id: &str,
    before: Option<(Option<i64>, Vec<WindowMessage>)>,
    batch: &Batch,
    archived: &Archived,
) {
    let Some((version, messages)) = before else {
        return;
    };
    if archived.version != version.map_or(1, |v| v + 1) {
        return;
    }
    let size = state.config.conversations.window_messages;
    let Some(messages) = apply_changes(messages, batch, archived, size) else {
        // A message left the full window: the one before the window moves in, which only the
        // database knows. The version moved, so the next read fetches the window.
        return;
    };
    let added: Vec<WindowMessage> = batch
        .messages
        .iter()
        .filter(|m| archived.new_ids.contains(&m.id))
        .map(|m| WindowMessage::from_new(m, archived.archived_at))
        .collect();
    state.window_cache.put(
        &principal.tenant_id,
        &principal.user_id,
        session_id,
        archived.version,
        window::extend(messages, added, size),
    );
}

/// `window` (the session's last `size` messages before `archived`) with the updates and deletions
/// of `archived` applied: updated messages keep their place and take the new content. `None`
/// when a deletion emptied a place of a full window (its successor is unknown here).
fn apply_changes(
    mut window: Vec<WindowMessage>,
    batch: &Batch,
    archived: &Archived,
    size: usize,
) -> Option<Vec<WindowMessage>> {
    for message in batch
        .messages
        .iter()
        .filter(|m| archived.updated_ids.contains(&m.id))
    {
        if let Some(held) = window.iter_mut().find(|w| w.id == message.id) {
            held.sender = message.sender.into();
            held.text.clone_from(&message.text);
            held.tool_calls.clone_from(&message.tool_calls);
            held.tool_call_id.clone_from(&message.tool_call_id);
        }
    }
    let full = window.len() >= size;
    let before = window.len();
    window.retain(|w| !archived.deleted_ids.contains(&w.id));
    if full && window.len() < before {
        return None;
    }
    Some(window)
}

/// The window and new messages a turn's context shows after its batch was archived: a message of
/// the batch already in the window stays in its place (with its new content when the batch
/// updated it; otherwise as stored, which a stale resend did not change), deleted messages go,
/// and the rest of the batch follows the window.
fn turn_view(
    mut window: Vec<WindowMessage>,
    batch: &Batch,
    archived: Option<&Archived>,
) -> (Vec<WindowMessage>, Vec<NewMessage>) {
    let mut fresh = Vec::new();
    for message in &batch.messages {
        match window.iter_mut().find(|w| w.id == message.id) {
            Some(held) => {
                if archived.is_some_and(|a| a.updated_ids.contains(&message.id)) {
                    held.sender = message.sender.into();
                    held.text.clone_from(&message.text);
                    held.tool_calls.clone_from(&message.tool_calls);
                    held.tool_call_id.clone_from(&message.tool_call_id);
                }
            }
            None => fresh.push(message.clone()),
        }
    }
    if let Some(archived) = archived {
        window.retain(|w| !archived.deleted_ids.contains(&w.id));
    }
    (window, fresh)
}

/// Validates the request, stores its new messages and compiles the working memory.
pub async fn prepare(state: &AppState, caller: &Caller, req: ChatRequest) -> ApiResult<Turn> {
    let session_id = batch::session_or_new(req.session_id.as_deref())?;
    let agent = batch::agent(req.agent_id.as_deref())?;
    // The agent's long-term notes go into the context, so it must be a valid notes agent name.
    crate::notes::operations::validate_agent_name(&agent).map_err(|_| {
        ApiError::invalid(
            "agent_id",
            "`agent_id` names the agent whose notes are read: 1 to 64 characters from A-Z, a-z, \
             0-9, `.`, `_` and `-`",
        )
    })?;
    let incoming = req.new_messages.unwrap_or_default();
    let batch = batch::validate(
        "new_messages",
        &incoming,
        state.config.conversations.archive_max_messages,
    )?;
    // What to recall for: the turn's last user message. Its embedding is made before the
    // transaction opens.
    let recall_k = state.config.conversations.chat_recall_k;
    let question = batch
        .messages
        .iter()
        .rev()
        .find(|m| m.sender == "user" && !m.text.trim().is_empty())
        .map(|m| {
            m.text
                .chars()
                .take(crate::search::query::MAX_QUERY_CHARS)
                .collect::<String>()
        })
        .filter(|_| recall_k > 0);
    let recall_vector = match &question {
        Some(q) => {
            let corpora = crate::recall::corpora(&CHAT_RECALL_KINDS);
            crate::search::prepare(state, caller, &corpora, None, q).await?
        }
        None => (crate::search::SearchMode::Keyword, None),
    };
    let mut tx = caller.begin().await?;
    if question.is_some() {
        // The recall's search settings, made before the window read rather than by the first
        // search: by words alone the window and summary reads then run their generic plans
        // too, instead of being planned for their parameters on every turn.
        let (mode, vector) = &recall_vector;
        let words_only = crate::search::words_only(*mode, vector.as_ref());
        crate::search::begin_search(&mut tx, words_only).await?;
    }
    let (version, window) = read_window(state, caller, &mut tx, &session_id).await?;
    let earlier = if version.is_some() {
        store::summary_state(&mut tx, &session_id).await?
    } else {
        None
    };
    let recalled = match &question {
        Some(q) => {
            recall_for_turn(
                state,
                &mut tx,
                q,
                recall_k,
                recall_vector,
                &session_id,
                &window,
                &batch,
            )
            .await?
        }
        None => Vec::new(),
    };
    let archived = if batch.received() > 0 {
        Some(store::archive(&mut tx, &session_id, &agent, &batch).await?)
    } else {
        None
    };
    let notes = tools::long_term_notes(&mut tx, &agent).await?;
    tx.commit().await?;
    if let Some(archived) = &archived {
        remember_archive(
            state,
            caller,
            &session_id,
            Some((version, window.clone())),
            &batch,
            archived,
        );
        summary::schedule_after(state, caller, &session_id, archived);
    }
    let (window, fresh) = turn_view(window, &batch, archived.as_ref());
    // The running summary speaks for the messages before the window, when there are any.
    let earlier = earlier
        .filter(|s| i64::from(s.message_count) > i64::try_from(window.len()).unwrap_or(i64::MAX))
        .and_then(|s| s.summary);
    let (messages, window_messages) = context::compile(
        &state.config.conversations.system_prompt,
        &agent,
        notes.as_deref(),
        &recalled,
        earlier.as_deref(),
        &window,
        &fresh,
    );
    Ok(Turn {
        session_id,
        agent,
        messages,
        window_messages,
        new: archived.as_ref().map_or(0, Archived::new_count),
        updated: archived.as_ref().map_or(0, Archived::updated_count),
        deleted: archived.as_ref().map_or(0, Archived::deleted_count),
        duplicates: archived.as_ref().map_or(0, |a| a.duplicates),
        latest: batch.span().map(|s| s.1),
        recalled,
    })
}

/// What a turn's recall searches.
const CHAT_RECALL_KINDS: [crate::recall::Kind; 3] = [
    crate::recall::Kind::Message,
    crate::recall::Kind::Memory,
    crate::recall::Kind::Task,
];

/// The memories and earlier messages that best answer `question`, leaving out the messages the
/// window or this turn already holds. Runs before the turn's messages are stored, so they cannot
/// recall themselves.
#[allow(clippy::too_many_arguments)]
async fn recall_for_turn(
    state: &AppState,
    tx: &mut Scoped,
    question: &str,
    k: u32,
    (mode, vector): (
        crate::search::SearchMode,
        Option<crate::search::QueryVector>,
    ),
    session_id: &str,
    window: &[store::WindowMessage],
    batch: &batch::Batch,
) -> ApiResult<Vec<crate::recall::RecallHit>> {
    let exclude = crate::recall::Exclude {
        messages: window
            .iter()
            .map(|m| m.id.clone())
            .chain(batch.messages.iter().map(|m| m.id.clone()))
            .map(|id| (session_id.to_owned(), id))
            .collect(),
    };
    let request = crate::recall::RecallRequest {
        query: question.to_owned(),
        kinds: Some(CHAT_RECALL_KINDS.to_vec()),
        limit: Some(k),
        mode: Some(mode),
        filters: None,
    };
    match crate::recall::recall_in(
        tx,
        &request,
        state.config.conversations.history_retention_days,
        mode,
        vector.as_ref(),
        &exclude,
    )
    .await
    {
        Ok(found) => Ok(found.hits),
        // A question that is all stopwords or otherwise unsearchable recalls nothing.
        Err(err) if err.status_code().is_client_error() => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

fn model_failed(err: crate::llm::LlmError) -> ApiError {
    tracing::warn!(error = %err, "model call failed");
    ApiError::status(
        axum::http::StatusCode::BAD_GATEWAY,
        format!("the model endpoint failed: {err}"),
    )
}

async fn send(events: Option<&mpsc::Sender<Event>>, event: Event) {
    if let Some(events) = events {
        // A client that went away stops receiving; the turn still completes and is stored.
        let _ = events.send(event).await;
    }
}

async fn ask(
    llm: &LlmClient,
    messages: &[ChatMessage],
    offer_tools: bool,
    events: Option<&mpsc::Sender<Event>>,
) -> ApiResult<AssistantReply> {
    let tools = if offer_tools {
        tools::definitions()
    } else {
        Vec::new()
    };
    let Some(sink) = events else {
        return llm.complete(messages, &tools).await.map_err(model_failed);
    };
    let stream = llm.stream(messages, &tools).await.map_err(model_failed)?;
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event.map_err(model_failed)? {
            StreamEvent::Delta(text) => {
                let data = serde_json::json!({ "content": text });
                send(
                    Some(sink),
                    Event::default().event("delta").data(data.to_string()),
                )
                .await;
            }
            StreamEvent::Done(reply) => return Ok(reply),
        }
    }
    Err(model_failed(crate::llm::LlmError::Protocol(
        "the stream ended without a reply".into(),
    )))
}

/// Runs the model on a prepared turn, executes its tool calls (at most
/// `MNEMO_CHAT_MAX_TOOL_ROUNDS` rounds, then one last call without tools), and stores the reply
/// and the tool messages in the session as one archive batch. With `events`, streams the reply as
/// server-sent events (`delta`, `tool_call`, `tool_result`); the caller sends `done`.
pub async fn respond(
    state: &AppState,
    caller: &Caller,
    llm: &LlmClient,
    turn: Turn,
    events: Option<mpsc::Sender<Event>>,
) -> ApiResult<ChatResponse> {
    let events = events.as_ref();
    let mut messages = turn.messages.clone();
    // Stored replies sort after this turn's messages even when the client's clock runs ahead.
    let mut at = turn
        .latest
        .map_or_else(Utc::now, |latest| latest.max(Utc::now()));
    let mut next_time = || {
        at += TimeDelta::milliseconds(1);
        at
    };
    let mut stored: Vec<NewMessage> = Vec::new();
    let max_rounds = state.config.conversations.chat_max_tool_rounds;
    let mut round = 0;
    let reply = loop {
        let offer_tools = round < max_rounds;
        let reply = ask(llm, &messages, offer_tools, events).await?;
        if reply.tool_calls.is_empty() || !offer_tools {
            break reply;
        }
        round += 1;
        messages.push(reply.to_message());
        stored.push(NewMessage {
            id: uuid::Uuid::now_v7().to_string(),
            sender: "ai",
            text: reply.content.clone().unwrap_or_default(),
            sent_at: next_time(),
            tool_calls: serde_json::to_value(&reply.tool_calls).ok(),
            tool_call_id: None,
            edited_at: None,
        });
        for call in &reply.tool_calls {
            send(
                events,
                Event::default()
                    .event("tool_call")
                    .data(serde_json::to_string(call).unwrap_or_default()),
            )
            .await;
            let output = tools::execute(state, caller, &turn.agent, call).await;
            let data = serde_json::json!({ "tool_call_id": call.id, "content": output });
            send(
                events,
                Event::default().event("tool_result").data(data.to_string()),
            )
            .await;
            messages.push(ChatMessage::tool_result(&call.id, &output));
            stored.push(NewMessage {
                id: uuid::Uuid::now_v7().to_string(),
                sender: "tool",
                text: output,
                sent_at: next_time(),
                tool_calls: None,
                tool_call_id: Some(call.id.clone()),
                edited_at: None,
            });
        }
    };
    stored.push(NewMessage {
        id: uuid::Uuid::now_v7().to_string(),
        sender: "ai",
        text: reply.content.clone().unwrap_or_default(),
        sent_at: next_time(),
        tool_calls: None,
        tool_call_id: None,
        edited_at: None,
    });
    let batch = Batch {
        messages: stored,
        ..Batch::default()
    };
    let mut tx = caller.begin().await?;
    let cached = state
        .window_cache
        .get(&caller.tenant_id, &caller.user_id, &turn.session_id)
        .map(|(v, m)| (Some(v), m));
    let archived = store::archive(&mut tx, &turn.session_id, &turn.agent, &batch).await?;
    tx.commit().await?;
    remember_archive(state, caller, &turn.session_id, cached, &batch, &archived);
    summary::schedule_after(state, caller, &turn.session_id, &archived);

    let mut out: Vec<StoredMessage> = batch
        .messages
        .into_iter()
        .map(|m| StoredMessage {
            id: m.id,
            sender: m.sender.into(),
            text: m.text,
            timestamp: m.sent_at,
            archived_at: archived.archived_at,
            edited_at: None,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
        })
        .collect();
    let Some(reply) = out.pop() else {
        return Err(ApiError::Internal(anyhow::anyhow!(
            "chat turn stored no reply"
        )));
    };
    Ok(ChatResponse {
        session_id: turn.session_id,
        agent_id: turn.agent,
        reply,
        tool_messages: out,
        recalled: turn.recalled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, text: &str, secs: i64) -> WindowMessage {
        let at = DateTime::from_timestamp(secs, 0).unwrap();
        WindowMessage {
            id: id.into(),
            sender: "ai".into(),
            text: text.into(),
            sent_at: at,
            archived_at: at,
            tool_calls: None,
            tool_call_id: None,
        }
    }

    fn sent(id: &str, text: &str, secs: i64) -> NewMessage {
        NewMessage {
            id: id.into(),
            sender: "ai",
            text: text.into(),
            sent_at: DateTime::from_timestamp(secs, 0).unwrap(),
            tool_calls: None,
            tool_call_id: None,
            edited_at: None,
        }
    }

    fn archived(updated: &[&str], deleted: &[&str]) -> Archived {
        Archived {
            batch_id: uuid::Uuid::nil(),
            version: 2,
            new_ids: Vec::new(),
            updated_ids: updated.iter().map(|s| (*s).to_owned()).collect(),
            deleted_ids: deleted.iter().map(|s| (*s).to_owned()).collect(),
            archived_at: Utc::now(),
            duplicates: 0,
            message_count: 3,
            summary_covers: 0,
        }
    }

    fn texts(window: &[WindowMessage]) -> Vec<&str> {
        window.iter().map(|m| m.text.as_str()).collect()
    }

    #[test]
    fn updates_keep_their_place_and_stale_resends_change_nothing() {
        let window = vec![held("a", "partial", 1), held("b", "next", 2)];
        let batch = Batch {
            messages: vec![sent("a", "complete", 9), sent("b", "stale", 2)],
            ..Batch::default()
        };
        let done = archived(&["a"], &[]);
        let applied = apply_changes(window.clone(), &batch, &done, 2).unwrap();
        assert_eq!(texts(&applied), ["complete", "next"]);
        assert_eq!(applied[0].sent_at, window[0].sent_at, "the place stays");
        let (shown, fresh) = turn_view(window, &batch, Some(&done));
        assert_eq!(texts(&shown), ["complete", "next"]);
        assert!(fresh.is_empty());
    }

    #[test]
    fn a_deletion_from_a_full_window_needs_the_database() {
        let window = vec![held("a", "x", 1), held("b", "y", 2)];
        let gone = archived(&[], &["a"]);
        assert!(apply_changes(window.clone(), &Batch::default(), &gone, 2).is_none());
        let shorter = apply_changes(window.clone(), &Batch::default(), &gone, 3).unwrap();
        assert_eq!(texts(&shorter), ["y"]);
        let elsewhere = archived(&[], &["z"]);
        assert_eq!(
            apply_changes(window, &Batch::default(), &elsewhere, 2).map(|w| w.len()),
            Some(2)
        );
    }
}

//! Request and response types of the conversation routes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::llm::ChatMessage;

/// Who wrote a chat message, as clients send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Sender {
    User,
    Ai,
}

/// A chat message as the client holds it.
///
/// Sent again with other content (`text`, `sender`), it updates the stored message, which keeps
/// its place in the session; sent again unchanged, it is a duplicate. `text`, `sender` and
/// `timestamp` are required unless `deleted` is true.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IncomingMessage {
    /// The client's id for the message; unique within its session. Not blank, at most 256 bytes,
    /// no control characters.
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub id: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub sender: Option<Sender>,
    /// RFC 3339 time the message was written, e.g. `2026-11-21T22:00:00.000Z`.
    #[serde(default)]
    pub timestamp: Option<DateTime<Utc>>,
    /// RFC 3339 time this state of the message was made (set it when the text changes). Orders
    /// the states of one message: a resend whose `edited_at` is older than the stored one's, or
    /// that has none while the stored one has, does not overwrite it. Without it on either side
    /// the later archive wins.
    #[serde(default)]
    pub edited_at: Option<DateTime<Utc>>,
    /// True: delete the stored message (unless its `edited_at` is newer than this one's).
    #[serde(default)]
    pub deleted: bool,
}

/// `POST /api/chat/session/archive_messages`: a batch of the visible conversation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ArchiveRequest {
    /// The chat session (client-generated, e.g. a UUID). Absent: the server makes one (a UUIDv7)
    /// and returns it; send it with the later batches of the conversation.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub session_id: Option<String>,
    /// The messages; re-sending messages already stored is expected and harmless. At most
    /// `MNEMO_ARCHIVE_MAX_MESSAGES` (default 500); more is 413.
    #[serde(default)]
    #[schema(value_type = Vec<IncomingMessage>, required = true, max_items = 500)]
    pub messages_batch: Option<Vec<IncomingMessage>>,
    /// The agent the session talks to; default `assistant`. Used when the session is created.
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub agent_id: Option<String>,
}

/// The beacon body: the archive batch plus the token `sendBeacon` cannot put in a header.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct BeaconRequest {
    /// A bearer token (JWT), verified exactly like the `Authorization` header.
    pub access_token: String,
    /// The chat session; absent: the server makes one and returns it.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub session_id: Option<String>,
    /// As in the archive request: at most `MNEMO_ARCHIVE_MAX_MESSAGES` (default 500).
    #[serde(default)]
    #[schema(value_type = Vec<IncomingMessage>, required = true, max_items = 500)]
    pub messages_batch: Option<Vec<IncomingMessage>>,
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub agent_id: Option<String>,
}

/// What an archive batch did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchiveResponse {
    /// The session: the one sent, or the one the server made when none was sent.
    pub session_id: String,
    /// Id of the `recent_conversation_history` row recording this batch.
    pub batch_id: uuid::Uuid,
    /// Messages stored by this batch.
    pub new: i64,
    /// Stored messages this batch changed (sent again with other content, and not older).
    pub updated: i64,
    /// Stored messages this batch deleted (`deleted: true`).
    pub deleted: i64,
    /// Messages of the batch that changed nothing: already stored as sent, older than the stored
    /// state, deletions of messages not stored, or repeated inside the batch.
    pub duplicates: i64,
}

/// A stored message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredMessage {
    pub id: String,
    /// `user`, `ai`, or `tool` (a tool result written by `/api/chat`).
    pub sender: String,
    pub text: String,
    pub timestamp: DateTime<Utc>,
    pub archived_at: DateTime<Utc>,
    /// When the stored state was made, as the client said (`edited_at` of the archive); absent
    /// for a message never edited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<DateTime<Utc>>,
    /// On `ai` messages written by `/api/chat`: the tool calls the model made.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_calls: Option<Value>,
    /// On `tool` messages: the call this result answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A chat session.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Session {
    pub session_id: String,
    pub agent_id: String,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    /// The running summary (topics, names, open questions), refreshed in the background every
    /// `MNEMO_CHAT_SUMMARY_EVERY` messages; null until the first refresh.
    pub summary: Option<String>,
    /// Messages archived into the session.
    pub message_count: i32,
    /// How many of them the summary covers.
    pub summary_message_count: i32,
    pub summary_updated_at: Option<DateTime<Utc>>,
}

/// A page of sessions, most recently active first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionPage {
    pub items: Vec<Session>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

/// A page of messages.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessagePage {
    pub items: Vec<StoredMessage>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    /// Only sessions with this agent.
    pub agent_id: Option<String>,
    /// Page size, 1..=200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Message order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    #[default]
    Asc,
    Desc,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessageQuery {
    /// `asc` (oldest first, default) or `desc`.
    #[param(inline)]
    pub order: Option<Order>,
    /// Page size, 1..=500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page (same `order`).
    pub cursor: Option<String>,
}

/// `POST /api/chat/context` and `POST /api/chat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// The chat session. Absent: the server makes one (a UUIDv7) and returns it.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub session_id: Option<String>,
    /// The messages of this turn (normally the user's new message); stored in the session. At
    /// most `MNEMO_ARCHIVE_MAX_MESSAGES` (default 500); more is 413.
    #[serde(default)]
    #[schema(max_items = 500)]
    pub new_messages: Option<Vec<IncomingMessage>>,
    /// The agent whose long-term notes and session this is: 1 to 64 of `[A-Za-z0-9._-]`;
    /// default `assistant`.
    #[serde(default)]
    #[schema(pattern = r"^[A-Za-z0-9._-]{1,64}$")]
    pub agent_id: Option<String>,
}

/// The compiled working memory of a turn.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextResponse {
    /// The session: the one sent, or the one the server made.
    pub session_id: String,
    pub agent_id: String,
    /// OpenAI-style messages: system prompt, long-term notes, short-term window, new messages.
    pub messages: Vec<ChatMessage>,
    /// How many messages of the short-term window are included.
    pub window_messages: usize,
    /// New messages stored by this call.
    pub new: i64,
    /// New messages that updated a stored message.
    pub updated: i64,
    /// Stored messages deleted by this call.
    pub deleted: i64,
    /// New messages that changed nothing (already stored as sent).
    pub duplicates: i64,
    /// What was recalled for the turn's user message (also in the `## Recalled memories` system
    /// message): earlier messages, memories and task history, best first.
    pub recalled: Vec<crate::recall::RecallHit>,
}

/// The model's answer to a turn, as stored in the session.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatResponse {
    /// The session: the one sent, or the one the server made.
    pub session_id: String,
    pub agent_id: String,
    /// The assistant's reply (stored with sender `ai`).
    pub reply: StoredMessage,
    /// Tool calls and their results during this turn, in order (also stored).
    pub tool_messages: Vec<StoredMessage>,
    /// What was recalled into the context for the turn's user message.
    pub recalled: Vec<crate::recall::RecallHit>,
}

//! The memory tools `/api/chat` offers the model, and their server-side execution.
//!
//! Each call runs in its own [`Scoped`] transaction as the caller, so a tool can never reach
//! another user's data. A failing tool answers the model with `{"error": "..."}` instead of
//! failing the turn: the model can read the error and try something else.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Principal, Scope};
use crate::db::Scoped;
use crate::error::ApiError;
use crate::llm::{Tool, ToolCall};
use crate::memories::model::{PageQuery, SearchRequest};
use crate::memories::store as memories;
use crate::notes::model::{NotesOperationRequest, Operation};
use crate::state::AppState;

/// The operations of `manage_long_term_memory` (the design's `ManageLTMInput`).
pub const NOTE_OPERATIONS: [&str; 7] = [
    "read",
    "overwrite",
    "append",
    "prepend",
    "delete_section_by_header",
    "replace_section_by_header",
    "delete_all_notes",
];

/// The tools offered on every `/api/chat` turn.
pub fn definitions() -> Vec<Tool> {
    vec![
        Tool::function(
            "manage_long_term_memory",
            "Read or edit your long-term natural-language notes about this user (kept across \
             sessions). Sections are Markdown headers.",
            json!({
                "type": "object",
                "properties": {
                    "operation": {"type": "string", "enum": NOTE_OPERATIONS, "default": "read"},
                    "content": {"type": ["string", "null"], "description": "For write operations"},
                    "section_header": {"type": ["string", "null"],
                        "description": "For section-specific operations"}
                },
                "additionalProperties": false
            }),
        ),
        Tool::function(
            "store_memory",
            "Store a large piece of content (a document, a tool output) in detail memory under a \
             key; answers a short placeholder to refer to it.",
            json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "key": {"type": ["string", "null"], "description": "Optional key; generated when absent"},
                    "description": {"type": ["string", "null"], "description": "One line saying what it is"}
                },
                "required": ["content"],
                "additionalProperties": false
            }),
        ),
        Tool::function(
            "retrieve_memory",
            "Read a stored memory by key, one page at a time: by lines (`line_start`, \
             `line_count`) or by bytes (`offset`, `limit`); the answer says how to read on.",
            json!({
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "line_start": {"type": ["integer", "null"], "minimum": 1},
                    "line_count": {"type": ["integer", "null"], "minimum": 1},
                    "offset": {"type": ["integer", "null"], "minimum": 0},
                    "limit": {"type": ["integer", "null"], "minimum": 1}
                },
                "required": ["key"],
                "additionalProperties": false
            }),
        ),
        Tool::function(
            "recall",
            "Recall what you know about something from everything kept for this user: earlier \
             conversations (other sessions too), stored memories, long-term notes and task \
             history, best first. Ask a question or give keywords; each hit says where it comes \
             from and how to read more (a memory's [MemoryRef: key - summary] placeholder, a \
             session and message id, a notes heading, a task id).",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "kinds": {"type": ["array", "null"],
                        "items": {"type": "string", "enum": ["memory", "message", "note", "task"]}},
                    "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 50}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        ),
        Tool::function(
            "search_memory",
            "Search stored memories by text; answers the best matches with their keys.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 100}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        ),
    ]
}

fn args<T: for<'de> Deserialize<'de>>(call: &ToolCall) -> Result<T, String> {
    let text = if call.function.arguments.trim().is_empty() {
        "{}"
    } else {
        call.function.arguments.as_str()
    };
    serde_json::from_str(text)
        .map_err(|e| format!("invalid arguments for `{}`: {e}", call.function.name))
}

/// Runs one tool call as `principal` and returns the text answered to the model.
pub async fn execute(
    state: &AppState,
    principal: &Principal,
    agent: &str,
    call: &ToolCall,
) -> String {
    let result = match call.function.name.as_str() {
        "manage_long_term_memory" => match args::<NotesOperationRequest>(call) {
            Ok(input) => manage_notes(state, principal, agent, input).await,
            Err(e) => Err(e),
        },
        "store_memory" => match args::<StoreArgs>(call) {
            Ok(input) => store(state, principal, agent, input).await,
            Err(e) => Err(e),
        },
        "retrieve_memory" => match args::<RetrieveArgs>(call) {
            Ok(input) => retrieve(state, principal, input).await,
            Err(e) => Err(e),
        },
        "search_memory" => match args::<SearchArgs>(call) {
            Ok(input) => search(state, principal, input).await,
            Err(e) => Err(e),
        },
        "recall" => match args::<RecallArgs>(call) {
            Ok(input) => recall(state, principal, input).await,
            Err(e) => Err(e),
        },
        other => Err(format!("unknown tool `{other}`")),
    };
    match result {
        Ok(value) => value.to_string(),
        Err(message) => json!({ "error": message }).to_string(),
    }
}

fn describe(err: ApiError) -> String {
    match err {
        ApiError::Problem(p) => p.detail,
        ApiError::Internal(e) => {
            tracing::error!(error = ?e, "tool failed");
            "internal error".into()
        }
    }
}

/// `manage_long_term_memory`: one operation of the notes domain, in its own scoped transaction.
async fn manage_notes(
    state: &AppState,
    principal: &Principal,
    agent: &str,
    input: NotesOperationRequest,
) -> Result<Value, String> {
    let scope = if input.operation == Operation::Read {
        Scope::Read
    } else {
        Scope::Write
    };
    let config = &state.config.notes;
    let done = scoped(state, principal, scope, async |conn| {
        crate::notes::store::run_operation(conn, agent, input, None, config).await
    })
    .await?;
    Ok(json!({
        "operation": done.operation,
        "outcome": done.outcome,
        "changed": done.changed,
        "version": done.version,
        "notes": done.notes,
    }))
}

/// Arguments of `store_memory`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreArgs {
    content: String,
    #[serde(default, alias = "memory_key")]
    key: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// Arguments of `retrieve_memory`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetrieveArgs {
    #[serde(alias = "memory_key")]
    key: String,
    #[serde(default)]
    line_start: Option<u64>,
    #[serde(default)]
    line_count: Option<u64>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

/// Arguments of `search_memory`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<u32>,
}

/// Runs `work` in a scoped transaction as `principal` and commits it.
async fn scoped<T>(
    state: &AppState,
    principal: &Principal,
    scope: Scope,
    work: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, ApiError>,
) -> Result<T, String> {
    principal.require(scope).map_err(describe)?;
    let run = async {
        let mut tx = Scoped::begin(&state.pool, principal).await?;
        let out = work(&mut tx).await?;
        tx.commit().await?;
        Ok::<_, ApiError>(out)
    };
    run.await.map_err(describe)
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| format!("cannot encode the result: {e}"))
}

/// `store_memory`: detail memory, tagged with the session's agent.
async fn store(
    state: &AppState,
    principal: &Principal,
    agent: &str,
    input: StoreArgs,
) -> Result<Value, String> {
    let limits = memories::Limits::of(state);
    let new = memories::NewMemory {
        content: input.content,
        key: input.key,
        description: input.description,
        agent_id: Some(agent.to_owned()),
        ..memories::NewMemory::default()
    };
    let stored = scoped(state, principal, Scope::Write, async |conn| {
        memories::store_memory(conn, new, &limits).await
    })
    .await?;
    Ok(json!({
        "memory_key": stored.memory_key,
        "placeholder": stored.placeholder,
        "status": stored.status,
        "size_bytes": stored.size_bytes,
        "line_count": stored.line_count,
    }))
}

/// `retrieve_memory`: one page of a stored memory.
async fn retrieve(
    state: &AppState,
    principal: &Principal,
    input: RetrieveArgs,
) -> Result<Value, String> {
    let limits = memories::Limits::of(state);
    let query = PageQuery {
        offset: input.offset,
        limit: input.limit,
        line_start: input.line_start,
        line_count: input.line_count,
        include_inactive: None,
    };
    let request = memories::page_request(&query, &limits).map_err(describe)?;
    let page = scoped(state, principal, Scope::Read, async |conn| {
        memories::retrieve_memory(conn, &input.key, request, false, &limits).await
    })
    .await?;
    to_value(&page)
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallArgs {
    query: String,
    #[serde(default)]
    kinds: Option<Vec<crate::recall::Kind>>,
    #[serde(default)]
    limit: Option<u32>,
}

/// `recall`: one ranked list across every kind of memory (see [`crate::recall`]).
async fn recall(
    state: &AppState,
    principal: &Principal,
    input: RecallArgs,
) -> Result<Value, String> {
    let request = crate::recall::RecallRequest {
        query: input.query,
        kinds: input.kinds,
        limit: input.limit,
        mode: None,
        filters: None,
    };
    let (mode, vector) = crate::search::prepare(state, None, &request.query)
        .await
        .map_err(|e| e.to_string())?;
    let retention = state.config.conversations.history_retention_days;
    let results = scoped(state, principal, Scope::Read, async |conn| {
        crate::recall::recall_in(
            conn,
            &request,
            retention,
            mode,
            vector.as_ref(),
            &crate::recall::Exclude::default(),
        )
        .await
    })
    .await?;
    to_value(&results)
}

/// `search_memory`: ranked search over stored memories.
async fn search(
    state: &AppState,
    principal: &Principal,
    input: SearchArgs,
) -> Result<Value, String> {
    let request = SearchRequest {
        query: input.query,
        limit: input.limit,
        mode: None,
        filters: None,
    };
    let (mode, vector) = crate::search::prepare(state, request.mode, &request.query)
        .await
        .map_err(|e| e.to_string())?;
    let results = scoped(state, principal, Scope::Read, async |conn| {
        memories::search_memory(conn, &request, mode, vector.as_ref()).await
    })
    .await?;
    to_value(&results)
}

/// The long-term notes of (caller, `agent`) for the context; `None` when never written.
pub async fn long_term_notes(
    conn: &mut sqlx::PgConnection,
    agent: &str,
) -> Result<Option<String>, ApiError> {
    let stored = crate::notes::store::read_notes(conn, agent).await?;
    Ok((!stored.notes.trim().is_empty()).then_some(stored.notes))
}

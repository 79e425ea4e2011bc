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
            "Read a stored memory by key, a page of lines at a time.",
            json!({
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "offset": {"type": ["integer", "null"], "minimum": 0},
                    "limit": {"type": ["integer", "null"], "minimum": 1}
                },
                "required": ["key"],
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
                    "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 50}
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
        "store_memory" | "retrieve_memory" | "search_memory" => {
            match serde_json::from_str::<Value>(if call.function.arguments.trim().is_empty() {
                "{}"
            } else {
                &call.function.arguments
            }) {
                Ok(input) => memory_tool(state, principal, &call.function.name, input).await,
                Err(e) => Err(format!(
                    "invalid arguments for `{}`: {e}",
                    call.function.name
                )),
            }
        }
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
    principal.require(scope).map_err(describe)?;
    let run = async {
        let mut tx = Scoped::begin(&state.pool, principal).await?;
        let done =
            crate::notes::store::run_operation(&mut tx, agent, input, None, &state.config.notes)
                .await?;
        tx.commit().await?;
        Ok::<_, ApiError>(done)
    };
    let done = run.await.map_err(describe)?;
    Ok(json!({
        "operation": done.operation,
        "outcome": done.outcome,
        "changed": done.changed,
        "version": done.version,
        "notes": done.notes,
    }))
}

async fn memory_tool(
    state: &AppState,
    principal: &Principal,
    name: &str,
    input: Value,
) -> Result<Value, String> {
    let scope = if name == "store_memory" {
        Scope::Write
    } else {
        Scope::Read
    };
    principal.require(scope).map_err(describe)?;
    let _ = (state, input, Scoped::begin);
    Err(format!(
        "`{name}`: detail memory is not available in this build"
    ))
}

/// The long-term notes of (caller, `agent`) for the context; `None` when never written.
pub async fn long_term_notes(
    conn: &mut sqlx::PgConnection,
    agent: &str,
) -> Result<Option<String>, ApiError> {
    let stored = crate::notes::store::read_notes(conn, agent).await?;
    Ok((!stored.notes.trim().is_empty()).then_some(stored.notes))
}

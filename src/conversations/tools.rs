//! The memory tools `/api/chat` offers the model: the registry's chat tools ([`crate::tools`]),
//! run server-side as the caller.
//!
//! Each call runs in its own scoped transaction as the caller, so a tool can never reach another
//! user's data. A failing tool answers the model with `{"error": "..."}` instead of failing the
//! turn: the model can read the error and try something else. The session's agent is the agent
//! of the notes the model edits and the agent its stored memories are tagged with.

use serde_json::{Value, json};

use crate::auth::Principal;
use crate::db::Scoped;
use crate::error::ApiError;
use crate::llm::{Tool, ToolCall};
use crate::state::AppState;
use crate::tools::schema::without_property;

/// The tools offered on every `/api/chat` turn, in the model API's function shape.
pub fn definitions() -> Vec<Tool> {
    crate::tools::all()
        .iter()
        .filter(|tool| tool.in_chat)
        .map(|tool| {
            let schema = match tool.session_argument {
                Some(name) => without_property(&tool.input_schema(), name),
                None => tool.input_schema(),
            };
            Tool::function(tool.name, &tool.description(), schema)
        })
        .collect()
}

/// Runs one tool call as `principal` for the session of `agent` and returns the text answered
/// to the model.
pub async fn execute(
    state: &AppState,
    principal: &Principal,
    agent: &str,
    call: &ToolCall,
) -> String {
    let name = call.function.name.as_str();
    let Some(tool) = crate::tools::find(name).filter(|tool| tool.in_chat) else {
        return json!({ "error": format!("unknown tool `{name}`") }).to_string();
    };
    let text = call.function.arguments.trim();
    let arguments = if text.is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_str::<Value>(text) {
            Ok(value) => value,
            Err(e) => {
                return json!({ "error": format!("invalid arguments for `{name}`: {e}") })
                    .to_string();
            }
        }
    };
    match crate::tools::call(state, principal, tool, arguments, Some(agent)).await {
        Ok(result) if result.is_error => json!({ "error": result.content }).to_string(),
        Ok(result) => result.content,
        Err(err) => {
            tracing::error!(error = ?err, tool = name, "tool failed");
            json!({ "error": "internal error" }).to_string()
        }
    }
}

/// The long-term notes of (caller, `agent`) for the context; `None` when never written.
pub async fn long_term_notes(conn: &mut Scoped, agent: &str) -> Result<Option<String>, ApiError> {
    let stored = crate::notes::store::read_notes(conn, agent).await?;
    Ok((!stored.notes.trim().is_empty()).then_some(stored.notes))
}

//! The tools themselves. Each runs the REST handler of its route with the caller's principal;
//! arguments that the route takes in its path (`key`, `task_id`, `agent_name`) are members of the
//! argument object, the rest is the route's own body (or query) type.

mod memories;
mod tasks;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde_json::json;

use super::Tool;
use super::schema::{body, with_property};
use crate::auth::Scope;
use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::idempotency::Idempotency;
use crate::notes::model::NotesOperationRequest;
use crate::recall::RecallRequest;

pub use tasks::parse_artifact_uri;

/// The agent of a notes call without one.
pub const DEFAULT_AGENT: &str = "default";
/// Bytes `artifact_read` returns when the call names no `length`.
pub const ARTIFACT_PAGE_BYTES: u64 = 64 * 1024;

fn ok<T: IntoResponse>(result: Result<T, ApiError>) -> Result<Response, ApiError> {
    result.map(IntoResponse::into_response)
}

pub(super) fn tools() -> Vec<Tool> {
    [
        memories::tools(),
        vec![notes()],
        tasks::tools(),
        vec![recall()],
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `manage_long_term_memory`: the long-term notes of an agent.
fn notes() -> Tool {
    Tool {
        name: "manage_long_term_memory",
        title: "Long-term notes",
        summary: "Read or edit your long-term Markdown notes about this user, kept across \
            sessions (one document per agent). Operations: read (default), overwrite, append, \
            prepend, delete_section_by_header, replace_section_by_header (with `upsert` to \
            add a missing section), delete_all_notes. Sections are Markdown headings.",
        examples: &[
            r#"{"operation": "read"}"#,
            r#"{"operation": "append", "content": "- prefers answers in French"}"#,
            r###"{"operation": "replace_section_by_header", "section_header": "## Preferences", "content": "- tea, no sugar", "upsert": true}"###,
        ],
        scope: Scope::Read,
        read_only: false,
        in_chat: true,
        session_argument: Some("agent_name"),
        schema: || {
            with_property(
                body::<NotesOperationRequest>(),
                "agent_name",
                json!({"type": "string", "default": DEFAULT_AGENT,
                    "pattern": "^[A-Za-z0-9._-]{1,64}$",
                    "description": "Whose notes: the agent's name."}),
                false,
            )
        },
        run: |mut c| {
            async move {
                let agent = c
                    .take_optional_string("agent_name")?
                    .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
                // The route checks the scope of the operation: `read` needs only
                // `memory:read`.
                let request: NotesOperationRequest = c.parse()?;
                crate::notes::notes_operation(
                    State(c.state.clone()),
                    c.principal.clone(),
                    Path(agent),
                    HeaderMap::new(),
                    Idempotency::none(),
                    Json(request),
                )
                .await
            }
            .boxed()
        },
    }
}

/// `recall`: one search over everything kept for the user.
fn recall() -> Tool {
    Tool {
        name: "recall",
        title: "Recall",
        summary: "Recall what you know about something from everything kept for this user: \
            earlier conversations (other sessions too), stored memories, long-term notes and \
            task history, best first. Ask a question or give keywords; each hit says where it \
            comes from and how to read more (a memory's [MemoryRef: key - summary] \
            placeholder, a session and message id, a notes heading, a task id).",
        examples: &[
            r#"{"query": "When did Caroline go to the support group?"}"#,
            r#"{"query": "staging database password rotation", "kinds": ["memory", "note"], "limit": 5}"#,
        ],
        scope: Scope::Read,
        read_only: true,
        in_chat: true,
        session_argument: None,
        schema: body::<RecallRequest>,
        run: |mut c| {
            async move {
                let request: RecallRequest = c.parse()?;
                ok(crate::recall::recall(State(c.state.clone()), c.reader()?, Json(request)).await)
            }
            .boxed()
        },
    }
}

//! The tools themselves. Each runs the REST handler of its route with the caller's principal;
//! arguments that the route takes in its path (`key`, `task_id`, `agent_name`) are members of the
//! argument object, the rest is the route's own body (or query) type.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde_json::{Value, json};

use super::schema::{body, params, with_property};
use super::{Call, Tool};
use crate::auth::Scope;
use crate::error::ApiError;
use crate::extract::{Json, Path, Query};
use crate::idempotency::Idempotency;
use crate::memories::UploadJson;
use crate::memories::model::{CaptureInput, GrepQuery, MemoryInput, PageQuery, SearchRequest};
use crate::notes::model::NotesOperationRequest;
use crate::recall::RecallRequest;
use crate::tasks::model::{QueryTask, RegisterTask, UpdateTask};
use crate::tasks::workspace::model::{NewStep, SearchRequest as TaskSearchRequest};

/// The agent of a notes call without one.
pub const DEFAULT_AGENT: &str = "default";
/// Bytes `artifact_read` returns when the call names no `length`.
pub const ARTIFACT_PAGE_BYTES: u64 = 64 * 1024;

fn key_property() -> Value {
    json!({
        "type": "string",
        "description": "The memory key (the first part of its [MemoryRef: key - summary] placeholder).",
        "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"
    })
}

fn task_property() -> Value {
    json!({"type": "string", "format": "uuid", "description": "The task id `task_register` answered."})
}

fn ok<T: IntoResponse>(result: Result<T, ApiError>) -> Result<Response, ApiError> {
    result.map(IntoResponse::into_response)
}

pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "store_memory",
            title: "Store a memory",
            summary: "Store a large piece of content (a tool or command output, a file, a document) \
                once in detail memory and get back a short placeholder `[MemoryRef: <key> - \
                <summary>]`. Keep the placeholder in your context instead of the content; fetch \
                pages with retrieve_memory, find lines with grep_memory. With a `key` the call is \
                idempotent: the same content again changes nothing.",
            examples: &[
                r#"{"content": "total 48\ndrwxr-xr-x 5 app app 4096 .\n...", "description": "ls -la of the deploy folder"}"#,
                r#"{"key": "build-log-42", "content": "error[E0308]: mismatched types ...", "memory_type": "command_output"}"#,
            ],
            scope: Scope::Write,
            read_only: false,
            in_chat: true,
            session_argument: None,
            schema: body::<MemoryInput>,
            run: |mut c| {
                async move {
                    if let Some(agent) = c.session_agent {
                        c.default_argument("agent_id", agent);
                    }
                    c.alias("memory_key", "key")?;
                    let input: MemoryInput = c.parse()?;
                    let state = State(c.state.clone());
                    match input.key.clone() {
                        Some(key) => ok(crate::memories::put_memory(
                            state,
                            c.writer()?,
                            Path(key),
                            UploadJson(input),
                        )
                        .await),
                        None => {
                            crate::memories::create_memory(
                                state,
                                c.writer()?,
                                Idempotency::none(),
                                UploadJson(input),
                            )
                            .await
                        }
                    }
                }
                .boxed()
            },
        },
        Tool {
            name: "retrieve_memory",
            title: "Read a memory",
            summary: "Read a stored memory by its key, one page at a time: by lines \
                (`line_start`, 1-based, and `line_count`) or by bytes (`offset`, `limit`). The \
                answer carries the page's `content`, its range, and `next` (the arguments of the \
                following page) while there is more.",
            examples: &[
                r#"{"key": "build-log-42"}"#,
                r#"{"key": "build-log-42", "line_start": 200, "line_count": 50}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: true,
            session_argument: None,
            schema: || with_property(params::<PageQuery>(), "key", key_property(), true),
            run: |mut c| {
                async move {
                    c.alias("memory_key", "key")?;
                    let key = c.take_string("key")?;
                    let query: PageQuery = c.parse()?;
                    crate::memories::get_memory(
                        State(c.state.clone()),
                        c.reader()?,
                        Path(key),
                        Query(query),
                        HeaderMap::new(),
                    )
                    .await
                }
                .boxed()
            },
        },
        Tool {
            name: "grep_memory",
            title: "Grep a memory",
            summary: "Find the lines of a stored memory matching a regular expression (Rust \
                `regex` syntax), with line numbers and `context` lines around them. Use it on \
                large outputs instead of reading them whole.",
            examples: &[
                r#"{"key": "build-log-42", "pattern": "error\\[E\\d+\\]", "context": 2}"#,
                r#"{"key": "build-log-42", "pattern": "timeout", "ignore_case": true, "max_matches": 20}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: true,
            session_argument: None,
            schema: || with_property(params::<GrepQuery>(), "key", key_property(), true),
            run: |mut c| {
                async move {
                    c.alias("memory_key", "key")?;
                    let key = c.take_string("key")?;
                    let query: GrepQuery = c.parse()?;
                    ok(crate::memories::grep_memory(c.reader()?, Path(key), Query(query)).await)
                }
                .boxed()
            },
        },
        Tool {
            name: "search_memory",
            title: "Search memories",
            summary: "Search your stored memories by a question or keywords; answers the best \
                matches, each with its key and placeholder. Quoted phrases, `-word` and `OR` work \
                as in a web search.",
            examples: &[
                r#"{"query": "which port does the staging database listen on"}"#,
                r#"{"query": "\"connection refused\" -test", "limit": 5}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: true,
            session_argument: None,
            schema: body::<SearchRequest>,
            run: |mut c| {
                async move {
                    let request: SearchRequest = c.parse()?;
                    ok(crate::memories::search_memories(
                        State(c.state.clone()),
                        c.reader()?,
                        Json(request),
                    )
                    .await)
                }
                .boxed()
            },
        },
        Tool {
            name: "capture_output",
            title: "Capture a command output",
            summary: "Hand over a command's output: a short one comes back inline, nothing stored; \
                one over `threshold_tokens` is stored and comes back as a [MemoryRef: ...] \
                placeholder with a summary (first lines, first error). Use it on every large tool \
                result to keep your context small.",
            examples: &[
                r#"{"command": "cargo test", "content": "running 212 tests\n...\ntest result: ok"}"#,
                r#"{"command": "kubectl get pods -A", "content": "NAMESPACE NAME READY ...", "threshold_tokens": 500}"#,
            ],
            scope: Scope::Write,
            read_only: false,
            in_chat: false,
            session_argument: None,
            schema: body::<CaptureInput>,
            run: |mut c| {
                async move {
                    if let Some(agent) = c.session_agent {
                        c.default_argument("agent_id", agent);
                    }
                    let input: CaptureInput = c.parse()?;
                    crate::memories::capture(
                        State(c.state.clone()),
                        c.writer()?,
                        Idempotency::none(),
                        UploadJson(input),
                    )
                    .await
                }
                .boxed()
            },
        },
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
        },
        Tool {
            name: "task_register",
            title: "Register a task",
            summary: "Register a long-running task, with its plan when you have one (a list of \
                steps: strings or {title, description, stage}). Keep the answered `task_id`: \
                report progress with task_update, and after losing your context ask task_update \
                or task_query \"where was I?\".",
            examples: &[
                r#"{"name": "Deploy coursefolio", "plan": ["Build Docker image", "Push image to registry", "SSH into server", "Pull image and run container"]}"#,
            ],
            scope: Scope::Write,
            read_only: false,
            in_chat: false,
            session_argument: None,
            schema: body::<RegisterTask>,
            run: |mut c| {
                async move {
                    let body: RegisterTask = c.parse()?;
                    crate::tasks::register_task(
                        State(c.state.clone()),
                        c.writer()?,
                        Idempotency::none(),
                        Json(body),
                    )
                    .await
                }
                .boxed()
            },
        },
        Tool {
            name: "task_update",
            title: "Update a task",
            summary: "Report progress on a task (`message`), change its `status` (active, \
                paused, completed, failed, cancelled) and/or ask a `query` such as \"where was \
                I?\": the answer says which steps are done, what is next and the key details \
                recorded so far.",
            examples: &[
                r#"{"task_id": "0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10", "message": "Step 1 done: image built as v1.2.3"}"#,
                r#"{"task_id": "0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10", "query": "where was I?"}"#,
            ],
            scope: Scope::Write,
            read_only: false,
            in_chat: false,
            session_argument: None,
            schema: || {
                let schema = super::schema::without_property(&body::<UpdateTask>(), "task_id");
                with_property(schema, "task_id", task_property(), true)
            },
            run: |mut c| {
                async move {
                    let id = c.take_uuid("task_id")?;
                    let body: UpdateTask = c.parse()?;
                    crate::tasks::update_task(
                        State(c.state.clone()),
                        c.principal.clone(),
                        Path(id),
                        Idempotency::none(),
                        Json(body),
                    )
                    .await
                }
                .boxed()
            },
        },
        Tool {
            name: "task_query",
            title: "Ask about a task",
            summary: "Ask a question about a task without changing it, such as \"where was I?\" \
                or \"which version did I build?\"; answered from the task's plan, messages and \
                recorded details.",
            examples: &[
                r#"{"task_id": "0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10", "query": "where was I?"}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: false,
            session_argument: None,
            schema: || with_property(body::<QueryTask>(), "task_id", task_property(), true),
            run: |mut c| {
                async move {
                    let id = c.take_uuid("task_id")?;
                    let body: QueryTask = c.parse()?;
                    ok(crate::tasks::query_task(
                        State(c.state.clone()),
                        c.reader()?,
                        Path(id),
                        Json(body),
                    )
                    .await)
                }
                .boxed()
            },
        },
        Tool {
            name: "append_step",
            title: "Append a step",
            summary: "Append one step to a task's history: what an agent said or did, as parts \
                (`text`, `tool_call`, `tool_result`, `artifact`). The history is append-only and \
                searchable with memory_search.",
            examples: &[
                r#"{"task_id": "0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10", "agent_name": "planner", "parts": [{"type": "text", "text": "Chose blue-green deployment."}]}"#,
            ],
            scope: Scope::Write,
            read_only: false,
            in_chat: false,
            session_argument: None,
            schema: || with_property(body::<NewStep>(), "task_id", task_property(), true),
            run: |mut c| {
                async move {
                    let id = c.take_uuid("task_id")?;
                    let body: NewStep = c.parse()?;
                    crate::tasks::workspace::append_step(
                        State(c.state.clone()),
                        c.writer()?,
                        Path(id),
                        Idempotency::none(),
                        Json(body),
                    )
                    .await
                }
                .boxed()
            },
        },
        Tool {
            name: "memory_search",
            title: "Search task history",
            summary: "Search the history of your tasks (messages, events, step texts, tool \
                results, snapshots): of one task with `task_id`, else of all of them. Each hit \
                names its task and where it sits; follow `next_cursor` for more.",
            examples: &[
                r#"{"query": "migration failed"}"#,
                r#"{"task_id": "0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10", "query": "ghcr.io", "limit": 5}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: false,
            session_argument: None,
            schema: || {
                let property = json!({"type": "string", "format": "uuid",
                    "description": "Search only this task's history."});
                with_property(body::<TaskSearchRequest>(), "task_id", property, false)
            },
            run: |mut c| {
                async move {
                    let id = match c.take_optional_string("task_id")? {
                        Some(text) => Some(uuid::Uuid::parse_str(&text).map_err(|_| {
                            ApiError::invalid("task_id", "invalid `task_id`: expected a UUID")
                        })?),
                        None => None,
                    };
                    let body: TaskSearchRequest = c.parse()?;
                    let caller = c.reader()?;
                    let state = State(c.state.clone());
                    match id {
                        Some(id) => ok(crate::tasks::workspace::search_task(
                            state,
                            caller,
                            Path(id),
                            Json(body),
                        )
                        .await),
                        None => ok(
                            crate::tasks::workspace::search_all(state, caller, Json(body)).await,
                        ),
                    }
                }
                .boxed()
            },
        },
        Tool {
            name: "artifact_read",
            title: "Read an artifact",
            summary: "Read an artifact a task step refers to, by its `mnemo://tasks/{task_id}/\
                artifacts/{artifact_id}` URI: at most `length` bytes (default 65536) from \
                `offset`. Text comes back as `text`, anything else base64-encoded as `base64`; \
                `next_offset` says where to read on.",
            examples: &[
                r#"{"uri": "mnemo://tasks/0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10/artifacts/0193f1d3-0000-7000-8000-000000000001"}"#,
                r#"{"uri": "mnemo://tasks/0193f1d2-7c4a-7b1e-9a55-3f2a1c9e8b10/artifacts/0193f1d3-0000-7000-8000-000000000001", "offset": 65536, "length": 4096}"#,
            ],
            scope: Scope::Read,
            read_only: true,
            in_chat: false,
            session_argument: None,
            schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "uri": {"type": "string",
                            "pattern": "^mnemo://tasks/[0-9a-fA-F-]{36}/artifacts/[0-9a-fA-F-]{36}$",
                            "description": "The artifact's URI, as a step's `artifact` part names it."},
                        "offset": {"type": "integer", "minimum": 0, "default": 0,
                            "description": "First byte to read."},
                        "length": {"type": "integer", "minimum": 1, "maximum": 1_048_576,
                            "default": ARTIFACT_PAGE_BYTES, "description": "Bytes to read at most."}
                    },
                    "required": ["uri"],
                    "additionalProperties": false
                })
            },
            run: |c| read_artifact(c).boxed(),
        },
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
                    ok(
                        crate::recall::recall(State(c.state.clone()), c.reader()?, Json(request))
                            .await,
                    )
                }
                .boxed()
            },
        },
    ]
}

/// Arguments of `artifact_read`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ArtifactArgs {
    uri: String,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    length: Option<u64>,
}

/// `mnemo://tasks/{task_id}/artifacts/{artifact_id}` → the two ids.
pub fn parse_artifact_uri(uri: &str) -> Option<(uuid::Uuid, uuid::Uuid)> {
    let rest = uri.strip_prefix("mnemo://tasks/")?;
    let (task, artifact) = rest.split_once("/artifacts/")?;
    Some((
        uuid::Uuid::parse_str(task).ok()?,
        uuid::Uuid::parse_str(artifact).ok()?,
    ))
}

/// `artifact_read`: one byte range of the artifact through the REST route's `Range` support.
async fn read_artifact(mut c: Call<'_>) -> Result<Response, ApiError> {
    let args: ArtifactArgs = c.parse()?;
    let (task_id, artifact_id) = parse_artifact_uri(&args.uri).ok_or_else(|| {
        ApiError::invalid(
            "uri",
            "invalid `uri`: expected mnemo://tasks/{task_id}/artifacts/{artifact_id}",
        )
    })?;
    let length = args.length.unwrap_or(ARTIFACT_PAGE_BYTES);
    if !(1..=1_048_576).contains(&length) {
        return Err(ApiError::invalid(
            "length",
            "invalid `length`: expected 1 to 1048576 bytes",
        ));
    }
    let last = args.offset.saturating_add(length - 1);
    let mut headers = HeaderMap::new();
    let range = format!("bytes={}-{last}", args.offset);
    headers.insert(
        header::RANGE,
        HeaderValue::from_str(&range).map_err(|e| ApiError::Internal(e.into()))?,
    );
    let response =
        crate::tasks::workspace::read_artifact(c.reader()?, Path((task_id, artifact_id)), headers)
            .await?;
    if !response.status().is_success() {
        return Ok(response);
    }
    let headers = response.headers();
    let text_header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_owned)
    };
    let mime_type = text_header(header::CONTENT_TYPE).unwrap_or_default();
    // `bytes a-b/size` on a partial answer; the whole artifact otherwise.
    let size = text_header(header::CONTENT_RANGE)
        .and_then(|v| v.rsplit('/').next().and_then(|s| s.parse::<u64>().ok()));
    let bytes = axum::body::to_bytes(response.into_body(), 2 * 1_048_576)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot read the artifact: {e}")))?;
    let read = bytes.len() as u64;
    let size = size.unwrap_or(args.offset + read);
    let end = args.offset + read;
    let mut answer = json!({
        "uri": args.uri,
        "mime_type": mime_type,
        "size": size,
        "offset": args.offset,
        "length": read,
        "next_offset": (end < size).then_some(end),
    });
    match std::str::from_utf8(&bytes) {
        Ok(text) => answer["text"] = Value::String(text.to_owned()),
        Err(_) => {
            use base64::Engine;
            answer["base64"] =
                Value::String(base64::engine::general_purpose::STANDARD.encode(&bytes));
        }
    }
    Ok(axum::Json(answer).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_uris_parse() {
        let task = uuid::Uuid::now_v7();
        let artifact = uuid::Uuid::now_v7();
        assert_eq!(
            parse_artifact_uri(&format!("mnemo://tasks/{task}/artifacts/{artifact}")),
            Some((task, artifact))
        );
        assert_eq!(parse_artifact_uri("mnemo://tasks/x/artifacts/y"), None);
        assert_eq!(parse_artifact_uri(&format!("https://tasks/{task}")), None);
    }
}

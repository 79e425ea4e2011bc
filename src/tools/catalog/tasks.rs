//! The task tools: register, update and ask about a task, append a step, search the task
//! history, and read an artifact a step refers to.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde_json::{Value, json};

use super::{ARTIFACT_PAGE_BYTES, ok};
use crate::auth::Scope;
use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::idempotency::Idempotency;
use crate::tasks::model::{QueryTask, RegisterTask, UpdateTask};
use crate::tasks::workspace::model::{NewStep, SearchRequest as TaskSearchRequest};
use crate::tools::schema::{body, with_property};
use crate::tools::{Call, Tool};

fn task_property() -> Value {
    json!({"type": "string", "format": "uuid", "description": "The task id `task_register` answered."})
}

pub(super) fn tools() -> Vec<Tool> {
    vec![
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
                let schema =
                    crate::tools::schema::without_property(&body::<UpdateTask>(), "task_id");
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

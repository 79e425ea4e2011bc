//! The detail-memory tools: store, retrieve, grep and search memories, and capture a command's
//! output.

use axum::extract::State;
use axum::http::HeaderMap;
use futures::FutureExt;
use serde_json::{Value, json};

use super::ok;
use crate::auth::Scope;
use crate::extract::{Json, Path, Query};
use crate::idempotency::Idempotency;
use crate::memories::UploadJson;
use crate::memories::model::{CaptureInput, GrepQuery, MemoryInput, PageQuery, SearchRequest};
use crate::tools::Tool;
use crate::tools::schema::{body, params, with_property};

fn key_property() -> Value {
    json!({
        "type": "string",
        "description": "The memory key (the first part of its [MemoryRef: key - summary] placeholder).",
        "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"
    })
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
    ]
}

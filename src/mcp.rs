//! The MCP server at `/mcp` (streamable HTTP transport, the Rust MCP SDK `rmcp`).
//!
//! It sits behind the same layers as every route: bearer auth (a request without a valid token
//! is 401 with a `WWW-Authenticate` naming the protected-resource metadata), fair use, timeouts.
//! Tools are the registry's ([`crate::tools`]), run as the principal of the HTTP request that
//! carries the call, so row-level security applies to each call. A session (`Mcp-Session-Id`) is
//! bound to the user who opened it; another token presenting its id is refused.
//!
//! Resources read what an agent most often needs back after losing its context:
//! `mnemo://notes/{agent}` (the long-term notes), `mnemo://memories/{key}` (a memory, a page at a
//! time with `?line_start=&line_count=` or `?offset=&limit=`), `mnemo://tasks/{task_id}` (the
//! "where was I?" answer) and the artifacts `mnemo://tasks/{task_id}/artifacts/{artifact_id}`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListResourceTemplatesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ResourceTemplate, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::state::AppState;
use crate::tools::{self, ToolResult};

/// Idle time after which an MCP session is closed.
const SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// What the server tells a client on `initialize`.
const INSTRUCTIONS: &str = "mnemo keeps an agent's memory across context compaction, restarts \
and sessions. Store every large tool or command output with store_memory (or capture_output) and \
keep only the placeholder [MemoryRef: <key> - <summary>] in your context; fetch pages with \
retrieve_memory and lines with grep_memory when you need them. Keep durable facts about the user \
in your long-term notes (manage_long_term_memory). For long tasks, task_register a plan, \
task_update after each step, and after losing context ask task_update or task_query \"where was \
I?\". recall searches everything at once.";

/// One MCP session's server: the state and, once initialised, the user it belongs to.
#[derive(Clone)]
pub struct McpServer {
    state: AppState,
    owner: Arc<OnceLock<(String, String)>>,
}

/// The `/mcp` service.
pub fn service(state: AppState) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    // Every request needs a bearer token, which a page reached by DNS rebinding cannot present,
    // so the `Host` check is left to the deployment; browser origins follow MNEMO_CORS_ORIGINS.
    let mut config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(crate::memories::upload_body_limit(
            state.config.memory_max_bytes,
        ));
    let origins: Vec<String> = state
        .config
        .cors_origins
        .iter()
        .filter(|origin| origin.as_str() != "*")
        .cloned()
        .collect();
    if !state.config.cors_origins.iter().any(|o| o == "*") {
        config = if origins.is_empty() {
            config.enforce_origin_validation()
        } else {
            config.with_allowed_origins(origins)
        };
    }
    StreamableHttpService::new(
        move || {
            Ok(McpServer {
                state: state.clone(),
                owner: Arc::new(OnceLock::new()),
            })
        },
        Arc::new(sessions),
        config,
    )
}

impl McpServer {
    /// The principal of the HTTP request carrying `context`, checked against the session owner.
    fn principal(&self, context: &RequestContext<RoleServer>) -> Result<Principal, McpError> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| McpError::invalid_request("missing bearer token", None))?;
        let me = (principal.tenant_id.clone(), principal.user_id.clone());
        if self.owner.get().is_some_and(|owner| *owner != me) {
            return Err(McpError::invalid_request(
                "this MCP session belongs to another user; initialize a session of your own",
                None,
            ));
        }
        Ok(principal)
    }

    async fn run(
        &self,
        principal: &Principal,
        name: &str,
        arguments: Value,
    ) -> Result<ToolResult, McpError> {
        let tool = tools::find(name)
            .ok_or_else(|| McpError::invalid_params(format!("no tool `{name}`"), None))?;
        tools::call(&self.state, principal, tool, arguments, None)
            .await
            .map_err(|err| {
                tracing::error!(error = ?err, tool = name, "MCP tool failed");
                McpError::internal_error("internal error", None)
            })
    }
}

/// A resource URI taken apart: `(path, query)`.
fn split_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("mnemo://")?;
    Some(rest.split_once('?').unwrap_or((rest, "")))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(
            Implementation::new("mnemo", env!("CARGO_PKG_VERSION")).with_title("mnemo memory"),
        )
        .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let principal = self.principal(&context)?;
        let _ = self
            .owner
            .set((principal.tenant_id.clone(), principal.user_id.clone()));
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.principal(&context)?;
        let tools = tools::all()
            .iter()
            .map(|tool| serde_json::from_value(tool.render(tools::Format::Mcp)))
            .collect::<Result<Vec<rmcp::model::Tool>, _>>()
            .map_err(|e| McpError::internal_error(format!("tool schema: {e}"), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let principal = self.principal(&context)?;
        let arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let result = self.run(&principal, &request.name, arguments).await?;
        let structured = match result.structured {
            Value::Object(_) => result.structured,
            Value::Null => json!({}),
            other => json!({ "value": other }),
        };
        let mut answer = if result.is_error {
            CallToolResult::error(vec![ContentBlock::text(result.content)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(result.content)])
        };
        answer.structured_content = Some(structured);
        Ok(answer.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.principal(&context)?;
        let templates = vec![
            ResourceTemplate::new("mnemo://notes/{agent}", "notes")
                .with_title("Long-term notes")
                .with_description("The Markdown notes kept about you for one agent")
                .with_mime_type("text/markdown"),
            ResourceTemplate::new("mnemo://memories/{key}", "memory")
                .with_title("Detail memory")
                .with_description(
                    "A stored memory, one page at a time: add ?line_start=N&line_count=M or \
                     ?offset=N&limit=M for other pages",
                )
                .with_mime_type("text/plain"),
            ResourceTemplate::new("mnemo://tasks/{task_id}", "task")
                .with_title("Where was I?")
                .with_description("A task's state: steps done, the next one, key details")
                .with_mime_type("text/plain"),
            ResourceTemplate::new(
                "mnemo://tasks/{task_id}/artifacts/{artifact_id}",
                "artifact",
            )
            .with_title("Task artifact")
            .with_description("The first 64 KiB of an artifact a task step refers to"),
        ];
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let principal = self.principal(&context)?;
        let uri = request.uri;
        let not_found = || McpError::resource_not_found(format!("no resource {uri}"), None);
        let (path, query) = split_uri(&uri).ok_or_else(not_found)?;
        let mut parts = path.splitn(4, '/');
        let (kind, id, rest) = (parts.next(), parts.next(), parts.next());
        let (tool, mut arguments, mime) = match (kind, id, rest) {
            (Some("notes"), Some(agent), None) if !agent.is_empty() => (
                "manage_long_term_memory",
                json!({"agent_name": percent_decode(agent)?, "operation": "read"}),
                "text/markdown",
            ),
            (Some("memories"), Some(key), None) if !key.is_empty() => (
                "retrieve_memory",
                json!({"key": percent_decode(key)?}),
                "text/plain",
            ),
            (Some("tasks"), Some(task), None) => (
                "task_query",
                json!({"task_id": task, "query": "where was I?"}),
                "text/plain",
            ),
            (Some("tasks"), Some(_), Some(_)) => ("artifact_read", json!({"uri": uri}), ""),
            _ => return Err(not_found()),
        };
        if tool == "retrieve_memory" {
            for (name, value) in form_urlencoded::parse(query.as_bytes()) {
                let number: u64 = value.parse().map_err(|_| {
                    McpError::invalid_params(format!("`{name}` must be a number"), None)
                })?;
                arguments[name.as_ref()] = json!(number);
            }
        }
        let result = self.run(&principal, tool, arguments).await?;
        if result.is_error {
            return Err(if result.status == StatusCode::NOT_FOUND.as_u16() {
                McpError::resource_not_found(result.content, None)
            } else {
                McpError::invalid_params(result.content, None)
            });
        }
        let text = |field: &str| result.structured[field].as_str().map(str::to_owned);
        let contents = match tool {
            "manage_long_term_memory" => {
                vec![
                    ResourceContents::text(text("notes").unwrap_or_default(), &uri)
                        .with_mime_type(mime),
                ]
            }
            "retrieve_memory" => {
                vec![
                    ResourceContents::text(text("content").unwrap_or_default(), &uri)
                        .with_mime_type(mime),
                ]
            }
            "task_query" => vec![
                ResourceContents::text(text("answer").unwrap_or_default(), &uri)
                    .with_mime_type(mime),
            ],
            _ => {
                let mime_type = text("mime_type").unwrap_or_default();
                match (text("text"), text("base64")) {
                    (Some(body), _) => {
                        vec![ResourceContents::text(body, &uri).with_mime_type(mime_type)]
                    }
                    (None, Some(blob)) => {
                        vec![ResourceContents::blob(blob, &uri).with_mime_type(mime_type)]
                    }
                    _ => Vec::new(),
                }
            }
        };
        Ok(ReadResourceResult::new(contents).into())
    }
}

fn percent_decode(text: &str) -> Result<String, McpError> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| McpError::invalid_params("the resource URI is not UTF-8", None))
}

/// Middleware of `/mcp`: ending a session (`DELETE` with its `Mcp-Session-Id`) answers 204 No
/// Content, which MCP clients expect; the SDK's transport answers 202.
pub async fn ended_session_status(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// The base URL clients reach this service at: `MNEMO_PUBLIC_URL`, else the request's host.
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.config.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .filter(|p| *p == "https" || *p == "http")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

/// The URL of the OAuth protected-resource metadata (RFC 9728) of this service.
pub fn resource_metadata_url(state: &AppState, headers: &HeaderMap) -> String {
    format!(
        "{}/.well-known/oauth-protected-resource",
        base_url(state, headers)
    )
}

/// `GET /.well-known/oauth-protected-resource` (and with the `/mcp` suffix): RFC 9728 metadata,
/// so that MCP clients doing OAuth find the authorization server (`MNEMO_JWT_ISSUER`).
pub async fn protected_resource(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let base = base_url(&state, &headers);
    let servers: Vec<&str> = state.config.jwt_issuer.iter().map(String::as_str).collect();
    let body = json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": servers,
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["memory:read", "memory:write"],
        "resource_name": "mnemo",
        "resource_documentation": format!("{base}/docs"),
    });
    (
        [(header::CACHE_CONTROL, "public, max-age=3600")],
        axum::Json(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split() {
        assert_eq!(split_uri("mnemo://notes/a"), Some(("notes/a", "")));
        assert_eq!(
            split_uri("mnemo://memories/k?line_start=2"),
            Some(("memories/k", "line_start=2"))
        );
        assert_eq!(split_uri("https://x"), None);
    }
}

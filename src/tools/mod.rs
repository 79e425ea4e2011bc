//! The agent tools, defined once and served three ways: to the model of `/api/chat`, over MCP
//! (`/mcp`) and over REST (`GET /api/tools`, `POST /api/tools/call`).
//!
//! A [`Tool`] is a name, a description that teaches its use (with examples the tests check
//! against its schema), the scope it needs, the JSON Schema of its arguments (derived from the
//! request type the REST route takes, see [`schema`]) and the function that runs it. That function
//! calls the REST handler itself with the caller's [`Principal`], so a tool call and the matching
//! REST call validate, authorise (row-level security included) and answer exactly alike.

pub mod catalog;
mod http;
pub mod schema;

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::auth::{Principal, Scope};
use crate::error::{ApiError, Problem};
use crate::state::AppState;

pub use http::router;

/// Largest result body a tool returns (a memory page is bounded far below this).
const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// One agent tool.
pub struct Tool {
    pub name: &'static str,
    /// A short human title (MCP `title`).
    pub title: &'static str,
    /// What the tool does and when to use it, for the model.
    pub summary: &'static str,
    /// Argument objects that must be valid; shown to the model under the summary.
    pub examples: &'static [&'static str],
    /// The scope a token needs to call the tool at all (`memory:write` for the tools that always
    /// write; a tool that reads or writes by operation checks the rest itself, as its route does).
    pub scope: Scope,
    /// The tool never changes anything.
    pub read_only: bool,
    /// Offered to the model of `/api/chat` (the memory tools; task tools are for agents).
    pub in_chat: bool,
    /// An argument the chat session supplies itself (its agent), hidden from the chat model.
    pub session_argument: Option<&'static str>,
    schema: fn() -> Value,
    run: for<'a> fn(Call<'a>) -> BoxFuture<'a, Result<Response, ApiError>>,
}

impl Tool {
    /// The description shown to a model: the summary and the examples.
    pub fn description(&self) -> String {
        let mut text = self.summary.to_owned();
        for (i, example) in self.examples.iter().enumerate() {
            text.push_str(if i == 0 {
                "\n\nExample: "
            } else {
                "\nExample: "
            });
            text.push_str(example);
        }
        text
    }

    /// The JSON Schema of the arguments (derived once per process).
    pub fn input_schema(&self) -> Value {
        static SCHEMAS: OnceLock<std::collections::HashMap<&'static str, Value>> = OnceLock::new();
        SCHEMAS
            .get_or_init(|| all().iter().map(|t| (t.name, (t.schema)())).collect())
            .get(self.name)
            .cloned()
            .unwrap_or_else(|| (self.schema)())
    }

    /// The tool in a vendor's function-calling shape.
    pub fn render(&self, format: Format) -> Value {
        let schema = self.input_schema();
        match format {
            Format::Openai => json!({
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description(),
                    "parameters": schema,
                }
            }),
            Format::Anthropic => json!({
                "name": self.name,
                "description": self.description(),
                "input_schema": schema,
            }),
            Format::Mcp => json!({
                "name": self.name,
                "title": self.title,
                "description": self.description(),
                "inputSchema": schema,
                "annotations": {
                    "title": self.title,
                    "readOnlyHint": self.read_only,
                    "destructiveHint": self.name == "manage_long_term_memory",
                    "openWorldHint": false,
                },
            }),
        }
    }
}

/// The function-calling shapes `GET /api/tools` serves.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{type: "function", function: {name, description, parameters}}`
    #[default]
    Openai,
    /// `{name, description, input_schema}`
    Anthropic,
    /// `{name, title, description, inputSchema, annotations}`
    Mcp,
}

/// Every tool, in a stable order.
pub fn all() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(catalog::tools)
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    all().iter().find(|tool| tool.name == name)
}

/// The context of one call: who calls and, from a chat session, its agent.
pub struct Call<'a> {
    pub state: &'a AppState,
    pub principal: &'a Principal,
    /// The arguments as an object.
    args: Map<String, Value>,
    /// The chat session's agent, for [`Tool::session_argument`].
    pub session_agent: Option<&'a str>,
}

impl Call<'_> {
    /// The caller as a reader of their data (403 without `memory:read`).
    pub fn reader(&self) -> Result<crate::access::Reader, ApiError> {
        crate::access::Reader::new(self.state.db.clone(), self.principal.clone())
    }

    /// The caller as a writer of their data (403 without `memory:write`).
    pub fn writer(&self) -> Result<crate::access::Writer, ApiError> {
        crate::access::Writer::new(self.state.db.clone(), self.principal.clone())
    }

    /// Removes the string argument `name` (an identifier the REST route takes in its path).
    pub fn take_string(&mut self, name: &str) -> Result<String, ApiError> {
        match self.args.remove(name) {
            Some(Value::String(value)) => Ok(value),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("invalid `{name}`: expected a string"),
            )),
            None => Err(ApiError::invalid(
                name,
                format!("missing argument `{name}`"),
            )),
        }
    }

    /// Accepts `alias` as another name of the argument `name` (`memory_key` for `key`, as agents
    /// written against other memory services send it); both at once is 422.
    pub fn alias(&mut self, alias: &str, name: &str) -> Result<(), ApiError> {
        if let Some(value) = self.args.remove(alias) {
            if self.args.contains_key(name) {
                return Err(ApiError::invalid(
                    name,
                    format!("duplicate field `{name}`: sent as both `{name}` and `{alias}`"),
                ));
            }
            self.args.insert(name.to_owned(), value);
        }
        Ok(())
    }

    /// Removes the optional string argument `name`.
    pub fn take_optional_string(&mut self, name: &str) -> Result<Option<String>, ApiError> {
        match self.args.get(name) {
            None | Some(Value::Null) => {
                self.args.remove(name);
                Ok(None)
            }
            Some(_) => self.take_string(name).map(Some),
        }
    }

    /// Removes the UUID argument `name`.
    pub fn take_uuid(&mut self, name: &str) -> Result<uuid::Uuid, ApiError> {
        let text = self.take_string(name)?;
        uuid::Uuid::parse_str(&text)
            .map_err(|_| ApiError::invalid(name, format!("invalid `{name}`: expected a UUID")))
    }

    /// Sets `name` to `value` when the caller left it out (or sent null).
    pub fn default_argument(&mut self, name: &str, value: &str) {
        if self.args.get(name).is_none_or(Value::is_null) {
            self.args
                .insert(name.to_owned(), Value::String(value.to_owned()));
        }
    }

    /// Parses the remaining arguments as the REST route's body (or query) type, with its errors:
    /// 422 naming the field by its JSON path.
    pub fn parse<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, ApiError> {
        let args = std::mem::take(&mut self.args);
        let bytes = serde_json::to_vec(&Value::Object(args))
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot encode arguments: {e}")))?;
        crate::extract::parse_json(&bytes).map_err(without_position)
    }
}

/// A parse error without serde's "at line 1 column 13": the position is in the re-encoded
/// arguments, not in anything the caller sent.
fn without_position(err: ApiError) -> ApiError {
    match err {
        ApiError::Problem(mut problem) => {
            if let Some(at) = problem.detail.rfind(" at line ") {
                let tail = &problem.detail[at + " at line ".len()..];
                let is_position = tail.split_once(" column ").is_some_and(|(line, column)| {
                    !line.is_empty()
                        && !column.is_empty()
                        && line.bytes().all(|b| b.is_ascii_digit())
                        && column.bytes().all(|b| b.is_ascii_digit())
                });
                if is_position {
                    problem.detail.truncate(at);
                }
            }
            ApiError::Problem(problem)
        }
        other => other,
    }
}

/// What a tool answered.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ToolResult {
    /// The tool's name.
    pub name: String,
    /// Text for the model: the result as compact JSON, or what went wrong.
    pub content: String,
    /// The result for programs: the REST answer's JSON (on failure, the problem).
    #[schema(value_type = Object)]
    pub structured: Value,
    /// The tool refused or failed; `content` says why, so a model can correct the call.
    pub is_error: bool,
    /// The HTTP status the REST route would have answered.
    pub status: u16,
    /// The failure as the REST route would have answered it.
    #[serde(skip)]
    #[schema(ignore)]
    pub problem: Option<Box<Problem>>,
}

impl ToolResult {
    fn failure(name: &str, problem: &Problem) -> Self {
        ToolResult {
            name: name.to_owned(),
            content: match problem.extensions.get("field").and_then(Value::as_str) {
                Some(field) if !field.is_empty() => {
                    format!(
                        "error {}: {} (field `{field}`)",
                        problem.status, problem.detail
                    )
                }
                _ => format!("error {}: {}", problem.status, problem.detail),
            },
            structured: serde_json::to_value(problem).unwrap_or(Value::Null),
            is_error: true,
            status: problem.status,
            problem: Some(Box::new(problem.clone())),
        }
    }
}

/// Runs `tool` with `arguments` as `principal`. `Err` only for what no tool answer can carry: an
/// internal fault. Every refusal (missing scope, invalid arguments, nothing found) is a result
/// with `is_error` and the problem in `structured`.
pub async fn call(
    state: &AppState,
    principal: &Principal,
    tool: &Tool,
    arguments: Value,
    session_agent: Option<&str>,
) -> Result<ToolResult, ApiError> {
    let outcome = async {
        principal.require(tool.scope)?;
        let args = match arguments {
            Value::Object(args) => args,
            Value::Null => Map::new(),
            _ => {
                return Err(ApiError::invalid("", "the arguments must be a JSON object"));
            }
        };
        let mut call = Call {
            state,
            principal,
            args,
            session_agent,
        };
        if let (Some(name), Some(agent)) = (tool.session_argument, session_agent) {
            call.args
                .insert(name.to_owned(), Value::String(agent.to_owned()));
        }
        (tool.run)(call).await
    }
    .await;
    match outcome {
        Ok(response) => read_answer(tool.name, response).await,
        Err(ApiError::Problem(problem)) => Ok(ToolResult::failure(tool.name, &problem)),
        Err(internal) => Err(internal),
    }
}

/// The REST answer as a tool result.
async fn read_answer(name: &str, response: Response) -> Result<ToolResult, ApiError> {
    let status = response.status();
    let problem = response.extensions().get::<Problem>().cloned();
    let bytes = axum::body::to_bytes(response.into_body(), MAX_RESULT_BYTES)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot read the tool's answer: {e}")))?;
    if let Some(problem) = problem {
        return Ok(ToolResult::failure(name, &problem));
    }
    if !status.is_success() {
        let problem = Problem::new(status, String::from_utf8_lossy(&bytes).into_owned());
        return Ok(ToolResult::failure(name, &problem));
    }
    let structured = json_or_text(&bytes);
    let content = match &structured {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    Ok(ToolResult {
        name: name.to_owned(),
        content,
        structured,
        is_error: false,
        status: status.as_u16(),
        problem: None,
    })
}

fn json_or_text(bytes: &Bytes) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Whether a failed result is the caller's mistake about the call itself (HTTP 4xx the REST
/// route of `/api/tools/call` answers as such), rather than the tool's own outcome.
pub fn is_call_error(status: u16) -> bool {
    matches!(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        StatusCode::BAD_REQUEST
            | StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::UNPROCESSABLE_ENTITY
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
            | StatusCode::INTERNAL_SERVER_ERROR
    )
}

//! `GET /api/tools` and `POST /api/tools/call`: the tool registry over REST.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{Format, ToolResult};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::Query;
use crate::memories::UploadJson;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tools))
        .routes(routes!(call_tool))
}

/// Query of `GET /api/tools`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ToolsQuery {
    /// The function-calling shape: `openai` (default), `anthropic` or `mcp`.
    #[serde(default)]
    pub format: Format,
}

/// The tool schemas in one vendor's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolList {
    pub format: Format,
    /// Ready to pass as the `tools` of a model call in that vendor's API.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
}

/// Body of `POST /api/tools/call`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "store_memory", "arguments": {"content": "total 48\n...", "description": "ls -la of /srv"}}))]
pub struct ToolCallRequest {
    /// The tool's name, as `GET /api/tools` lists it.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// The tool's arguments, an object matching its input schema (absent = `{}`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// The agent tools with their function-calling schemas.
///
/// Every tool the service offers agents (the same ones `/mcp` serves and `/api/chat` uses), in
/// the shape a model API expects: OpenAI `{type: "function", function: {name, description,
/// parameters}}`, Anthropic `{name, description, input_schema}` or MCP `{name, title,
/// description, inputSchema, annotations}`. Descriptions teach the `[MemoryRef: <key> -
/// <summary>]` convention and carry valid example arguments.
#[utoipa::path(get, path = "/api/tools", tag = "tools",
    params(ToolsQuery),
    responses(
        (status = 200, description = "The tools", body = ToolList),
        (status = 422, description = "Unknown format", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_tools(
    _principal: Principal,
    Query(query): Query<ToolsQuery>,
) -> ApiResult<axum::Json<ToolList>> {
    let tools = super::all()
        .iter()
        .map(|tool| tool.render(query.format))
        .collect();
    Ok(axum::Json(ToolList {
        format: query.format,
        tools,
    }))
}

/// Run one tool call.
///
/// Runs the tool under the caller's token exactly as its REST route would (same validation,
/// scopes and row-level security). A call the tool itself answers with a failure (nothing under
/// that key, a conflict, a size limit) is 200 with `is_error` and the problem in `structured`, so
/// a model can read why and correct itself. Calls that cannot run are errors: an unknown tool is
/// 404, arguments that do not fit the schema 422 naming the `field` (`arguments.<name>`), a token lacking the tool's
/// scope 403.
#[utoipa::path(post, path = "/api/tools/call", tag = "tools",
    request_body = ToolCallRequest,
    responses(
        (status = 200, description = "What the tool answered (`is_error` when it refused)", body = ToolResult),
        (status = 403, description = "The token lacks the tool's scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No tool of that name", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the limit (`limit_bytes`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Arguments that do not fit the tool's schema (`field` names the argument)", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn call_tool(
    State(state): State<AppState>,
    principal: Principal,
    UploadJson(request): UploadJson<ToolCallRequest>,
) -> ApiResult<axum::Json<ToolResult>> {
    let tool = super::find(&request.name).ok_or_else(|| unknown_tool(&request.name))?;
    let result = super::call(&state, &principal, tool, request.arguments, None).await?;
    if result.is_error && super::is_call_error(result.status) {
        // The call could not run: answered as the REST route would, problem and all.
        return Err(call_problem(result));
    }
    Ok(axum::Json(result))
}

/// 404 naming the tools there are.
fn unknown_tool(name: &str) -> ApiError {
    let names: Vec<&str> = super::all().iter().map(|t| t.name).collect();
    ApiError::not_found(format!(
        "no tool `{name}`; the tools are {}",
        names.join(", ")
    ))
}

/// The problem of a call that could not run, its `field` a path in the request's body, where
/// the arguments sit under `arguments`.
fn call_problem(result: ToolResult) -> ApiError {
    let mut problem = result.problem.unwrap_or_else(|| {
        Box::new(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            result.content,
        ))
    });
    if let Some(Value::String(field)) = problem.extensions.get_mut("field") {
        *field = if field.is_empty() {
            "arguments".to_owned()
        } else {
            format!("arguments.{field}")
        };
    }
    ApiError::Problem(problem)
}

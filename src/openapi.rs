//! The OpenAPI document, derived from the routes actually served (see [`crate::http::api`]).
//!
//! Schemas carry the limits the handlers enforce (lengths, ranges, item counts, non-empty rules).
//! A text that must not be blank nor hold control characters has the pattern
//! `^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$`; one that must only not
//! be blank has `\S`. Limits that depend on settings are documented with their defaults.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mnemo",
        description = "Memory service for LLM agents: detail memory referenced by placeholders, \
long-term notes, conversation history and task memory. Every route under `/api` needs \
`Authorization: Bearer <JWT>`; errors are `application/problem+json` (RFC 9457). No string \
may hold the NUL character (U+0000) and every JSON number must lie within ±1e300 (so that it \
reads back as written): either is 422 naming the field.",
        license(name = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "platform", description = "Identity, health, readiness and metrics"),
        (name = "memories", description = "Detail memory: store large outputs once, reference them by placeholder, page, grep and search them"),
        (name = "notes", description = "Long-term Markdown notes per user and agent, edited by section"),
        (name = "conversations", description = "Chat archive (batches and sendBeacon), sessions, short-term window and chat context"),
        (name = "tasks", description = "Long-running agent tasks: plans, steps, execution log, snapshots and \"where was I?\""),
        (name = "recall", description = "One ranked search across memories, conversation messages, notes and task history"),
        (name = "tools", description = "The agent tools, with function-calling schemas (OpenAI, Anthropic, MCP), and a route to run one; the same tools are served over MCP at /mcp"),
        (name = "data rights", description = "Export all of the caller's data, import it here or elsewhere, erase it; erase a whole tenant"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A JWT signed with the configured key; `mnemo token` prints one for development.",
                    ))
                    .build(),
            ),
        );
    }
}

/// Raw bytes as a request or response body (`type: string, format: binary`).
pub struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(utoipa::openapi::schema::SchemaFormat::KnownFormat(
                utoipa::openapi::schema::KnownFormat::Binary,
            )))
            .into()
    }
}

impl utoipa::ToSchema for Binary {}

/// A schema written out as JSON, for shapes the derive cannot express (unions of forms). The
/// JSON must be a schema utoipa reads back as written; `schema_json_reads_back` tests each use.
pub fn json_schema(value: serde_json::Value) -> RefOr<utoipa::openapi::schema::Schema> {
    serde_json::from_value(value).unwrap_or_else(|err| {
        tracing::error!(error = %err, "a hand-written schema does not parse");
        RefOr::T(ObjectBuilder::new().into())
    })
}

/// Splits the documented routes into the router and its document, with the answers of the
/// layers every route shares (see [`complete`]).
pub fn split<S: Clone + Send + Sync + 'static>(
    api: utoipa_axum::router::OpenApiRouter<S>,
) -> (axum::Router<S>, utoipa::openapi::OpenApi) {
    let (router, mut spec) = api.split_for_parts();
    complete(&mut spec);
    (router, spec)
}

/// An error answer the shared layers may give, documented once under `components/responses`.
pub(crate) struct Shared {
    status: &'static str,
    name: &'static str,
    pub(crate) description: &'static str,
    /// Response headers it carries: (name, description).
    headers: &'static [(&'static str, &'static str)],
}

const BAD_REQUEST: Shared = Shared {
    status: "400",
    name: "BadRequest",
    description: "Malformed JSON or a body that cannot be read",
    headers: &[],
};
const UNAUTHORIZED: Shared = Shared {
    status: "401",
    name: "Unauthorized",
    description: "Missing or invalid token",
    headers: &[(
        "WWW-Authenticate",
        "The bearer challenge, naming what is wrong",
    )],
};
const FORBIDDEN: Shared = Shared {
    status: "403",
    name: "Forbidden",
    description: "The token lacks the scope this operation needs",
    headers: &[],
};
const TIMEOUT: Shared = Shared {
    status: "408",
    name: "RequestTimeout",
    description: "The request took longer than the configured request timeout and was stopped",
    headers: &[],
};
const TOO_LARGE: Shared = Shared {
    status: "413",
    name: "PayloadTooLarge",
    description: "Body larger than this route's limit (`limit_bytes`)",
    headers: &[],
};
const UNSUPPORTED: Shared = Shared {
    status: "415",
    name: "UnsupportedMediaType",
    description: "The body is not of a media type this operation accepts",
    headers: &[],
};
pub(crate) const INVALID: Shared = Shared {
    status: "422",
    name: "Unprocessable",
    description: "A parameter or body field is invalid; `field` names it (a JSON path)",
    headers: &[],
};
const TOO_MANY: Shared = Shared {
    status: "429",
    name: "TooManyRequests",
    description: "The tenant has too many requests in flight, or a configured rate limit is spent",
    headers: &[
        ("Retry-After", "Seconds to wait before retrying"),
        (
            "RateLimit",
            "What is left of the configured rate limits, if any",
        ),
        ("RateLimit-Policy", "The configured rate limits, if any"),
    ],
};
const UNAVAILABLE: Shared = Shared {
    status: "503",
    name: "ServiceUnavailable",
    description: "The database is busy or unreachable, or a statement ran past its timeout; retry",
    headers: &[("Retry-After", "Seconds to wait before retrying")],
};

impl Shared {
    fn response(&self) -> Response {
        let mut builder = ResponseBuilder::new()
            .description(self.description)
            .content(
                crate::error::PROBLEM_JSON,
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            );
        for (name, description) in self.headers {
            builder = builder.header(
                *name,
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::String))
                    .description(Some(*description))
                    .build(),
            );
        }
        builder.build()
    }
}

/// Adds the bearer security requirement to every operation under `/api/`, and the answers of the
/// layers every route shares to each operation that lacks them: every
/// route may time out (408), every API route may find the database unavailable (503); one under
/// bearer auth may be 401, 403 (a missing scope) and 429 (fair use); one with path or query parameters 422 (a parameter of the
/// wrong type); one with a body 400 (unreadable) and 413 (too large), a JSON body also 415 and 422.
/// An operation's own description of a status is kept.
pub fn complete(spec: &mut utoipa::openapi::OpenApi) {
    let all = [
        &BAD_REQUEST,
        &UNAUTHORIZED,
        &FORBIDDEN,
        &TIMEOUT,
        &TOO_LARGE,
        &UNSUPPORTED,
        &INVALID,
        &TOO_MANY,
        &UNAVAILABLE,
    ];
    let components = spec.components.get_or_insert_with(Default::default);
    for shared in all {
        components
            .responses
            .insert(shared.name.to_owned(), RefOr::T(shared.response()));
    }
    for (path, item) in spec.paths.paths.iter_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            complete_operation(path, operation);
        }
    }
}

fn complete_operation(path: &str, operation: &mut Operation) {
    // Every API route takes the bearer token (the beacon in its body, which the document
    // describes the same way).
    if path.starts_with("/api/") && operation.security.is_none() {
        operation.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
    let mut shared = vec![&TIMEOUT];
    // Every API route reads or writes the database (the beacon too, which has no bearer header).
    if path.starts_with("/api/") {
        shared.push(&UNAVAILABLE);
    }
    if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
        shared.extend([&UNAUTHORIZED, &TOO_MANY]);
        // Every bearer route but the identity check needs a scope.
        if path != "/api/me" {
            shared.push(&FORBIDDEN);
        }
    }
    let parameters = operation.parameters.as_deref().unwrap_or_default();
    if parameters
        .iter()
        .any(|p| matches!(p.parameter_in, ParameterIn::Path | ParameterIn::Query))
    {
        shared.push(&INVALID);
    }
    if let Some(body) = &operation.request_body {
        shared.extend([&BAD_REQUEST, &TOO_LARGE]);
        if body.content.keys().any(|media| media.ends_with("json")) {
            shared.extend([&UNSUPPORTED, &INVALID]);
        }
    }
    let responses = &mut operation.responses.responses;
    for answer in shared {
        responses
            .entry(answer.status.to_owned())
            .or_insert_with(|| {
                RefOr::Ref(Ref::new(format!("#/components/responses/{}", answer.name)))
            });
    }
}

/// The document as JSON, the form checked in at `openapi/openapi.json`.
pub fn json() -> String {
    let (_, api) = split(crate::http::api());
    let mut text = api.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

//! The OpenAPI document, derived from the routes actually served (see [`crate::http::api`]).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mnemo",
        description = "Memory service for LLM agents: detail memory referenced by placeholders, \
long-term notes, conversation history and task memory. Every route under `/api` needs \
`Authorization: Bearer <JWT>`; errors are `application/problem+json` (RFC 9457).",
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

/// The document as JSON, the form checked in at `openapi/openapi.json`.
pub fn json() -> String {
    let (_, api) = crate::http::api().split_for_parts();
    let mut text = api.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

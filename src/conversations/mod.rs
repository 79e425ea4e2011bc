//! Conversation memory: batched archival, sendBeacon uploads, sessions and their running
//! summaries, the short-term window and chat context.

pub mod appends;
mod archive_routes;
pub mod batch;
pub mod chat;
mod chat_routes;
mod config;
pub mod context;
mod demo;
pub mod model;
pub mod search;
mod session_routes;
pub mod store;
pub mod summary;
pub mod sweeper;
pub mod tools;
pub mod transfer;
pub mod window;

use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::extract::parse_json;
use crate::state::AppState;

pub use archive_routes::*;
pub use chat_routes::*;
pub use config::ConversationsConfig;
pub use session_routes::*;

pub fn router() -> OpenApiRouter<AppState> {
    let beacon = crate::http::body_limit(
        OpenApiRouter::new().routes(routes!(archive_beacon)),
        BEACON_MAX_BYTES,
    );
    OpenApiRouter::new()
        .routes(routes!(archive_messages))
        .routes(routes!(list_sessions))
        .routes(routes!(session_messages))
        .routes(routes!(get_session, delete_session))
        .routes(routes!(chat_context))
        .routes(routes!(chat))
        .routes(routes!(search_chat))
        .merge(beacon)
        .merge(demo::router())
}

/// A JSON body read within `MNEMO_ARCHIVE_MAX_BYTES` (413 past it; 415 when not JSON).
pub struct LimitedJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for LimitedJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let content_type = mime(req.headers());
        if content_type != "application/json" {
            return Err(ApiError::status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a JSON body with `Content-Type: application/json`",
            ));
        }
        let bytes = crate::extract::read_limited(
            req,
            state.config.conversations.archive_max_bytes,
            "batch",
        )
        .await?;
        parse_json(&bytes).map(LimitedJson)
    }
}

fn mime(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

//! The demo chat page at `/demo` and the browser client it uses, built into the binary.
//!
//! Both are public (see `PUBLIC_ROUTES`): they hold no data; the page asks for a token and sends it
//! with every request.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

const PAGE: &str = include_str!("../../clients/js/demo.html");
const ARCHIVER: &str = include_str!("../../clients/js/chat-archiver.js");

/// Undocumented in the OpenAPI: these are a page and a script, not API.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .route("/demo", get(page))
        .route("/demo/chat-archiver.js", get(archiver))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}

async fn archiver() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        ARCHIVER,
    )
}

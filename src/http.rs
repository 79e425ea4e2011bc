//! The one place routers merge, plus the layers every route shares.
//!
//! Layer order, outermost first: request id (generated when absent, echoed back), tracing span named
//! by the route template, metrics, CORS, problem+json rendering, timeout (408), bearer auth (deny by
//! default; [`PUBLIC_ROUTES`] is the allowlist), fair use, the body digest of requests carrying an
//! `Idempotency-Key` ([`crate::idempotency`]), default body limit.

use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower::ServiceBuilder;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

use crate::error::{ApiError, PROBLEM_JSON, Problem};
use crate::extract::RouteBodyLimit;
use crate::openapi::ApiDoc;
use crate::state::AppState;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Routes served without a bearer token. An entry ending in `/*` covers everything below it.
/// Everything not listed here needs a valid token, including unknown paths.
pub const PUBLIC_ROUTES: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs/*",
    "/api/chat/session/archive_messages/beacon",
    "/demo/*",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/*",
];

/// Every documented route, with its OpenAPI description. Domain routers merge here.
pub fn api() -> OpenApiRouter<AppState> {
    let mut router = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(crate::platform::router())
        .merge(crate::memories::router())
        .merge(crate::notes::router())
        .merge(crate::conversations::router())
        .merge(crate::tasks::router())
        .merge(crate::recall::router())
        .merge(crate::tools::router())
        .merge(crate::rights::router());
    crate::idempotency::document(router.get_openapi_mut());
    router
}

/// The complete application: API routes, Swagger UI at `/docs`, the spec at `/openapi.json`.
pub fn app(state: AppState) -> Router {
    let (router, spec) = crate::openapi::split(api());
    let router = router
        .merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .merge(
            Router::new()
                .route_service("/mcp", crate::mcp::service(state.clone()))
                .layer(middleware::from_fn(crate::mcp::ended_session_status)),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(crate::mcp::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(crate::mcp::protected_resource),
        );
    layered(router, state)
}

/// Wraps `router` in the layers every route shares (see the module docs) and gives it its state.
pub fn layered(router: Router<AppState>, state: AppState) -> Router {
    let timeout = state.config.request_timeout();
    let body_limit = state.config.max_body_bytes;
    let cors = cors(&state.config.cors_origins);
    router
        .fallback(not_found)
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(bound_request_id))
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(PropagateRequestIdLayer::new(REQUEST_ID))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(make_span)
                        // A 5xx is logged where it is made: a fault at ERROR (with its cause), an
                        // outage at WARN; an expected 503 (no model configured) is not an error.
                        .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
                )
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    record_metrics,
                ))
                .layer(cors)
                .layer(middleware::from_fn(render_problems))
                .layer(middleware::from_fn(refuse_nul_in_path))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    timeout,
                ))
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::auth::require_bearer,
                ))
                .layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::fair_use::enforce,
                ))
                .layer(middleware::from_fn(crate::idempotency::digest_body))
                .layer(DefaultBodyLimit::max(body_limit))
                .layer(axum::Extension(RouteBodyLimit(body_limit))),
        )
        .with_state(state)
}

/// Gives the routes of `router` their own body limit (413 past it, naming the limit).
pub fn body_limit<S: Clone + Send + Sync + 'static>(
    router: OpenApiRouter<S>,
    bytes: usize,
) -> OpenApiRouter<S> {
    router
        .layer(DefaultBodyLimit::max(bytes))
        .layer(axum::Extension(RouteBodyLimit(bytes)))
}

/// Request headers cross-origin pages may send.
pub const CORS_ALLOWED_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "if-match",
    "if-none-match",
    "idempotency-key",
    "range",
    "x-request-id",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Response headers the API documents, readable by cross-origin pages (paging, conditional
/// requests and back-off need them; a browser MCP client finds the authorization server through
/// the 401's `WWW-Authenticate`).
pub const CORS_EXPOSED_HEADERS: &[&str] = &[
    "x-request-id",
    "etag",
    "content-range",
    "accept-ranges",
    "x-memory-range",
    "x-memory-lines",
    "x-memory-next",
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "idempotent-replayed",
    "mcp-session-id",
    "www-authenticate",
];

fn cors(origins: &[String]) -> CorsLayer {
    let layer = CorsLayer::new()
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ])
        .allow_headers(
            CORS_ALLOWED_HEADERS
                .iter()
                .map(|h| HeaderName::from_static(h))
                .collect::<Vec<_>>(),
        )
        .expose_headers(
            CORS_EXPOSED_HEADERS
                .iter()
                .map(|h| HeaderName::from_static(h))
                .collect::<Vec<_>>(),
        );
    if origins.iter().any(|o| o == "*") {
        layer.allow_origin(Any)
    } else {
        let list: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o.trim()).ok())
            .collect();
        layer.allow_origin(AllowOrigin::list(list))
    }
}

fn make_span(req: &Request<Body>) -> tracing::Span {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let request_id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if matches!(route, "/healthz" | "/readyz") {
        tracing::debug_span!("request", method = %req.method(), route, request_id)
    } else {
        tracing::info_span!("request", method = %req.method(), route, request_id)
    }
}

async fn record_metrics(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().as_str().to_owned();
    let response = next.run(req).await;
    state.metrics.record(
        &route,
        &method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Longest `x-request-id` a client may choose; a longer one (or one with characters outside
/// visible ASCII) is replaced by a generated id rather than echoed.
pub const MAX_REQUEST_ID_LEN: usize = 128;

async fn bound_request_id(mut req: Request, next: Next) -> Response {
    let acceptable = req.headers().get(REQUEST_ID).is_none_or(|v| {
        v.len() <= MAX_REQUEST_ID_LEN && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
    });
    if !acceptable {
        req.headers_mut().remove(REQUEST_ID);
    }
    next.run(req).await
}

/// A path holding an encoded NUL (`%00`) names nothing that can be stored: 422 before any route
/// reads it.
async fn refuse_nul_in_path(req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'0' && w[2] == b'0')
    {
        return ApiError::invalid(
            "path",
            "the path contains an encoded NUL character (%00), which no stored name can hold",
        )
        .into_response();
    }
    next.run(req).await
}

/// Writes every error response as problem+json, with the request id and the path as `instance`.
async fn render_problems(req: Request, next: Next) -> Response {
    let request_id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let mut response = next.run(req).await;
    let status = response.status();
    let problem = match response.extensions_mut().remove::<Problem>() {
        Some(problem) => problem,
        None if status.is_client_error() || status.is_server_error() => {
            if is_problem(&response) {
                return response;
            }
            Problem::new(status, default_detail(status, &method, &path))
        }
        None => return response,
    };
    let mut problem = problem;
    problem.instance = Some(path);
    problem.request_id = request_id;
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    headers.remove(header::CONTENT_LENGTH);
    *response.body_mut() = Body::from(body);
    response
}

fn is_problem(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROBLEM_JSON))
}

fn default_detail(status: StatusCode, method: &Method, path: &str) -> String {
    match status {
        StatusCode::METHOD_NOT_ALLOWED => format!("method {method} is not allowed on {path}"),
        StatusCode::REQUEST_TIMEOUT => "the request took too long and was stopped".into(),
        StatusCode::PAYLOAD_TOO_LARGE => "request body is larger than this route accepts".into(),
        StatusCode::NOT_FOUND => format!("no route {path}"),
        other => other.canonical_reason().unwrap_or("error").to_owned(),
    }
}

async fn not_found(req: Request) -> Response {
    ApiError::not_found(format!("no route {} {}", req.method(), req.uri().path())).into_response()
}

/// Whether `path` may be served without a bearer token.
pub fn is_public(path: &str) -> bool {
    PUBLIC_ROUTES
        .iter()
        .any(|route| match route.strip_suffix("/*") {
            Some(prefix) => path == prefix || path.starts_with(&format!("{prefix}/")),
            None => path == *route,
        })
}

//! Platform routes: who am I, liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Principal, Scope};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(me))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// The caller as the database sees it inside a scoped transaction.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub tenant_id: String,
    pub user_id: String,
    /// Scopes the token grants: `memory:read`, `memory:write`, `admin`.
    pub scopes: Vec<Scope>,
}

/// Who the bearer token speaks for.
///
/// Acts as the caller in the database (role switch and row-level-security settings) and reads
/// the tenant and user back from there, in one statement, so a 200 proves the whole path.
#[utoipa::path(get, path = "/api/me", tag = "platform",
    responses(
        (status = 200, description = "The verified caller", body = Me),
    ),
)]
pub async fn me(State(state): State<AppState>, principal: Principal) -> ApiResult<axum::Json<Me>> {
    let rows = state
        .db
        .read_call(&principal, |tenant, user| {
            sqlx::query_as!(
                CallerRow,
                r#"SELECT tenant_id AS "tenant_id!", user_id AS "user_id!" FROM mnemo_read_me($1, $2)"#,
                tenant,
                user
            )
        })
        .await?;
    let who = rows
        .into_iter()
        .next()
        // The function returns one row on every call.
        .ok_or_else(|| {
            ApiError::status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the database did not say who the caller is",
            )
        })?;
    Ok(axum::Json(Me {
        tenant_id: who.tenant_id,
        user_id: who.user_id,
        scopes: principal.scopes,
    }))
}

struct CallerRow {
    tenant_id: String,
    user_id: String,
}

/// Liveness: the process is up. Never touches the database.
#[utoipa::path(get, path = "/healthz", tag = "platform",
    responses((status = 200, description = "Process is up", body = String, content_type = "text/plain")))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers and every migration this build carries is applied.
#[utoipa::path(get, path = "/readyz", tag = "platform",
    responses(
        (status = 200, description = "Ready to serve", body = String, content_type = "text/plain"),
        (status = 503, description = "Database unreachable or migrations pending", body = crate::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<&'static str> {
    match state.db.migrations_applied().await {
        Ok(true) => match state.db.can_switch_role().await {
            Ok(()) => Ok("ready"),
            Err(err) => {
                tracing::warn!(error = %err, "readiness check: cannot switch to mnemo_app");
                Err(ApiError::unavailable(
                    "the database login cannot switch to the role mnemo_app; \
                     GRANT mnemo_app TO the login role",
                ))
            }
        },
        Ok(false) => Err(ApiError::unavailable(
            "database migrations are pending; run `mnemo migrate`",
        )),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            Err(ApiError::unavailable("the database is unreachable"))
        }
    }
}

/// Prometheus metrics: requests by route template and status, latency histogram, pool usage.
#[utoipa::path(get, path = "/metrics", tag = "platform",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let usage = state.db.usage();
    let mut body = state.metrics.render(usage.size, usage.idle, usage.max);
    if state.embedder.is_some() {
        // Counted now rather than when the indexer last looked, so a client that has just
        // written never reads a stale 0.
        if let Ok(n) = crate::search::indexer::backlog(&state.db).await {
            state
                .indexer
                .backlog
                .store(n, std::sync::atomic::Ordering::Relaxed);
        }
        body.push_str(&state.indexer.render());
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

//! Data rights: a caller takes all of their data out (export), brings it back here or into
//! another account (import), or has it erased; an admin erases a whole tenant.
//!
//! Files: `layout.rs` (the archive's members and manifest), `export.rs` (the streamed export),
//! `import.rs` (the checked, all-or-nothing import), `erase.rs` (deleting a user's or a tenant's
//! rows from every table). The records of each kind live with their domain
//! (`memories::transfer`, `notes::transfer`, `conversations::transfer`); tasks use the per-task
//! bundle of `tasks::workspace`.
//!
//! Tenant erasure: an `admin` token may erase its own tenant only. Tokens speak for one tenant,
//! and no token is a platform operator, so another tenant is answered 404 like anything else
//! outside the caller's reach (whatever the token's scopes), and the caller's own tenant without
//! `admin` is 403.

pub mod erase;
pub mod export;
pub mod import;
pub mod layout;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::{Reader, Writer};
use crate::auth::{Principal, Scope};
use crate::error::{ApiError, ApiResult};
use crate::extract::Query;
use crate::state::AppState;
use erase::{Erased, Reach};
use layout::Counts;

/// Settings of data rights (flattened into [`crate::config::Config`]).
#[derive(Debug, Clone, Args)]
pub struct RightsConfig {
    /// Largest account import body (the `.tar.gz` as sent), in bytes.
    #[arg(
        long = "account-import-max-bytes",
        env = "MNEMO_ACCOUNT_IMPORT_MAX_BYTES",
        default_value_t = 1024 * 1024 * 1024
    )]
    pub account_import_max_bytes: usize,
    /// Largest sum of the member sizes of an account import (unpacked), in bytes.
    #[arg(
        long = "account-import-max-unpacked-bytes",
        env = "MNEMO_ACCOUNT_IMPORT_MAX_UNPACKED_BYTES",
        default_value_t = 4 * 1024 * 1024 * 1024
    )]
    pub account_import_max_unpacked_bytes: usize,
    /// Account exports one server streams at once; more are answered 503 with Retry-After.
    #[arg(
        long = "account-exports-at-once",
        env = "MNEMO_ACCOUNT_EXPORTS_AT_ONCE",
        default_value_t = 2
    )]
    pub account_exports_at_once: usize,
}

impl Default for RightsConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl RightsConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        if self.account_import_max_bytes < 1024 {
            return Err("MNEMO_ACCOUNT_IMPORT_MAX_BYTES must be at least 1024".into());
        }
        if self.account_import_max_unpacked_bytes < 1024 {
            return Err("MNEMO_ACCOUNT_IMPORT_MAX_UNPACKED_BYTES must be at least 1024".into());
        }
        if self.account_exports_at_once == 0 || self.account_exports_at_once > 1000 {
            return Err("MNEMO_ACCOUNT_EXPORTS_AT_ONCE must be between 1 and 1000".into());
        }
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    // The import reads its body itself, against its own caps.
    let streamed = OpenApiRouter::new()
        .routes(routes!(import_account))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(export_account))
        .routes(routes!(erase_account))
        .routes(routes!(erase_tenant))
        .merge(streamed)
}

/// Everything of the caller as one `.tar.gz`, streamed.
///
/// Members, in this order: `mnemo_export/manifest.json` (format `mnemo-account-export`, version
/// 1, `created_at`, tenant and user, counts per kind); per memory `mnemo_export/memories/<id>.json`
/// (its row) and `<id>.txt` (its content); JSON Lines files under `mnemo_export/notes/`,
/// `note_revisions/`, `sessions/`, `messages/` and `session_batches/`; and every task under
/// `task_memory_bank/<task_id>/` in the layout of `GET /api/tasks/{id}/export`. Everything comes
/// from one snapshot of the database. A failure after the download began aborts it (the
/// archive is then unreadable, never silently short).
#[utoipa::path(get, path = "/api/me/export", tag = "data rights",
    responses(
        (status = 200, description = "The archive (Content-Disposition: attachment)", body = Vec<u8>, content_type = "application/gzip"),
        (status = 503, description = "Too many exports are streaming; retry after Retry-After", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export_account(State(state): State<AppState>, caller: Reader) -> ApiResult<Response> {
    let permit = state.exports.clone().try_acquire_owned().map_err(|_| {
        ApiError::unavailable(format!(
            "{} account exports are streaming already (MNEMO_ACCOUNT_EXPORTS_AT_ONCE); retry shortly",
            state.config.rights.account_exports_at_once
        ))
    })?;
    let mut tx = caller.snapshot().await?;
    let manifest = export::manifest(&mut tx, &caller.tenant_id, &caller.user_id).await?;
    let filename = format!(
        "mnemo-export-{}.tar.gz",
        manifest.created_at.format("%Y%m%dT%H%M%SZ")
    );
    let body = Body::from_stream(export::stream(tx, manifest, permit));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/gzip"),
    );
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\""))
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("content-disposition: {e}")))?;
    headers.insert(header::CONTENT_DISPOSITION, disposition);
    Ok(response)
}

/// What an import restored.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AccountImportResult)]
pub struct ImportResult {
    /// What was restored, per kind (equal to the manifest's counts).
    pub imported: Counts,
}

/// Restores an account export into the caller's account. The body is the `.tar.gz` itself.
///
/// All or nothing: one transaction; a refusal stores nothing. Ids and times are kept, so the
/// archive may come from this account (after an erasure) or another one, of this tenant or
/// another. Rules: the members must be exactly those of the export layout, in its order, and the
/// counts must match the manifest; anything that already exists in this account (a memory with
/// the same id or key, notes of the same agent, a session with the same id, a task with the same
/// id) is 409 naming the member. The import must finish within the request timeout.
#[utoipa::path(post, path = "/api/me/import", tag = "data rights",
    request_body(content = Vec<u8>, description = "A .tar.gz from GET /api/me/export", content_type = "application/gzip"),
    responses(
        (status = 201, description = "Restored", body = ImportResult),
        (status = 409, description = "Something in the archive already exists in this account (`member`)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body, the unpacked archive or a member is past a cap (`limit_bytes`)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not an archive of this layout, or an invalid record (`member`, `line`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn import_account(
    State(state): State<AppState>,
    caller: Writer,
    request: Request,
) -> ApiResult<(StatusCode, axum::Json<ImportResult>)> {
    let cap = state.config.rights.account_import_max_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(cap).unwrap_or(u64::MAX)) {
        return Err(ApiError::too_large(format!(
            "the archive is larger than {cap} bytes (MNEMO_ACCOUNT_IMPORT_MAX_BYTES)"
        ))
        .with("limit_bytes", cap));
    }
    let imported = import::run(&state, &caller, request.into_body()).await?;
    Ok((StatusCode::CREATED, axum::Json(ImportResult { imported })))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EraseQuery {
    /// Must be the caller's user id (the `user_id` of `GET /api/me`), spelled exactly.
    pub confirm: Option<String>,
}

/// Hard-deletes everything of the caller, in every table: memories and their chunks, notes and
/// revisions, sessions, messages and batches, tasks with everything under them (plans, events,
/// messages, snapshots, steps, artifacts, waits, configuration), queued embeddings and vectors,
/// and whatever else holds the caller's rows. Answers the rows deleted per table.
#[utoipa::path(delete, path = "/api/me/data", tag = "data rights",
    params(EraseQuery),
    responses(
        (status = 200, description = "Erased", body = Erased),
        (status = 422, description = "`confirm` is missing or is not the caller's user id", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn erase_account(
    State(state): State<AppState>,
    caller: Writer,
    Query(query): Query<EraseQuery>,
) -> ApiResult<axum::Json<Erased>> {
    if query.confirm.as_deref() != Some(caller.user_id.as_str()) {
        return Err(ApiError::invalid(
            "confirm",
            "erasing everything needs `confirm` set to your user id (the `user_id` of GET /api/me)",
        ));
    }
    let mut tx = caller.begin().await?;
    let deleted = erase::erase(&mut tx, Reach::User).await?;
    tx.commit().await?;
    state.forget_erased(&caller.tenant_id, Some(&caller.user_id));
    let total = deleted.values().sum();
    tracing::info!(total, "account erased");
    Ok(axum::Json(Erased {
        tenant_id: caller.tenant_id.clone(),
        user_id: Some(caller.user_id.clone()),
        deleted,
        total,
    }))
}

/// Hard-deletes every row of every user of a tenant. Needs the `admin` scope, and a token of
/// that tenant: another tenant is 404 (it is never visible), the own tenant without `admin` 403.
/// Runs as a role that may only read and delete, limited by its own row-level-security policy to
/// the named tenant.
#[utoipa::path(delete, path = "/api/tenants/{tenant}", tag = "data rights",
    params(("tenant" = String, Path, description = "The tenant id (the caller's own)")),
    responses(
        (status = 200, description = "Erased", body = Erased),
        (status = 403, description = "The caller's own tenant, but the token lacks admin", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not the caller's tenant", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn erase_tenant(
    State(state): State<AppState>,
    principal: Principal,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<Erased>> {
    if tenant != principal.tenant_id {
        return Err(ApiError::not_found(format!("no tenant {tenant:?}")));
    }
    principal.require(Scope::Admin)?;
    let mut tx = state.db.tenant_eraser(&tenant).await?;
    let deleted = erase::erase(&mut tx, Reach::Tenant).await?;
    tx.commit().await?;
    state.forget_erased(&tenant, None);
    let total = deleted.values().sum();
    tracing::info!(total, tenant = %tenant, "tenant erased");
    Ok(axum::Json(Erased {
        tenant_id: tenant,
        user_id: None,
        deleted,
        total,
    }))
}

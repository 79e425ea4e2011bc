//! Export of a task as a bundle in the task_memory_bank layout, and its import.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::artifact_routes::header_value;
use super::model::*;
use super::{export, import, transfer};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;

/// The task as a `.tar.gz` in the `task_memory_bank/<task_id>/` layout: `metadata.json` (the
/// schema, version 1.0), `plan.json` and `plan_vN.json`, `execution.log.jsonl`, `messages.jsonl`,
/// `final_answer.md`, `context_history/NN_<label>.txt` (+ `index.json`), `team.json`,
/// `history.jsonl` (the steps), `artifacts/` (+ `index.json`). The same task always gives the
/// same bytes.
#[utoipa::path(get, path = "/api/tasks/{id}/export", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The archive", body = inline(crate::openapi::Binary), content_type = "application/gzip"),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export_task(caller: Reader, Path(id): Path<Uuid>) -> ApiResult<Response> {
    let mut tx = caller.begin().await?;
    let bundle = transfer::load(&mut tx, id).await?;
    tx.end_read_only();
    let mtime = u64::try_from(bundle.metadata.timestamps.last_updated_at.timestamp()).unwrap_or(0);
    let files = export::render(&bundle)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("export render: {e}")))?;
    let archive = export::archive(&id.to_string(), &files, mtime)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("export archive: {e}")))?;
    let mut response = archive.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/gzip"),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        header_value(&format!("attachment; filename=\"task_{id}.tar.gz\""))?,
    );
    Ok(response)
}

/// Recreates a task from an archive in the export layout, for the caller. The body is the
/// `.tar.gz` itself.
///
/// The archive is read in memory and checked before anything is written: path traversal,
/// absolute paths, links, devices, members past the artifact cap, a total past the import cap,
/// anything outside one `task_memory_bank/<task_id>/`, and invalid contents are 422 naming the
/// member (`member`). A new task id is made unless `keep_id=true`.
#[utoipa::path(post, path = "/api/tasks/import", tag = "tasks",
    params(ImportQuery, Idempotency),
    request_body(content = inline(crate::openapi::Binary), description = "A .tar.gz from GET /api/tasks/{id}/export (or the same layout)", content_type = "application/gzip"),
    responses(
        (status = 201, description = "The new task", body = ImportResult),
        (status = 409, description = "keep_id and the task id is in use", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The archive is larger than the import cap (`limit_bytes`)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Refused archive; `member` names the member at fault", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn import_task(
    State(state): State<AppState>,
    caller: Writer,
    Query(query): Query<ImportQuery>,
    idem: Idempotency,
    request: Request,
) -> ApiResult<Response> {
    let config = &state.config.tasks;
    let body = crate::extract::read_limited(request, config.import_max_bytes, "archive").await?;
    let prepared = import::prepare(config, body, query.keep_id.unwrap_or(false))?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let result = import::store(&mut tx, prepared).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(result)))
        .await
}

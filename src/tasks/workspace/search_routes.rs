//! Search over one task's history or all of the caller's tasks.

use uuid::Uuid;

use super::model::*;
use super::{search, store};
use crate::AppState;
use crate::access::{Caller, Reader};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::pagination;
use axum::extract::State;

fn search_params(body: &SearchRequest) -> ApiResult<(i64, i64)> {
    let query = body.query.trim();
    if query.is_empty() {
        return Err(ApiError::invalid("query", "`query` must not be empty"));
    }
    if query.chars().count() > 1000 {
        return Err(ApiError::invalid(
            "query",
            "`query` is longer than 1000 characters",
        ));
    }
    let limit = pagination::size(body.limit, 20, 100)?;
    let offset = pagination::position::<i64>(body.cursor.as_deref())?.unwrap_or(0);
    if offset < 0 {
        return Err(ApiError::invalid(
            "cursor",
            "`cursor` is not a cursor this search returned",
        ));
    }
    Ok((offset, limit))
}

async fn run_search(
    state: &AppState,
    caller: &Caller,
    task: Option<Uuid>,
    body: &SearchRequest,
) -> ApiResult<SearchPage> {
    let (offset, limit) = search_params(body)?;
    let query = body.query.trim();
    // The query's embedding is made before the transaction opens.
    let (mode, vector) = crate::search::prepare(state, caller, &[], body.mode, query).await?;
    let mut tx = caller.begin().await?;
    if let Some(id) = task {
        store::require_task(&mut tx, id).await?;
    }
    let found =
        search::search(&mut tx, task, query, (offset, limit), mode, vector.as_ref()).await?;
    tx.end_read_only();
    let next = offset + i64::try_from(found.hits.len()).unwrap_or(0);
    Ok(SearchPage {
        mode: found.mode,
        degraded: found.degraded,
        hits: found.hits,
        next_cursor: pagination::next(found.more, Some(next)),
    })
}

/// Search over one task's history (the `memory_search`): messages, execution-log events, step
/// text, tool results and context snapshots, best first, by words, meaning or both (`mode`),
/// each hit saying where it sits (source, seq, step id and part index, tool call id, snapshot
/// label).
#[utoipa::path(post, path = "/api/tasks/{id}/search", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = SearchPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Empty query, bad limit/cursor, or a mode this server cannot run", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_task(
    State(state): State<AppState>,
    caller: Reader,
    Path(id): Path<Uuid>,
    Json(body): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchPage>> {
    Ok(axum::Json(
        run_search(&state, &caller, Some(id), &body).await?,
    ))
}

/// The same search over all of the caller's tasks.
#[utoipa::path(post, path = "/api/tasks/search", tag = "tasks",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = SearchPage),
        (status = 422, description = "Empty query, bad limit/cursor, or a mode this server cannot run", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_all(
    State(state): State<AppState>,
    caller: Reader,
    Json(body): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchPage>> {
    Ok(axum::Json(run_search(&state, &caller, None, &body).await?))
}

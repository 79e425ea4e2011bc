//! The task workspace: structured steps with parts, artifacts, history search, waits,
//! the lifecycle sweeper, and export/import in the `task_memory_bank/<task_id>/` layout.
//!
//! Files: `parts.rs` (the TaskStep part model and its checks), `range.rs` (HTTP byte ranges),
//! `waits.rs` (wait transitions, the resolution and timeout messages, task metadata), `sweeper.rs`
//! (the pause/archive decision and its clock), `sweep_job.rs` (the background sweeper),
//! `timeouts.rs` (the background job ending overdue waits), `bundle.rs`
//! (the file layout), `export.rs` (files and a deterministic `.tar.gz`), `import.rs` (reading an
//! archive safely), `transfer.rs` (a bundle from and into the database), `store.rs` (SQL),
//! `model.rs` (request and response types). Handlers here parse, run one [`Scoped`]
//! transaction, and map the result.

pub mod bundle;
pub mod export;
pub mod import;
pub mod model;
pub mod parts;
pub mod range;
pub mod store;
pub mod sweep_job;
pub mod sweeper;
pub mod timeouts;
pub mod transfer;
pub mod waits;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::access::{Caller, Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;
use crate::tasks::summary;
use model::*;
use parts::Part;
use range::RangeAnswer;
use waits::WaitStatus;

pub fn router() -> OpenApiRouter<AppState> {
    // Uploads and imports read their bodies themselves against the configured caps.
    let streamed = OpenApiRouter::new()
        .routes(routes!(upload_artifact, list_artifacts))
        .routes(routes!(import_task))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(append_step, list_steps))
        .routes(routes!(put_config, get_config))
        .routes(routes!(read_artifact, delete_artifact))
        .routes(routes!(search_task))
        .routes(routes!(search_all))
        .routes(routes!(create_wait, list_waits))
        .routes(routes!(get_wait, resolve_wait))
        .routes(routes!(export_task))
        .merge(streamed)
}

/// Checks the workspace settings of [`crate::tasks::TasksConfig`]; one line naming the wrong one.
pub fn check_config(c: &crate::tasks::TasksConfig) -> Result<(), String> {
    const GIB: usize = 1024 * 1024 * 1024;
    const CENTURY: u64 = 100 * 365 * 24 * 3600;
    // bytea holds at most 1 GiB.
    if c.artifact_max_bytes == 0 || c.artifact_max_bytes >= GIB {
        return Err("MNEMO_TASKS_ARTIFACT_MAX_BYTES must be between 1 and 1 GiB - 1".into());
    }
    if c.import_max_bytes < c.artifact_max_bytes || c.import_max_bytes > 4 * GIB {
        return Err(
            "MNEMO_TASKS_IMPORT_MAX_BYTES must be at least MNEMO_TASKS_ARTIFACT_MAX_BYTES and at most 4 GiB"
                .into(),
        );
    }
    if c.import_max_members == 0 || c.import_max_members > 1_000_000 {
        return Err("MNEMO_TASKS_IMPORT_MAX_MEMBERS must be between 1 and 1000000".into());
    }
    if c.step_max_parts == 0 || c.step_max_parts > 10_000 {
        return Err("MNEMO_TASKS_STEP_MAX_PARTS must be between 1 and 10000".into());
    }
    if c.pause_after_secs == 0 || c.pause_after_secs > CENTURY {
        return Err("MNEMO_TASKS_PAUSE_AFTER_SECS must be between 1 and 100 years".into());
    }
    if c.archive_after_secs == 0 || c.archive_after_secs > CENTURY {
        return Err("MNEMO_TASKS_ARCHIVE_AFTER_SECS must be between 1 and 100 years".into());
    }
    if c.sweep_interval_secs > CENTURY {
        return Err("MNEMO_TASKS_SWEEP_INTERVAL_SECS must be at most 100 years".into());
    }
    if c.wait_sweep_interval_secs > 24 * 3600 {
        return Err("MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS must be at most 86400 (a day)".into());
    }
    if c.stuck_cooldown_secs > 7 * 24 * 3600 {
        return Err("MNEMO_TASKS_STUCK_COOLDOWN_SECS must be at most 604800 (a week)".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Steps

/// True when a retried step matches the stored one (artifact types the client left out are the
/// stored ones).
fn same_step(existing: &Step, agent_name: &str, new_parts: &[Part]) -> bool {
    existing.agent_name == agent_name
        && existing.parts.len() == new_parts.len()
        && existing
            .parts
            .iter()
            .zip(new_parts)
            .all(|(old, new)| match (old, new) {
                (
                    Part::Artifact {
                        artifact_id: a,
                        uri: ua,
                        mime_type: ma,
                    },
                    Part::Artifact {
                        artifact_id: b,
                        uri: ub,
                        mime_type: mb,
                    },
                ) => a == b && ua == ub && (mb.is_empty() || ma == mb),
                _ => old == new,
            })
}

/// Appends a step (the TaskStep) to the task's history.
///
/// Parts are `type`-tagged: `text`, `tool_call`, `tool_result` (must answer a `tool_call` of this
/// task, in this step or an earlier one, else 422), `artifact` (must name an artifact of this
/// task; `uri` and `mime_type` are filled in). Sending a step with an existing `step_id` again is
/// a no-op answered 200 when it is the same step, 409 otherwise.
#[utoipa::path(post, path = "/api/tasks/{id}/steps", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewStep,
    responses(
        (status = 201, description = "The stored step", body = Step),
        (status = 200, description = "The same step was already stored", body = Step),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another step has this step_id", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid part (`field` is its path, e.g. `parts[2].tool_call_id`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn append_step(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewStep>,
) -> ApiResult<Response> {
    parts::check_name("agent_name", &body.agent_name)?;
    let step_id = match &body.step_id {
        Some(step_id) => {
            parts::check_step_id(step_id)?;
            step_id.clone()
        }
        None => parts::new_step_id(),
    };
    let mut new_parts = body.parts;
    let refs = parts::check_parts(id, &mut new_parts, state.config.tasks.step_max_parts)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    store::touch_task(&mut tx, id).await?;
    if body.step_id.is_some()
        && let Some(existing) = store::step_by_id(&mut tx, id, &step_id).await?
    {
        if !same_step(&existing, &body.agent_name, &new_parts) {
            return Err(ApiError::conflict(format!(
                "step {step_id} already exists with other content"
            ))
            .with("field", "step_id"));
        }
        return idem
            .commit(tx, (StatusCode::OK, axum::Json(existing)))
            .await;
    }
    store::confirm_refs(&mut tx, id, &mut new_parts, &refs).await?;
    let mut stored = store::insert_steps(
        &mut tx,
        id,
        &[store::StepWrite {
            step_id,
            agent_name: body.agent_name,
            parts: new_parts,
            created_at: None,
        }],
    )
    .await?;
    let step = stored
        .pop()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("step insert returned no row")))?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(step)))
        .await
}

/// The task's steps in order, a page at a time, or the last `recent` steps (the "recent N
/// steps" context compilation).
#[utoipa::path(get, path = "/api/tasks/{id}/steps", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), StepQuery),
    responses(
        (status = 200, description = "A page of steps, oldest first", body = StepPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_steps(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<StepQuery>,
) -> ApiResult<axum::Json<StepPage>> {
    if let Some(recent) = query.recent {
        if query.cursor.is_some() {
            return Err(ApiError::invalid(
                "recent",
                "`recent` and `cursor` cannot be combined",
            ));
        }
        if !(1..=500).contains(&recent) {
            return Err(ApiError::invalid(
                "recent",
                "`recent` must be between 1 and 500",
            ));
        }
        let mut tx = caller.begin().await?;
        store::require_task(&mut tx, id).await?;
        let items = store::recent_steps(&mut tx, id, recent).await?;
        tx.end_read_only();
        return Ok(axum::Json(StepPage {
            items,
            next_cursor: None,
        }));
    }
    let limit = pagination::size(query.limit, 50, 500)?;
    let after = pagination::position::<i32>(query.cursor.as_deref())?.unwrap_or(0);
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (items, more) = store::steps_after(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let position = items.last().map(|s| s.seq);
    Ok(axum::Json(StepPage {
        items,
        next_cursor: pagination::next(more, position),
    }))
}

// ---------------------------------------------------------------------------------------------
// Configuration snapshot

/// Stores the task's configuration snapshot (the `team.json`), once.
///
/// 201 the first time; the same snapshot again is 200; a different one is 409.
#[utoipa::path(put, path = "/api/tasks/{id}/config", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body(content = Object, description = "Any JSON object: the team, agents, models, tools the task started with"),
    responses(
        (status = 201, description = "Stored", body = TaskConfigSnapshot),
        (status = 200, description = "The same snapshot was already stored", body = TaskConfigSnapshot),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A different snapshot is already stored", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a JSON object", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_config(
    caller: Writer,
    Path(id): Path<Uuid>,
    Json(body): Json<Value>,
) -> ApiResult<(StatusCode, axum::Json<TaskConfigSnapshot>)> {
    if !body.is_object() {
        return Err(ApiError::invalid(
            "",
            "the configuration snapshot must be a JSON object",
        ));
    }
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (snapshot, created) = store::put_config(&mut tx, id, &body, None).await?;
    if created {
        store::touch_task(&mut tx, id).await?;
    }
    tx.commit().await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(snapshot)))
}

/// The task's configuration snapshot.
#[utoipa::path(get, path = "/api/tasks/{id}/config", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    responses(
        (status = 200, description = "The snapshot", body = TaskConfigSnapshot),
        (status = 404, description = "No such task, or no snapshot stored", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_config(
    caller: Reader,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<TaskConfigSnapshot>> {
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let snapshot = store::get_config(&mut tx, id).await?;
    tx.end_read_only();
    snapshot
        .map(axum::Json)
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no configuration snapshot")))
}

// ---------------------------------------------------------------------------------------------
// Artifacts

/// A `type/subtype` media type with its parameters, or 422.
fn media_type(value: &str) -> ApiResult<String> {
    let essence = value.split(';').next().unwrap_or("").trim();
    let valid = essence.split_once('/').is_some_and(|(t, s)| {
        let token = |x: &str| {
            !x.is_empty()
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        token(t) && token(s)
    });
    if !valid || value.len() > 255 || value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "content-type",
            format!("{value:?} is not a media type"),
        ));
    }
    Ok(value.trim().to_string())
}

/// Stores an artifact: the raw body with its `Content-Type`, or the `file` field of a
/// `multipart/form-data` body (its file name and type are kept).
///
/// The size cap is `MNEMO_TASKS_ARTIFACT_MAX_BYTES` (default 64 MiB; 413 past it). The answer
/// carries the `mnemo://` URI an `artifact` part uses.
#[utoipa::path(post, path = "/api/tasks/{id}/artifacts", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), UploadQuery, Idempotency),
    request_body(content = inline(crate::openapi::Binary), description = "The bytes (any Content-Type), or multipart/form-data with a `file` field", content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored", body = Artifact),
        (status = 400, description = "Unreadable body or multipart form", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than the artifact cap (`limit_bytes`)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad media type, name, or no `file` field", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn upload_artifact(
    State(state): State<AppState>,
    caller: Writer,
    Path(id): Path<Uuid>,
    Query(query): Query<UploadQuery>,
    idem: Idempotency,
    request: Request,
) -> ApiResult<Response> {
    let cap = state.config.tasks.artifact_max_bytes;
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_string());
    let is_multipart = content_type.as_deref().is_some_and(|c| {
        c.trim()
            .to_ascii_lowercase()
            .starts_with("multipart/form-data")
    });
    let (bytes, mime, name) = if is_multipart {
        read_multipart(request, &state, cap).await?
    } else {
        let mime = media_type(
            content_type
                .as_deref()
                .unwrap_or("application/octet-stream"),
        )?;
        let bytes = crate::extract::read_limited(request, cap, "artifact").await?;
        (bytes.to_vec(), mime, None)
    };
    let name = query.name.or(name);
    if let Some(name) = &name {
        parts::check_name("name", name)?;
    }
    let sha = import::sha256_hex(&bytes);
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    store::touch_task(&mut tx, id).await?;
    let artifact = store::insert_artifact(
        &mut tx,
        id,
        &store::ArtifactWrite {
            id: Uuid::now_v7(),
            name: name.as_deref(),
            mime_type: &mime,
            sha256: &sha,
            content: &bytes,
            created_at: None,
        },
    )
    .await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(artifact)))
        .await
}

async fn read_multipart(
    request: Request,
    state: &AppState,
    cap: usize,
) -> ApiResult<(Vec<u8>, String, Option<String>)> {
    // The form around the file may add a little; the file itself is held to `cap` below.
    let (parts, body) = request.into_parts();
    let limited = Body::new(http_body_util::Limited::new(
        body,
        cap.saturating_add(64 * 1024),
    ));
    let mut form =
        axum::extract::Multipart::from_request(Request::from_parts(parts, limited), state)
            .await
            .map_err(|e| ApiError::bad_request(format!("not a multipart form: {e}")))?;
    let too_large = || {
        ApiError::too_large(format!("the artifact is larger than {cap} bytes"))
            .with("limit_bytes", cap)
    };
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(too_large()),
            Err(e) => return Err(ApiError::bad_request(format!("bad multipart form: {e}"))),
        };
        if field.name() != Some("file") {
            continue;
        }
        let mime = media_type(field.content_type().unwrap_or("application/octet-stream"))?;
        let name = field.file_name().map(str::to_owned);
        let mut field = field;
        let mut bytes = Vec::new();
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > cap {
                        return Err(too_large());
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(too_large()),
                Err(e) => return Err(ApiError::bad_request(format!("bad multipart form: {e}"))),
            }
        }
        return Ok((bytes, mime, name));
    }
    Err(ApiError::invalid(
        "file",
        "the multipart form has no `file` field",
    ))
}

/// The task's artifacts (descriptions, not bytes), oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/artifacts", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), PageQuery),
    responses(
        (status = 200, description = "A page of artifacts", body = ArtifactPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_artifacts(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<ArtifactPage>> {
    let limit = pagination::size(query.limit, 50, 200)?;
    let after = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (items, more) = store::artifacts_after(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let position = items.last().map(|a| a.artifact_id);
    Ok(axum::Json(ArtifactPage {
        items,
        next_cursor: pagination::next(more, position),
    }))
}

fn header_value(text: &str) -> ApiResult<HeaderValue> {
    HeaderValue::from_str(text).map_err(|e| ApiError::Internal(anyhow::anyhow!("header: {e}")))
}

/// Reads an artifact (the `artifact_read`).
///
/// Answers with its `Content-Type`, an `ETag` (its sha256) and `Accept-Ranges: bytes`. A single
/// `Range: bytes=...` (from-to, from-, or -suffix) is answered 206 with `Content-Range`; a range
/// past the end is 416. `If-None-Match` with the ETag is 304; `If-Range` with another ETag
/// serves the whole artifact.
#[utoipa::path(get, path = "/api/tasks/{id}/artifacts/{artifact_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("artifact_id" = Uuid, Path, description = "Artifact id"),
        ("Range" = Option<String>, Header, description = "bytes=from-to, bytes=from-, or bytes=-suffix"),
    ),
    responses(
        (status = 200, description = "The artifact", body = inline(crate::openapi::Binary), content_type = "application/octet-stream"),
        (status = 206, description = "The requested range", body = inline(crate::openapi::Binary), content_type = "application/octet-stream"),
        (status = 304, description = "Not modified (If-None-Match)"),
        (status = 404, description = "No such task or artifact for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 416, description = "Range not satisfiable", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn read_artifact(
    caller: Reader,
    Path((id, artifact_id)): Path<(Uuid, Uuid)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let mut tx = caller.begin().await?;
    let artifact = store::artifact(&mut tx, id, artifact_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no artifact {artifact_id}")))?;
    let etag = format!("\"{}\"", artifact.sha256);
    let len = u64::try_from(artifact.size).unwrap_or(0);
    let header_text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if header_text(header::IF_NONE_MATCH)
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        tx.end_read_only();
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        response
            .headers_mut()
            .insert(header::ETAG, header_value(&etag)?);
        return Ok(response);
    }
    let range_header = header_text(header::RANGE)
        .filter(|_| header_text(header::IF_RANGE).is_none_or(|v| v.trim() == etag));
    let answer = range::answer(range_header.as_deref(), len);
    let (status, start, count) = match answer {
        RangeAnswer::Full => (StatusCode::OK, 0, len),
        RangeAnswer::Partial { start, end } => {
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        RangeAnswer::Unsatisfiable => {
            tx.end_read_only();
            let mut response = ApiError::status(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("the range is outside the artifact's {len} bytes"),
            )
            .with("size", len)
            .into_response();
            if let Some(value) = answer.content_range(len) {
                response
                    .headers_mut()
                    .insert(header::CONTENT_RANGE, header_value(&value)?);
            }
            return Ok(response);
        }
    };
    let bytes = store::artifact_bytes(
        &mut tx,
        id,
        artifact_id,
        i64::try_from(start).unwrap_or(i64::MAX),
        i64::try_from(count).unwrap_or(i64::MAX),
    )
    .await?;
    tx.end_read_only();
    let mut response = (status, bytes).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, header_value(&artifact.mime_type)?);
    // The type is the uploader's word: browsers must not sniff another, and types a browser
    // would run (HTML, SVG, XML, scripts) are downloaded rather than rendered on this origin.
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if is_active_type(&artifact.mime_type) {
        h.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment"),
        );
    }
    h.insert(header::ETAG, header_value(&etag)?);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(value) = answer.content_range(len) {
        h.insert(header::CONTENT_RANGE, header_value(&value)?);
    }
    Ok(response)
}

/// Whether a browser would render or run content of `mime` (so it must be served as a download).
fn is_active_type(mime: &str) -> bool {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/html")
        || essence.contains("xml")
        || essence.contains("javascript")
        || essence.contains("ecmascript")
        || essence == "image/svg+xml"
        || essence == "application/pdf"
        || essence == "text/css"
        || !essence.contains('/')
}

/// Deletes an artifact no step refers to (the history is immutable: 409 names the step that
/// does).
#[utoipa::path(delete, path = "/api/tasks/{id}/artifacts/{artifact_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("artifact_id" = Uuid, Path, description = "Artifact id"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such task or artifact for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A step refers to it (`step_id`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete_artifact(
    caller: Writer,
    Path((id, artifact_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<StatusCode> {
    let mut tx = caller.begin().await?;
    store::touch_task(&mut tx, id).await?;
    if let Some(step_id) = store::artifact_referrer(&mut tx, id, artifact_id).await? {
        return Err(ApiError::conflict(format!(
            "step {step_id} refers to artifact {artifact_id}; the history cannot lose it"
        ))
        .with("step_id", step_id));
    }
    if !store::delete_artifact(&mut tx, id, artifact_id).await? {
        return Err(ApiError::not_found(format!(
            "task {id} has no artifact {artifact_id}"
        )));
    }
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------
// Search

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
    caller: &Caller,
    task: Option<Uuid>,
    body: &SearchRequest,
) -> ApiResult<SearchPage> {
    let (offset, limit) = search_params(body)?;
    let mut tx = caller.begin().await?;
    if let Some(id) = task {
        store::require_task(&mut tx, id).await?;
    }
    let (hits, more) = store::search(&mut tx, task, body.query.trim(), offset, limit).await?;
    tx.end_read_only();
    let next = offset + i64::try_from(hits.len()).unwrap_or(0);
    Ok(SearchPage {
        hits,
        next_cursor: pagination::next(more, Some(next)),
    })
}

/// Full-text search over one task's history (the `memory_search`): messages, execution-log
/// events, step text, tool results and context snapshots, best first, each hit saying where it
/// sits (source, seq, step id and part index, tool call id, snapshot label).
#[utoipa::path(post, path = "/api/tasks/{id}/search", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = SearchPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Empty query or bad limit/cursor", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_task(
    caller: Reader,
    Path(id): Path<Uuid>,
    Json(body): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchPage>> {
    Ok(axum::Json(run_search(&caller, Some(id), &body).await?))
}

/// The same search over all of the caller's tasks.
#[utoipa::path(post, path = "/api/tasks/search", tag = "tasks",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Hits, best first", body = SearchPage),
        (status = 422, description = "Empty query or bad limit/cursor", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn search_all(
    caller: Reader,
    Json(body): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchPage>> {
    Ok(axum::Json(run_search(&caller, None, &body).await?))
}

// ---------------------------------------------------------------------------------------------
// Waits

/// Records a smart-wait job linked to the task, status `watching`; the task metadata's
/// `active_wait_ids`, `last_wait_state` and `last_wait_event_at` follow.
#[utoipa::path(post, path = "/api/tasks/{id}/waits", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), Idempotency),
    request_body = NewWait,
    responses(
        (status = 201, description = "The wait", body = Wait),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create_wait(
    caller: Writer,
    Path(id): Path<Uuid>,
    idem: Idempotency,
    Json(body): Json<NewWait>,
) -> ApiResult<Response> {
    waits::check_new_wait(
        body.target_type.trim(),
        body.target_id.trim(),
        &body.criteria,
        body.timeout_seconds,
        body.poll_interval,
    )?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let mut metadata = store::lock_metadata(&mut tx, id).await?;
    let wait = store::insert_wait(&mut tx, id, Uuid::now_v7(), &body).await?;
    waits::record_in_metadata(
        &mut metadata,
        &wait.wait_id.to_string(),
        WaitStatus::Watching,
        wait.created_at,
    );
    store::save_metadata(&mut tx, id, metadata).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(wait)))
        .await
}

/// The task's waits, oldest first.
#[utoipa::path(get, path = "/api/tasks/{id}/waits", tag = "tasks",
    params(("id" = Uuid, Path, description = "Task id"), PageQuery),
    responses(
        (status = 200, description = "A page of waits", body = WaitPage),
        (status = 404, description = "No such task for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_waits(
    caller: Reader,
    Path(id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> ApiResult<axum::Json<WaitPage>> {
    let limit = pagination::size(query.limit, 50, 200)?;
    let after = pagination::position::<Uuid>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    store::require_task(&mut tx, id).await?;
    let (items, more) = store::waits_after(&mut tx, id, after, limit).await?;
    tx.end_read_only();
    let position = items.last().map(|w| w.wait_id);
    Ok(axum::Json(WaitPage {
        items,
        next_cursor: pagination::next(more, position),
    }))
}

/// One wait.
#[utoipa::path(get, path = "/api/tasks/{id}/waits/{wait_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("wait_id" = Uuid, Path, description = "Wait id"),
    ),
    responses(
        (status = 200, description = "The wait", body = Wait),
        (status = 404, description = "No such task or wait for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_wait(
    caller: Reader,
    Path((id, wait_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<axum::Json<Wait>> {
    let mut tx = caller.begin().await?;
    let wait = store::wait(&mut tx, id, wait_id).await?;
    tx.end_read_only();
    wait.map(axum::Json)
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no wait {wait_id}")))
}

/// Ends a wait: `resolved`, `timeout`, `cancelled` or `error`, once (409 after, also for a wait
/// whose `timeout_seconds` ran out: the wait-timeout job ended it as `timeout`). Posts
/// `[Wait resolved] <criteria> → <result>` to the task's messages (role system, type wait) and
/// updates `active_wait_ids`, `last_wait_state`, `last_wait_event_at` in the task metadata.
#[utoipa::path(patch, path = "/api/tasks/{id}/waits/{wait_id}", tag = "tasks",
    params(
        ("id" = Uuid, Path, description = "Task id"),
        ("wait_id" = Uuid, Path, description = "Wait id"),
    ),
    request_body = ResolveWait,
    responses(
        (status = 200, description = "The ended wait, with the seq of the message posted", body = Wait),
        (status = 404, description = "No such task or wait for this caller", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The wait already ended (`current_status`; `timed_out_at` when it timed out)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn resolve_wait(
    State(state): State<AppState>,
    caller: Writer,
    Path((id, wait_id)): Path<(Uuid, Uuid)>,
    Json(body): Json<ResolveWait>,
) -> ApiResult<axum::Json<Wait>> {
    if body
        .result_message
        .as_ref()
        .is_some_and(|m| m.chars().count() > 10_000)
    {
        return Err(ApiError::invalid(
            "result_message",
            "`result_message` is longer than 10000 characters",
        ));
    }
    let mut tx = caller.begin().await?;
    let metadata = store::lock_metadata(&mut tx, id).await?;
    let wait = store::lock_wait(&mut tx, id, wait_id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {id} has no wait {wait_id}")))?;
    if wait.status == WaitStatus::Timeout {
        return Err(timed_out(&wait, body.status));
    }
    waits::transition(wait.status, body.status)?;
    let result = body
        .result_message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty());
    let note = waits::resolution_message(&wait.criteria, body.status, result);
    let ended =
        store::finish_wait(&mut tx, id, wait_id, metadata, body.status, result, &note).await?;
    tx.commit().await?;
    summary::schedule(
        &state,
        &caller,
        id,
        ended.message_count,
        ended.summary_covers,
    );
    Ok(axum::Json(ended.wait))
}

/// 409 for a wait that already timed out: when, and after how long.
fn timed_out(wait: &Wait, wanted: WaitStatus) -> ApiError {
    // The form the wait's own `resolved_at` is shown in.
    let at = wait
        .resolved_at
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true));
    let when = at
        .as_deref()
        .map(|at| format!(" at {at}"))
        .unwrap_or_default();
    let how = wait
        .result_message
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    ApiError::conflict(format!(
        "the wait timed out{when}{how}; it cannot change to {}",
        wanted.as_str()
    ))
    .with("current_status", WaitStatus::Timeout.as_str())
    .with("timed_out_at", at)
    .with("allowed", Vec::<String>::new())
}

// ---------------------------------------------------------------------------------------------
// Export and import

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
    let limits = import::Limits {
        max_member_bytes: u64::try_from(config.artifact_max_bytes).unwrap_or(u64::MAX),
        max_total_bytes: u64::try_from(config.import_max_bytes).unwrap_or(u64::MAX),
        max_members: config.import_max_members,
    };
    let (task_dir, files) = import::unpack(&body, &limits)?;
    drop(body);
    let bundle = import::parse(&task_dir, &files)?;
    drop(files);
    let source_task_id = bundle.metadata.parent_task_id.clone();
    let new_id = if query.keep_id.unwrap_or(false) {
        Uuid::parse_str(&source_task_id).map_err(|_| {
            ApiError::invalid(
                "keep_id",
                format!("the archive's task id {source_task_id:?} is not a UUID; import it without keep_id"),
            )
        })?
    } else {
        Uuid::now_v7()
    };
    let result = ImportResult {
        task_id: new_id,
        source_task_id,
        plan_versions: bundle.plans.len(),
        events: bundle.events.len(),
        messages: bundle.messages.len(),
        snapshots: bundle.snapshots.len(),
        steps: bundle.steps.len(),
        artifacts: bundle.artifacts.len(),
    };
    let caps = transfer::ImportCaps {
        max_plan_steps: config.max_plan_steps,
        max_parts: config.step_max_parts,
    };
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    transfer::store(&mut tx, &task_dir, bundle, new_id, caps).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(result)))
        .await
}

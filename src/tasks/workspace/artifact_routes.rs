//! Routes of a task's artifacts: upload (raw or multipart), list, read (with `Range`), delete.

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::model::*;
use super::range::RangeAnswer;
use super::{artifacts, store};
use crate::access::{Reader, Writer};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::pagination;
use crate::state::AppState;

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
    caller: Writer,
    Path(id): Path<Uuid>,
    Query(query): Query<UploadQuery>,
    idem: Idempotency,
    ArtifactBody(upload): ArtifactBody,
) -> ApiResult<Response> {
    let upload = upload.named(query.name)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let artifact = artifacts::store(&mut tx, id, &upload).await?;
    idem.commit(tx, (StatusCode::CREATED, axum::Json(artifact)))
        .await
}

/// An upload's bytes, media type and file name: the raw body with its `Content-Type`, or the
/// `file` field of a `multipart/form-data` body, held to `MNEMO_TASKS_ARTIFACT_MAX_BYTES`.
pub struct ArtifactBody(artifacts::Upload);

impl FromRequest<AppState> for ArtifactBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> ApiResult<Self> {
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
        if is_multipart {
            return read_multipart(request, state, cap).await.map(ArtifactBody);
        }
        let mime_type = media_type(
            content_type
                .as_deref()
                .unwrap_or("application/octet-stream"),
        )?;
        let bytes = crate::extract::read_limited(request, cap, "artifact").await?;
        Ok(ArtifactBody(artifacts::Upload {
            bytes: bytes.to_vec(),
            mime_type,
            name: None,
        }))
    }
}

async fn read_multipart(
    request: Request,
    state: &AppState,
    cap: usize,
) -> ApiResult<artifacts::Upload> {
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
        return Ok(artifacts::Upload {
            bytes,
            mime_type: mime,
            name,
        });
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

pub(super) fn header_value(text: &str) -> ApiResult<HeaderValue> {
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
    let text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let conditions = artifacts::Conditions {
        if_none_match: text(header::IF_NONE_MATCH),
        range: text(header::RANGE),
        if_range: text(header::IF_RANGE),
    };
    let mut tx = caller.begin().await?;
    let read = artifacts::read(&mut tx, id, artifact_id, &conditions).await?;
    tx.end_read_only();
    read_response(read)
}

/// The response to a read: 304 with the ETag, 416 with `Content-Range: bytes */size`, or the
/// bytes (200 or 206) with their type, ETag, `Accept-Ranges` and `Content-Range`.
fn read_response(read: artifacts::Read) -> ApiResult<Response> {
    let (artifact, etag, answer, bytes) = match read {
        artifacts::Read::NotModified { etag } => {
            let mut response = StatusCode::NOT_MODIFIED.into_response();
            response
                .headers_mut()
                .insert(header::ETAG, header_value(&etag)?);
            return Ok(response);
        }
        artifacts::Read::Unsatisfiable { answer, size } => {
            let mut response = ApiError::status(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("the range is outside the artifact's {size} bytes"),
            )
            .with("size", size)
            .into_response();
            if let Some(value) = answer.content_range(size) {
                response
                    .headers_mut()
                    .insert(header::CONTENT_RANGE, header_value(&value)?);
            }
            return Ok(response);
        }
        artifacts::Read::Bytes {
            artifact,
            etag,
            answer,
            bytes,
        } => (artifact, etag, answer, bytes),
    };
    let status = match answer {
        RangeAnswer::Partial { .. } => StatusCode::PARTIAL_CONTENT,
        _ => StatusCode::OK,
    };
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
    let size = u64::try_from(artifact.size).unwrap_or(0);
    if let Some(value) = answer.content_range(size) {
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
    artifacts::delete(&mut tx, id, artifact_id).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

//! Long-term notes: per-user, per-agent Markdown notes with section edits, optimistic concurrency and
//! revisions.
//!
//! Handlers here are thin: they check scopes, parse `If-Match`, open a [`Scoped`](crate::db::Scoped) transaction and
//! call [`store`], whose functions are also what the chat endpoint calls as the
//! `manage_long_term_memory` tool. Section semantics are documented in [`sections`].

pub mod cache;
pub mod model;
pub mod operations;
pub mod sections;
pub mod store;
pub mod transfer;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::{Caller, Reader, Writer};
use crate::auth::{Principal, Scope};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::idempotency::{Begun, Idempotency};
use crate::state::AppState;
use model::{
    Notes, NotesOperationRequest, NotesOperationResponse, Operation, PutNotes, Revision,
    RevisionListQuery, RevisionPage,
};

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args)]
pub struct NotesConfig {
    /// Largest notes document per user and agent, in bytes (UTF-8). A write that would grow the
    /// notes past it is refused with 422.
    #[arg(
        long = "notes-max-bytes",
        env = "MNEMO_NOTES_MAX_BYTES",
        default_value_t = 64 * 1024
    )]
    pub max_bytes: usize,

    /// Revisions kept per user and agent; older ones are dropped on write.
    #[arg(
        long = "notes-revisions-kept",
        env = "MNEMO_NOTES_REVISIONS_KEPT",
        default_value_t = 100
    )]
    pub revisions_kept: u32,

    /// Bytes of notes answers a replica holds in memory (least recently read out first; 0
    /// holds none). A held answer is still checked against the database on every read, which
    /// then sends the text only when it changed.
    #[arg(
        long = "notes-cache-bytes",
        env = "MNEMO_NOTES_CACHE_BYTES",
        default_value_t = 64 * 1024 * 1024
    )]
    pub cache_bytes: usize,
}

impl Default for NotesConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

/// Upper bound of `MNEMO_NOTES_MAX_BYTES`: notes travel whole in every response and prompt.
const MAX_NOTES_CAP: usize = 16 * 1024 * 1024;

impl NotesConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_bytes == 0 || self.max_bytes > MAX_NOTES_CAP {
            return Err(format!(
                "MNEMO_NOTES_MAX_BYTES must be between 1 and {MAX_NOTES_CAP}"
            ));
        }
        if self.revisions_kept == 0 {
            return Err("MNEMO_NOTES_REVISIONS_KEPT must be at least 1".into());
        }
        Ok(())
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_notes, put_notes, delete_notes))
        .routes(routes!(notes_operation))
        .routes(routes!(list_revisions))
        .routes(routes!(get_revision))
        .routes(routes!(restore_revision))
}

/// Parses `If-Match`: absent or `*` is no precondition; otherwise one version, quoted or not
/// (`"3"`, `W/"3"`, `3`).
fn if_match(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    parse_etag(text).map(Some).ok_or_else(|| {
        ApiError::invalid(
            "If-Match",
            "`If-Match` must be one notes version as returned in `ETag` (for example `\"3\"`)",
        )
    })
}

fn parse_etag(text: &str) -> Option<i64> {
    let text = text.trim();
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<i64>().ok().filter(|v| *v >= 0)
}

/// Whether `If-None-Match` names `version` (or `*`): the caller's copy is current.
fn none_match(headers: &HeaderMap, version: i64) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|tag| tag.trim() == "*" || parse_etag(tag) == Some(version))
        })
}

fn etag(version: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag<T: serde::Serialize>(version: i64, body: T) -> Response {
    ([(header::ETAG, etag(version))], axum::Json(body)).into_response()
}

/// Runs one operation in its own scoped transaction, honouring `idem`.
async fn run(
    state: &AppState,
    principal: Principal,
    agent_name: &str,
    request: NotesOperationRequest,
    headers: &HeaderMap,
    idem: &Idempotency,
) -> ApiResult<Response> {
    let scope = if request.operation == Operation::Read {
        Scope::Read
    } else {
        Scope::Write
    };
    let caller = Caller::new(state.db.clone(), principal, scope)?;
    operations::validate_agent_name(agent_name)?;
    let expected = if request.operation == Operation::Read {
        None
    } else {
        if_match(headers)?
    };
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let response =
        store::run_operation(&mut tx, agent_name, request, expected, &state.config.notes).await?;
    idem.commit(tx, with_etag(response.version, response)).await
}

/// Read the notes of one agent.
///
/// Never-written notes are empty with version 0 (not 404). The `ETag` is the version in quotes;
/// `If-None-Match` with the current ETag answers 304.
#[utoipa::path(get, path = "/api/agents/{agent_name}/notes", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("If-None-Match" = Option<String>, Header, description = "An ETag from an earlier read; 304 when unchanged", nullable = false),
    ),
    responses(
        (status = 200, description = "The notes", body = Notes,
            headers(("ETag" = String, description = "The version in quotes: `\"7\"`"))),
        (status = 304, description = "Unchanged since the ETag in `If-None-Match`"),
        (status = 422, description = "Invalid `agent_name` (`field`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_notes(
    State(state): State<AppState>,
    caller: Reader,
    Path(agent_name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    operations::validate_agent_name(&agent_name)?;
    let principal = caller.principal();
    let (tenant, user) = (principal.tenant_id.as_str(), principal.user_id.as_str());
    let cache = &state.notes_cache;
    let held = cache.get(tenant, user, &agent_name);
    let was_held = held.is_some();
    let (version, body) = match store::read_notes_in_one_call(&caller, &agent_name, held).await? {
        store::NotesRead::Held(held) => (held.version, held.body),
        store::NotesRead::Fresh(current, row) => {
            let version = current.version;
            let body = notes_body(agent_name.clone(), current)?;
            match row.filter(|_| version > 0) {
                Some(row) => {
                    let held = cache::Held {
                        version,
                        row,
                        body: body.clone(),
                    };
                    cache.put(tenant, user, &agent_name, held);
                }
                // Never written: nothing to hold, and what was held is gone.
                None if was_held => cache.remove(tenant, user, &agent_name),
                None => {}
            }
            (version, body)
        }
    };
    if none_match(&headers, version) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag(version))]).into_response());
    }
    Ok((
        [
            (header::ETAG, etag(version)),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
        ],
        body,
    )
        .into_response())
}

/// The notes route's JSON body, written into a buffer sized for it up front (the text is most of
/// it; growing the buffer by doubling copied a 64 KiB text several times over).
fn notes_body(agent_name: String, current: store::StoredNotes) -> ApiResult<bytes::Bytes> {
    let mut out = Vec::with_capacity(current.notes.len() + current.notes.len() / 8 + 256);
    serde_json::to_writer(
        &mut out,
        &Notes {
            agent_name,
            size_bytes: current.notes.len(),
            notes: current.notes,
            version: current.version,
            created_at: current.created_at,
            updated_at: current.updated_at,
        },
    )
    .map_err(|e| {
        ApiError::status(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("notes body: {e}"),
        )
    })?;
    Ok(out.into())
}

/// Replace the whole notes (the REST form of `overwrite`).
///
/// `If-Match` (optional) must name the current version (`"0"` for never-written notes), else 412
/// with `current_version`. A body growing the notes past the cap is 422 with `current_bytes`,
/// `attempted_bytes` and `max_bytes`; nothing is written.
#[utoipa::path(put, path = "/api/agents/{agent_name}/notes", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("If-Match" = Option<String>, Header, description = "The version the change is based on (the ETag); 412 when stale", nullable = false, pattern = r#"^(\*|(W/)?("[0-9]{1,18}"|[0-9]{1,18}))$"#),
    ),
    request_body = PutNotes,
    responses(
        (status = 200, description = "Written; the new version", body = NotesOperationResponse,
            headers(("ETag" = String, description = "The new version in quotes"))),
        (status = 412, description = "`If-Match` is stale; `current_version` says the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the route's limit", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field (`field`), or notes over the size cap", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn put_notes(
    State(state): State<AppState>,
    principal: Principal,
    Path(agent_name): Path<String>,
    headers: HeaderMap,
    Json(body): Json<PutNotes>,
) -> ApiResult<Response> {
    let request = NotesOperationRequest {
        operation: Operation::Overwrite,
        content: Some(body.notes),
        ..Default::default()
    };
    run(
        &state,
        principal,
        &agent_name,
        request,
        &headers,
        &Idempotency::none(),
    )
    .await
}

/// Clear the notes (the REST form of `delete_all_notes`).
///
/// The version goes up by one and the old text stays in the revisions. `If-Match` as for PUT.
#[utoipa::path(delete, path = "/api/agents/{agent_name}/notes", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("If-Match" = Option<String>, Header, description = "The version the change is based on (the ETag); 412 when stale", nullable = false, pattern = r#"^(\*|(W/)?("[0-9]{1,18}"|[0-9]{1,18}))$"#),
    ),
    responses(
        (status = 200, description = "Cleared; the new version", body = NotesOperationResponse,
            headers(("ETag" = String, description = "The new version in quotes"))),
        (status = 412, description = "`If-Match` is stale; `current_version` says the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid `agent_name` or `If-Match` (`field`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete_notes(
    State(state): State<AppState>,
    principal: Principal,
    Path(agent_name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let request = NotesOperationRequest {
        operation: Operation::DeleteAllNotes,
        ..Default::default()
    };
    run(
        &state,
        principal,
        &agent_name,
        request,
        &headers,
        &Idempotency::none(),
    )
    .await
}

/// Run one `manage_long_term_memory` operation (the agent tool).
///
/// `operation` is `read` (default), `overwrite`, `append`, `prepend`, `delete_section_by_header`,
/// `replace_section_by_header` or `delete_all_notes`. The answer holds the resulting notes, the new
/// version and a one-line `outcome` such as `appended 42 chars; notes now 1.2 KB`.
///
/// **Appends and prepends** start `content` on a new line. `overwrite` stores `content` exactly;
/// text that the other writes insert gets a final line break when it lacks one (in the notes' own
/// style, `\r\n` or `\n`). Every write locks the notes, so concurrent writers run one after
/// another and none is lost.
///
/// **Sections** are Markdown headings found by a CommonMark parser: ATX (`## Title`) and setext
/// (`Title` underlined with `===`/`---`, levels 1/2) headings count; `#` lines inside code blocks,
/// quotes or lists do not. A section runs from its heading to just before the next heading of the
/// same or a higher level, so it contains its subsections. `section_header` matches the heading
/// text trimmed and case-insensitively (whitespace runs count as one space; rendered text or
/// Markdown source); written with leading `#`s (`## Preferences`) the level must match too.
/// `replace_section_by_header` keeps the heading line and replaces the body, unless `content`
/// starts with a heading, which then replaces the heading too; with `upsert: true` a header that
/// matches nothing adds the section at the end (level from the `#`s, else 2).
/// `delete_section_by_header` removes the heading and the body, subsections included. Bytes
/// outside the edited range (CRLF, Unicode, a missing final newline) are kept exactly; an edit that
/// would change the headings outside it (an unclosed code fence in `content`) is refused with 422.
///
/// **Errors**: no matching heading: 404 with `headings` (all of them); several: 409 with
/// `matches` (`heading`, `line`); unknown `operation`, missing `content` for a write, missing
/// `section_header` for a section operation, a field the operation does not use: 422 naming
/// `field`; a result over the size cap: 422 with `current_bytes`, `attempted_bytes`, `max_bytes`
/// (nothing written); a stale `If-Match` on a write: 412 with `current_version`.
#[utoipa::path(post, path = "/api/agents/{agent_name}/notes/operations", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("If-Match" = Option<String>, Header, description = "For writes: the version the change is based on (the ETag); 412 when stale. Ignored by `read`.", nullable = false, pattern = r#"^(\*|(W/)?("[0-9]{1,18}"|[0-9]{1,18}))$"#),
        Idempotency,
    ),
    request_body = NotesOperationRequest,
    responses(
        (status = 200, description = "Done; the resulting notes, version and outcome", body = NotesOperationResponse,
            headers(("ETag" = String, description = "The (new) version in quotes"))),
        (status = 403, description = "The token lacks `memory:write` (writes) or `memory:read` (read)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No section matches `section_header`; `headings` lists the existing ones", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Several sections match; `matches` lists them with line numbers", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 412, description = "`If-Match` is stale; `current_version` says the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the route's limit", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid or missing field (`field`), or notes over the size cap (`current_bytes`, `attempted_bytes`, `max_bytes`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn notes_operation(
    State(state): State<AppState>,
    principal: Principal,
    Path(agent_name): Path<String>,
    headers: HeaderMap,
    idem: Idempotency,
    Json(request): Json<NotesOperationRequest>,
) -> ApiResult<Response> {
    run(&state, principal, &agent_name, request, &headers, &idem).await
}

/// List the kept revisions, newest first.
///
/// Every write keeps a revision (operation, version, size, time); the newest
/// `MNEMO_NOTES_REVISIONS_KEPT` (default 100) are kept. Never-written notes have none (empty list).
#[utoipa::path(get, path = "/api/agents/{agent_name}/notes/revisions", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        RevisionListQuery,
    ),
    responses(
        (status = 200, description = "A page of revisions", body = RevisionPage),
        (status = 422, description = "Invalid `agent_name`, `limit` or `cursor` (`field`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_revisions(
    caller: Reader,
    Path(agent_name): Path<String>,
    Query(query): Query<RevisionListQuery>,
) -> ApiResult<axum::Json<RevisionPage>> {
    operations::validate_agent_name(&agent_name)?;
    let limit = crate::pagination::size(query.limit, 50, 200)?;
    let before = crate::pagination::position::<i64>(query.cursor.as_deref())?;
    let mut tx = caller.begin().await?;
    let items = store::list_revisions(&mut tx, &agent_name, limit, before).await?;
    tx.end_read_only();
    let (items, more) = crate::pagination::split(items, limit);
    let next_cursor = crate::pagination::next(more, items.last().map(|last| last.version));
    Ok(axum::Json(RevisionPage { items, next_cursor }))
}

/// Read one kept revision: the notes as that version left them.
#[utoipa::path(get, path = "/api/agents/{agent_name}/notes/revisions/{version}", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("version" = i64, Path, description = "The version"),
    ),
    responses(
        (status = 200, description = "The revision with its text", body = Revision),
        (status = 404, description = "That version is not kept; `oldest_version`/`newest_version` say which are", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid `agent_name` (`field`)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get_revision(
    caller: Reader,
    Path((agent_name, version)): Path<(String, i64)>,
) -> ApiResult<axum::Json<Revision>> {
    operations::validate_agent_name(&agent_name)?;
    let mut tx = caller.begin().await?;
    let revision = store::get_revision(&mut tx, &agent_name, version).await?;
    tx.end_read_only();
    Ok(axum::Json(revision))
}

/// Restore a kept revision: its text becomes the notes, as a new version (operation `restore`).
///
/// `If-Match` and the size cap apply as for any write.
#[utoipa::path(post, path = "/api/agents/{agent_name}/notes/revisions/{version}/restore", tag = "notes",
    params(
        ("agent_name" = String, Path, description = "The agent: `[A-Za-z0-9._-]{1,64}`", pattern = r"^[A-Za-z0-9._-]{1,64}$"),
        ("version" = i64, Path, description = "The version to restore"),
        ("If-Match" = Option<String>, Header, description = "The current version (the ETag); 412 when stale", nullable = false, pattern = r#"^(\*|(W/)?("[0-9]{1,18}"|[0-9]{1,18}))$"#),
        Idempotency,
    ),
    responses(
        (status = 200, description = "Restored; the new version", body = NotesOperationResponse,
            headers(("ETag" = String, description = "The new version in quotes"))),
        (status = 404, description = "That version is not kept", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 412, description = "`If-Match` is stale; `current_version` says the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid `agent_name` or `If-Match` (`field`), or the revision is over the size cap", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn restore_revision(
    State(state): State<AppState>,
    caller: Writer,
    Path((agent_name, version)): Path<(String, i64)>,
    headers: HeaderMap,
    idem: Idempotency,
) -> ApiResult<Response> {
    operations::validate_agent_name(&agent_name)?;
    let expected = if_match(&headers)?;
    let mut tx = match idem.begin(&caller).await? {
        Begun::Fresh(tx) => tx,
        Begun::Replayed(response) => return Ok(response),
    };
    let response =
        store::restore_revision(&mut tx, &agent_name, version, expected, &state.config.notes)
            .await?;
    idem.commit(tx, with_etag(response.version, response)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_parse() {
        for text in ["\"3\"", "3", "W/\"3\"", " \"3\" "] {
            assert_eq!(parse_etag(text), Some(3), "{text}");
        }
        for text in ["", "\"\"", "\"-1\"", "abc", "\"3"] {
            assert_eq!(parse_etag(text), None, "{text}");
        }
    }

    #[test]
    fn config_defaults_validate() {
        assert!(NotesConfig::default().validate().is_ok());
        let bad = NotesConfig {
            revisions_kept: 0,
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("REVISIONS_KEPT"));
    }
}

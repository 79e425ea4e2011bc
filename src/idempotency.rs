//! Idempotent retries: the `Idempotency-Key` request header on creating and appending requests.
//!
//! Agents retry on timeouts; with a key, a retry of a request that already took effect replays the
//! first response instead of writing again.
//!
//! # How a handler uses it
//! It takes an [`Idempotency`] argument, opens its transaction with [`Idempotency::begin`] instead
//! of [`Caller::begin`], returns at once when that says [`Begun::Replayed`], and ends with
//! [`Idempotency::commit`], which stores the response in the same transaction as the effect and
//! commits both. Without the header both calls behave exactly like `Caller::begin` and `commit`.
//! Its OpenAPI operation lists `Idempotency` in `params(...)`; [`document`] then adds the replay
//! header and the 409/422 cases to that operation.
//!
//! # What happens with a key
//! 1. [`digest_body`] (a layer on every route) hashes the body as the handler reads it, so
//!    streamed uploads are hashed without a second copy. The request's fingerprint is sha256 over
//!    the method, the path with its query, and that body digest.
//! 2. `begin` opens the scoped transaction and takes a transaction-level advisory lock on a hash of
//!    tenant, user and key. When another transaction holds it, the same key is in flight: 409.
//!    The lock is taken in its own statement before the lookup, so the lookup's snapshot sees
//!    whatever the previous holder committed.
//! 3. A live record with the same fingerprint is replayed (status, the handler's headers, body,
//!    plus `Idempotent-Replayed: true`) and nothing runs; a different fingerprint is 422. An
//!    expired record is deleted and the request runs as new.
//! 4. `commit` stores a 2xx response with `expires_at = now() + MNEMO_IDEMPOTENCY_TTL_HOURS` and
//!    commits. An error (returned before `commit`) rolls the transaction back, effect and all, so
//!    the key stays free for a retry. The primary key backs the lock: should two transactions
//!    ever both run, the second insert fails and that request is answered 409 with nothing written.
//!
//! Records are scoped like every table (row-level security on `tenant_id`, `user_id`); expired
//! ones are purged on access and by a background sweep ([`spawn`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, ResponseBuilder};

use crate::access::Caller;
use crate::auth::Principal;
use crate::db::{Db, Job, Scoped};
use crate::error::{ApiError, ApiResult, PROBLEM_JSON};
use crate::state::AppState;

/// The request header naming a retryable request.
pub const HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// The response header marking a replayed response.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// Longest key, in characters (printable ASCII only).
pub const MAX_KEY_LEN: usize = 255;
/// Largest `MNEMO_IDEMPOTENCY_TTL_HOURS` (a year).
pub const MAX_TTL_HOURS: u32 = 24 * 366;

/// The header's name as the API documents it and names it in problems.
const HEADER_NAME: &str = "Idempotency-Key";

/// What [`digest_body`] learns of a request that carries a key: the method, the path with its
/// query, and a running hash of the body bytes read so far.
#[derive(Clone)]
struct RequestDigest {
    method: String,
    target: String,
    body: Arc<Mutex<Sha256>>,
}

impl RequestDigest {
    /// sha256 over method, target and the body digest (each part length-prefixed by position).
    fn fingerprint(&self) -> Vec<u8> {
        let body = self
            .body
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .finalize();
        let mut hasher = Sha256::new();
        hasher.update(self.method.as_bytes());
        hasher.update([0]);
        hasher.update(self.target.as_bytes());
        hasher.update([0]);
        hasher.update(body);
        hasher.finalize().to_vec()
    }
}

/// Layer on every route: when the request carries an `Idempotency-Key`, its body is hashed as
/// the handler reads it (the hash covers exactly the bytes the handler consumed). Requests without
/// the header pass untouched.
pub async fn digest_body(request: Request, next: Next) -> Response {
    if !request.headers().contains_key(HEADER) {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let digest = RequestDigest {
        method: parts.method.as_str().to_owned(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        body: Arc::new(Mutex::new(Sha256::new())),
    };
    let tap = digest.body.clone();
    let body = Body::new(body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            tap.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .update(data);
        }
        frame
    }));
    parts.extensions.insert(digest);
    next.run(Request::from_parts(parts, body)).await
}

/// A request's idempotency claim: empty without the header, else the key and the request's
/// fingerprint source. Extracting it checks the key (422 naming the header).
pub struct Idempotency(Option<Claim>);

struct Claim {
    key: String,
    digest: RequestDigest,
    ttl_hours: i32,
}

/// How [`Idempotency::begin`] went.
pub enum Begun {
    /// Run the request in this transaction.
    Fresh(Scoped),
    /// The key's first response, to be returned as it is; nothing is to run.
    Replayed(Response),
}

impl FromRequestParts<AppState> for Idempotency {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let mut values = parts.headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(Idempotency(None));
        };
        if values.next().is_some() {
            return Err(invalid_key(
                "send one `Idempotency-Key` header, not several",
            ));
        }
        let key = check_key(value.as_bytes())?;
        let digest = parts
            .extensions
            .get::<RequestDigest>()
            .cloned()
            .ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!(
                    "the route honours Idempotency-Key but the body digest layer is missing"
                ))
            })?;
        Ok(Idempotency(Some(Claim {
            key,
            digest,
            ttl_hours: i32::try_from(state.config.idempotency_ttl_hours).unwrap_or(24),
        })))
    }
}

fn invalid_key(detail: impl Into<String>) -> ApiError {
    ApiError::invalid(HEADER_NAME, detail)
}

/// The key as text: 1 to [`MAX_KEY_LEN`] printable ASCII characters (space included).
fn check_key(bytes: &[u8]) -> ApiResult<String> {
    if bytes.is_empty() || bytes.len() > MAX_KEY_LEN {
        return Err(invalid_key(format!(
            "`Idempotency-Key` must be 1 to {MAX_KEY_LEN} characters; this one has {}",
            bytes.len()
        )));
    }
    if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(invalid_key(
            "`Idempotency-Key` must be printable ASCII characters only",
        ));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// The advisory lock of one key: the first 8 bytes of a sha256 over tenant, user and key.
fn lock_key(principal: &Principal, key: &str) -> i64 {
    let mut hasher = Sha256::new();
    for part in [
        "mnemo idempotency",
        &principal.tenant_id,
        &principal.user_id,
        key,
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

fn in_progress() -> ApiError {
    ApiError::conflict(
        "a request with this Idempotency-Key is still in progress; retry once it has finished",
    )
    .with("field", HEADER_NAME)
}

/// A stored record, as `begin` reads it.
struct Record {
    request_hash: Vec<u8>,
    method: String,
    path: String,
    status: i16,
    headers: Value,
    body: Vec<u8>,
    live: bool,
}

impl Idempotency {
    /// No key: `begin` and `commit` are a plain scoped transaction (for handlers shared with
    /// routes that do not honour the header).
    pub fn none() -> Self {
        Idempotency(None)
    }

    /// Whether the request carries a key.
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// Opens the request's scoped transaction; with a key, first settles whether the request
    /// runs (see the module docs): [`Begun::Replayed`] with the stored response, 409 while the
    /// key is in flight, 422 when the key was used for another request.
    pub async fn begin(&self, caller: &Caller) -> ApiResult<Begun> {
        let principal = caller.principal();
        let mut tx = caller.begin().await?;
        let Some(claim) = &self.0 else {
            return Ok(Begun::Fresh(tx));
        };
        let locked = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_xact_lock($1) AS "locked!""#,
            lock_key(principal, &claim.key)
        )
        .fetch_one(&mut tx)
        .await?;
        if !locked {
            tx.rollback().await?;
            return Err(in_progress());
        }
        let record = sqlx::query_as!(
            Record,
            r#"SELECT request_hash, method, path, status, headers, body,
                      expires_at > now() AS "live!"
             FROM idempotency_keys WHERE key = $1"#,
            claim.key
        )
        .fetch_optional(&mut tx)
        .await?;
        match record {
            None => Ok(Begun::Fresh(tx)),
            Some(record) if !record.live => {
                sqlx::query!("DELETE FROM idempotency_keys WHERE key = $1", claim.key)
                    .execute(&mut tx)
                    .await?;
                Ok(Begun::Fresh(tx))
            }
            Some(record) if record.request_hash == claim.digest.fingerprint() => {
                tx.commit().await?;
                Ok(Begun::Replayed(replay(record)?))
            }
            Some(record) => {
                tx.rollback().await?;
                Err(invalid_key(format!(
                    "this Idempotency-Key was already used for a different request ({} {}); \
                     a new request needs a new key",
                    record.method, record.path
                )))
            }
        }
    }

    /// Stores `response` (when 2xx and the request has a key) in `tx` and commits: the effect and
    /// its record are committed together. Returns the response to send.
    pub async fn commit(&self, mut tx: Scoped, response: impl IntoResponse) -> ApiResult<Response> {
        let response = response.into_response();
        let Some(claim) = self.0.as_ref().filter(|_| response.status().is_success()) else {
            tx.commit().await?;
            return Ok(response);
        };
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("reading the response body: {e}")))?;
        let headers: Vec<[&str; 2]> = parts
            .headers
            .iter()
            .filter(|(name, _)| {
                ![
                    header::CONTENT_LENGTH,
                    header::TRANSFER_ENCODING,
                    header::CONNECTION,
                ]
                .contains(name)
            })
            .filter_map(|(name, value)| Some([name.as_str(), value.to_str().ok()?]))
            .collect();
        sqlx::query!(
            "INSERT INTO idempotency_keys
                 (tenant_id, user_id, key, request_hash, method, path, status, headers, body,
                  expires_at)
             VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, $3,
                     $4, $5, $6, $7, now() + make_interval(hours => $8))",
            claim.key,
            claim.digest.fingerprint(),
            claim.digest.method,
            claim.digest.target,
            i16::try_from(parts.status.as_u16()).unwrap_or(200),
            serde_json::json!(headers),
            body.as_ref(),
            claim.ttl_hours
        )
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(Response::from_parts(parts, Body::from(body)))
    }
}

/// The stored response, marked as replayed.
fn replay(record: Record) -> ApiResult<Response> {
    let status = u16::try_from(record.status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "stored idempotent status {} is not a status",
                record.status
            ))
        })?;
    let mut response = Response::new(Body::from(record.body));
    *response.status_mut() = status;
    let pairs: Vec<(String, String)> = serde_json::from_value(record.headers).unwrap_or_default();
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// Expiry sweep

/// Records one sweep transaction deletes at most.
pub const SWEEP_BATCH: i64 = 1000;
/// Time between sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Deletes expired records of every tenant, `batch` at a time, until none is left (or another
/// replica holds the lock), as [`Job::IdempotencyExpiry`]. Returns how many were deleted.
pub async fn sweep_once(db: &Db, batch: i64) -> Result<u64, sqlx::Error> {
    let mut total = 0u64;
    loop {
        let Some(mut tx) = db.system(Job::IdempotencyExpiry).await? else {
            return Ok(total);
        };
        let deleted = sqlx::query!(
            "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM idempotency_keys WHERE expires_at <= now()
                 ORDER BY expires_at LIMIT $1))",
            batch
        )
        .execute(&mut tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        total += deleted;
        if i64::try_from(deleted).unwrap_or(i64::MAX) < batch {
            return Ok(total);
        }
    }
}

/// Starts the periodic expiry sweep.
pub fn spawn(db: Db) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            match sweep_once(&db, SWEEP_BATCH).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "expired idempotency keys swept"),
                Err(err) => tracing::warn!(error = %err, "idempotency key sweep failed"),
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// OpenAPI

impl utoipa::IntoParams for Idempotency {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            ParameterBuilder::new()
                .name(HEADER_NAME)
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes a retry safe: the first successful response is kept for \
                     `MNEMO_IDEMPOTENCY_TTL_HOURS` (default 24) per user and key, and the same \
                     request with the same key replays it (`Idempotent-Replayed: true`) without \
                     writing again. 1 to 255 printable ASCII characters.",
                ))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(MAX_KEY_LEN))
                        .pattern(Some("^[ -~]+$")),
                ))
                .build(),
        ]
    }
}

const DOC_409: &str = "a request with the same `Idempotency-Key` is still in progress";
const DOC_422: &str = "the `Idempotency-Key` is malformed or was used for a different request (`field` names the header)";

/// Completes the operations that list the `Idempotency-Key` header: their 2xx responses document
/// `Idempotent-Replayed`, and their 409 and 422 responses the key's cases.
pub fn document(openapi: &mut utoipa::openapi::OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        for operation in [
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        {
            let honours =
                operation.parameters.iter().flatten().any(|p| {
                    p.name == HEADER_NAME && matches!(p.parameter_in, ParameterIn::Header)
                });
            if honours {
                document_operation(operation);
            }
        }
    }
}

fn document_operation(operation: &mut Operation) {
    let replayed = utoipa::openapi::HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some(
            "`true` when this is the stored response to an earlier request with the same \
             `Idempotency-Key`",
        ))
        .build();
    let responses = &mut operation.responses.responses;
    for (status, response) in responses.iter_mut() {
        if let (true, RefOr::T(response)) = (status.starts_with('2'), response) {
            response
                .headers
                .insert("Idempotent-Replayed".into(), replayed.clone());
        }
    }
    for (status, doc) in [("409", DOC_409), ("422", DOC_422)] {
        match responses.get_mut(status) {
            Some(RefOr::T(response)) => {
                response.description = format!("{}; or {doc}", response.description);
            }
            Some(RefOr::Ref(_)) => {}
            None => {
                let mut text = if status == "422" {
                    // Also the answer the shared layers document for a bad field.
                    format!("{}; or {doc}", crate::openapi::INVALID.description)
                } else {
                    doc.to_owned()
                };
                if let Some(first) = text.get_mut(..1) {
                    first.make_ascii_uppercase();
                }
                let response = ResponseBuilder::new()
                    .description(text)
                    .content(
                        PROBLEM_JSON,
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("Problem")))
                            .build(),
                    )
                    .build();
                responses.insert(status.to_owned(), RefOr::T(response));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(method: &str, target: &str, body: &[u8]) -> RequestDigest {
        let mut hasher = Sha256::new();
        hasher.update(body);
        RequestDigest {
            method: method.into(),
            target: target.into(),
            body: Arc::new(Mutex::new(hasher)),
        }
    }

    #[test]
    fn keys_are_printable_ascii_of_bounded_length() {
        assert_eq!(check_key(b"retry-1").unwrap(), "retry-1");
        assert_eq!(check_key(b"a b~!").unwrap(), "a b~!");
        assert!(check_key(&[b'k'; MAX_KEY_LEN]).is_ok());
        for bad in [
            &b""[..],
            &[b'k'; MAX_KEY_LEN + 1],
            b"tab\there",
            b"caf\xc3\xa9",
            b"nul\0",
            b"del\x7f",
        ] {
            let err = check_key(bad).unwrap_err();
            assert_eq!(err.status_code(), StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(err.field(), Some(HEADER_NAME));
        }
    }

    #[test]
    fn fingerprints_cover_method_target_and_body() {
        let base = digest("POST", "/api/tasks", b"{}").fingerprint();
        assert_eq!(base, digest("POST", "/api/tasks", b"{}").fingerprint());
        assert_ne!(base, digest("PUT", "/api/tasks", b"{}").fingerprint());
        assert_ne!(base, digest("POST", "/api/tasks?x=1", b"{}").fingerprint());
        assert_ne!(base, digest("POST", "/api/tasks", b"{ }").fingerprint());
        // The separators keep shifted boundaries apart.
        assert_ne!(
            digest("POST", "/a", b"").fingerprint(),
            digest("POS", "T/a", b"").fingerprint()
        );
    }

    #[test]
    fn lock_keys_differ_by_tenant_user_and_key() {
        let who = |t: &str, u: &str| Principal {
            tenant_id: t.into(),
            user_id: u.into(),
            scopes: Vec::new(),
        };
        let base = lock_key(&who("t", "u"), "k");
        assert_eq!(base, lock_key(&who("t", "u"), "k"));
        assert_ne!(base, lock_key(&who("t2", "u"), "k"));
        assert_ne!(base, lock_key(&who("t", "u2"), "k"));
        assert_ne!(base, lock_key(&who("t", "u"), "k2"));
        assert_ne!(
            lock_key(&who("ab", "c"), "k"),
            lock_key(&who("a", "bc"), "k")
        );
    }
}

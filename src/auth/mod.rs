//! Bearer JWT verification and the [`Principal`] every request acts as.
//!
//! The accepted algorithms follow from the configured key: an HS secret accepts only HS256/384/512,
//! an RSA key only RS*/PS*, an EC key ES256/ES384, an Ed25519 key EdDSA. `alg: none` is always
//! refused. `exp` is required; `iss` and `aud` are checked when configured. Each failure has its
//! own `detail`, so a client can tell an expired token from a forged one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::RwLock;
use utoipa::ToSchema;

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;

/// What a token may do. `admin` implies the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
pub enum Scope {
    #[serde(rename = "memory:read")]
    Read,
    #[serde(rename = "memory:write")]
    Write,
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    fn parse(name: &str) -> Option<Scope> {
        match name {
            "memory:read" => Some(Scope::Read),
            "memory:write" => Some(Scope::Write),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "memory:read",
            Scope::Write => "memory:write",
            Scope::Admin => "admin",
        }
    }
}

/// The verified caller: every row a request touches belongs to this tenant and user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: String,
    pub user_id: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }

    /// 403 when the token lacks `scope` (the caller's own rights, so no existence is leaked).
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this token lacks the `{}` scope",
                scope.as_str()
            )))
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("missing bearer token"))
    }
}

/// Largest tenant or user id; longer ones are refused at auth.
const MAX_ID_LEN: usize = 256;

/// JWKS keys by `kid`, with the time they were fetched.
type KeyMap = HashMap<Option<String>, Arc<KeyEntry>>;

struct KeyEntry {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

enum Keys {
    Static(Arc<KeyEntry>),
    Jwks {
        source: String,
        http: reqwest::Client,
        /// Fewest time between two fetches caused by unknown `kid`s.
        min_refresh: Duration,
        keys: RwLock<(KeyMap, Instant)>,
    },
}

/// Verifies bearer tokens according to the configuration.
pub struct Verifier {
    keys: Keys,
    issuer: Option<String>,
    audience: Option<String>,
    tenant_claim: Vec<String>,
    default_tenant: Option<String>,
}

const HMAC: &[Algorithm] = &[Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
const RSA: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];
const EC: &[Algorithm] = &[Algorithm::ES256, Algorithm::ES384];
const ED: &[Algorithm] = &[Algorithm::EdDSA];

impl Verifier {
    /// Builds the verifier; an unreadable or unusable key is an error naming the setting.
    pub async fn from_config(config: &Config) -> Result<Self, String> {
        let keys = if let Some(secret) = &config.jwt_secret {
            Keys::Static(Arc::new(KeyEntry {
                key: DecodingKey::from_secret(secret.as_bytes()),
                algorithms: HMAC.to_vec(),
            }))
        } else if let Some(path) = &config.jwt_public_key {
            let pem = std::fs::read(path).map_err(|e| {
                format!("MNEMO_JWT_PUBLIC_KEY: cannot read {}: {e}", path.display())
            })?;
            Keys::Static(Arc::new(decoding_key_from_pem(&pem).ok_or_else(|| {
                format!(
                    "MNEMO_JWT_PUBLIC_KEY: {} is not an RSA, EC or Ed25519 public key in PEM",
                    path.display()
                )
            })?))
        } else if let Some(source) = &config.jwt_jwks {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("MNEMO_JWT_JWKS: {e}"))?;
            let keys = load_jwks(&http, source)
                .await
                .map_err(|e| format!("MNEMO_JWT_JWKS: {e}"))?;
            Keys::Jwks {
                source: source.clone(),
                http,
                min_refresh: Duration::from_secs(config.jwt_jwks_min_refresh_secs),
                keys: RwLock::new((keys, Instant::now())),
            }
        } else {
            return Err(
                "no token key: set MNEMO_JWT_SECRET, MNEMO_JWT_PUBLIC_KEY or MNEMO_JWT_JWKS".into(),
            );
        };
        Ok(Verifier {
            keys,
            issuer: config.jwt_issuer.clone(),
            audience: config.jwt_audience.clone(),
            tenant_claim: config.tenant_claim.split('.').map(str::to_owned).collect(),
            default_tenant: config.default_tenant.clone(),
        })
    }

    /// Verifies `token` and returns who it speaks for, or a 401 saying why not.
    pub async fn verify(&self, token: &str) -> Result<Principal, ApiError> {
        let header = peek_header(token)?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::unauthorized("token header has no `alg`"))?;
        if header.contains_key("crit") {
            // RFC 7515 4.1.11: a recipient that does not understand a critical extension must
            // reject the token, and mnemo understands none.
            return Err(ApiError::unauthorized(
                "token header has a `crit` extension this server does not understand",
            ));
        }
        if alg.eq_ignore_ascii_case("none") {
            return Err(ApiError::unauthorized(
                "unsigned tokens (`alg: none`) are never accepted",
            ));
        }
        let kid = header.get("kid").and_then(Value::as_str).map(str::to_owned);
        let entry = self.key_for(kid.as_deref()).await?;
        let algorithm: Algorithm = alg.parse().map_err(|_| {
            ApiError::unauthorized(format!("token algorithm `{alg}` is not supported"))
        })?;
        if !entry.algorithms.contains(&algorithm) {
            return Err(ApiError::unauthorized(format!(
                "token is signed with {alg}, but this server accepts only {}",
                algorithm_names(&entry.algorithms)
            )));
        }

        let mut validation = Validation::new(algorithm);
        validation.algorithms = vec![algorithm];
        validation.leeway = 30;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        match &self.issuer {
            Some(issuer) => validation.set_issuer(&[issuer]),
            None => validation.iss = None,
        }
        match &self.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &entry.key, &validation)
            .map_err(|e| ApiError::unauthorized(describe(e.kind(), self)))?;
        self.principal(&data.claims)
    }

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, ApiError> {
        let user_id = match claims.get("sub") {
            None | Some(Value::Null) => {
                return Err(ApiError::unauthorized(
                    "token has no `sub` claim; it names the user",
                ));
            }
            Some(Value::String(sub)) => sub.clone(),
            Some(_) => return Err(ApiError::unauthorized("token `sub` claim is not a string")),
        };
        check_id("sub", &user_id)?;

        let claim_name = self.tenant_claim.join(".");
        let tenant_id = match lookup(claims, &self.tenant_claim) {
            Some(Value::String(tenant)) => tenant.clone(),
            None | Some(Value::Null) => match &self.default_tenant {
                Some(tenant) => tenant.clone(),
                None => {
                    return Err(ApiError::unauthorized(format!(
                        "token has no `{claim_name}` claim naming the tenant"
                    )));
                }
            },
            Some(_) => {
                return Err(ApiError::unauthorized(format!(
                    "token `{claim_name}` claim is not a string"
                )));
            }
        };
        check_id(&claim_name, &tenant_id)?;

        Ok(Principal {
            tenant_id,
            user_id,
            scopes: scopes(claims)?,
        })
    }

    async fn key_for(&self, kid: Option<&str>) -> Result<Arc<KeyEntry>, ApiError> {
        match &self.keys {
            Keys::Static(entry) => Ok(entry.clone()),
            Keys::Jwks {
                source,
                http,
                min_refresh,
                keys,
            } => {
                let kid_key = kid.map(str::to_owned);
                {
                    let guard = keys.read().await;
                    if let Some(found) = pick(&guard.0, &kid_key) {
                        return Ok(found);
                    }
                    if guard.1.elapsed() < *min_refresh || !is_url(source) {
                        return Err(unknown_kid(kid));
                    }
                }
                let mut guard = keys.write().await;
                if guard.1.elapsed() >= *min_refresh {
                    match load_jwks(http, source).await {
                        Ok(fresh) => *guard = (fresh, Instant::now()),
                        Err(e) => {
                            tracing::warn!(error = %e, "JWKS refresh failed");
                            guard.1 = Instant::now();
                        }
                    }
                }
                pick(&guard.0, &kid_key).ok_or_else(|| unknown_kid(kid))
            }
        }
    }
}

fn pick(keys: &KeyMap, kid: &Option<String>) -> Option<Arc<KeyEntry>> {
    if let Some(entry) = keys.get(kid) {
        return Some(entry.clone());
    }
    // A token without `kid` may use the only key there is.
    if kid.is_none() && keys.len() == 1 {
        return keys.values().next().cloned();
    }
    None
}

fn unknown_kid(kid: Option<&str>) -> ApiError {
    match kid {
        Some(kid) => ApiError::unauthorized(format!("no key with kid `{kid}` in the JWKS")),
        None => ApiError::unauthorized("token has no `kid` and the JWKS holds several keys"),
    }
}

fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

async fn load_jwks(http: &reqwest::Client, source: &str) -> Result<KeyMap, String> {
    let text = if is_url(source) {
        http.get(source)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("cannot fetch {source}: {e}"))?
            .text()
            .await
            .map_err(|e| format!("cannot read {source}: {e}"))?
    } else {
        std::fs::read_to_string(source).map_err(|e| format!("cannot read {source}: {e}"))?
    };
    let set: JwkSet =
        serde_json::from_str(&text).map_err(|e| format!("{source} is not a JWKS: {e}"))?;
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        let algorithms = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => RSA.to_vec(),
            AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                EllipticCurve::P256 => vec![Algorithm::ES256],
                EllipticCurve::P384 => vec![Algorithm::ES384],
                _ => continue,
            },
            AlgorithmParameters::OctetKeyPair(_) => ED.to_vec(),
            // Shared secrets have no place in a published key set.
            AlgorithmParameters::OctetKey(_) => continue,
            _ => continue,
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("{source}: bad key: {e}"))?;
        keys.insert(
            jwk.common.key_id.clone(),
            Arc::new(KeyEntry { key, algorithms }),
        );
    }
    if keys.is_empty() {
        return Err(format!("{source} holds no usable RSA, EC or OKP key"));
    }
    Ok(keys)
}

fn decoding_key_from_pem(pem: &[u8]) -> Option<KeyEntry> {
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return Some(KeyEntry {
            key,
            algorithms: RSA.to_vec(),
        });
    }
    if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        return Some(KeyEntry {
            key,
            algorithms: EC.to_vec(),
        });
    }
    if let Ok(key) = DecodingKey::from_ed_pem(pem) {
        return Some(KeyEntry {
            key,
            algorithms: ED.to_vec(),
        });
    }
    None
}

fn peek_header(token: &str) -> Result<Map<String, Value>, ApiError> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ApiError::unauthorized(
            "token is not a JWT: expected three base64url parts separated by dots",
        ));
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(head)
        .map_err(|_| ApiError::unauthorized("token header is not valid base64url"))?;
    serde_json::from_slice(&bytes)
        .map_err(|_| ApiError::unauthorized("token header is not a JSON object"))
}

fn describe(kind: &ErrorKind, verifier: &Verifier) -> String {
    match kind {
        ErrorKind::InvalidSignature => "token signature does not verify".into(),
        ErrorKind::ExpiredSignature => "token has expired (`exp` is in the past)".into(),
        ErrorKind::ImmatureSignature => "token is not valid yet (`nbf` is in the future)".into(),
        ErrorKind::InvalidAudience => format!(
            "token audience does not match; expected `{}`",
            verifier.audience.as_deref().unwrap_or_default()
        ),
        ErrorKind::InvalidIssuer => format!(
            "token issuer does not match; expected `{}`",
            verifier.issuer.as_deref().unwrap_or_default()
        ),
        ErrorKind::MissingRequiredClaim(claim) => {
            format!("token has no `{claim}` claim, which is required")
        }
        ErrorKind::InvalidAlgorithm => "token algorithm does not fit the configured key".into(),
        ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
            "token is malformed: its parts are not valid base64url JSON".into()
        }
        ErrorKind::InvalidToken => "token is malformed".into(),
        other => format!("token rejected: {other:?}"),
    }
}

fn algorithm_names(algorithms: &[Algorithm]) -> String {
    algorithms
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lookup<'a>(claims: &'a Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let mut value = claims.get(first)?;
    for segment in rest {
        value = value.as_object()?.get(segment)?;
    }
    Some(value)
}

fn check_id(claim: &str, id: &str) -> Result<(), ApiError> {
    if id.is_empty() {
        return Err(ApiError::unauthorized(format!(
            "token `{claim}` claim is empty"
        )));
    }
    if id.len() > MAX_ID_LEN {
        return Err(ApiError::unauthorized(format!(
            "token `{claim}` claim is longer than {MAX_ID_LEN} bytes"
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::unauthorized(format!(
            "token `{claim}` claim contains control characters"
        )));
    }
    // Identities are compared byte for byte and never trimmed, so `"acme "` would be a tenant of
    // its own beside `acme`. Such values are refused rather than silently kept apart.
    if id.starts_with(char::is_whitespace) || id.ends_with(char::is_whitespace) {
        return Err(ApiError::unauthorized(format!(
            "token `{claim}` claim starts or ends with whitespace"
        )));
    }
    Ok(())
}

/// `scope`, `scp` (space-separated string or array) and `scopes` are all read. A token without either
/// claim gets read and write on its own data; a token that names scopes but none of mnemo's
/// (`memory:read`, `memory:write`, `admin`) is refused rather than read as unrestricted.
fn scopes(claims: &Map<String, Value>) -> Result<Vec<Scope>, ApiError> {
    let mut names: Vec<&str> = Vec::new();
    let mut present = false;
    for claim in ["scope", "scp", "scopes"] {
        match claims.get(claim) {
            Some(Value::String(s)) => {
                present = true;
                names.extend(s.split_whitespace());
            }
            Some(Value::Array(items)) => {
                present = true;
                names.extend(items.iter().filter_map(Value::as_str));
            }
            _ => {}
        }
    }
    let mut found: Vec<Scope> = Vec::new();
    for scope in names.iter().copied().filter_map(Scope::parse) {
        if !found.contains(&scope) {
            found.push(scope);
        }
    }
    if found.is_empty() {
        if present && !names.is_empty() {
            return Err(ApiError::unauthorized(
                "token names scopes, but none of `memory:read`, `memory:write`, `admin`",
            ));
        }
        found = vec![Scope::Read, Scope::Write];
    }
    Ok(found)
}

/// Signs a development/ops token with the configured key (`mnemo token`).
pub fn mint(
    config: &Config,
    sub: &str,
    tenant: &str,
    scopes: &[String],
    ttl: Duration,
) -> Result<String, String> {
    let (header, key) = if let Some(secret) = &config.jwt_secret {
        (
            Header::new(Algorithm::HS256),
            EncodingKey::from_secret(secret.as_bytes()),
        )
    } else if let Some(path) = &config.jwt_private_key {
        let pem = std::fs::read(path)
            .map_err(|e| format!("MNEMO_JWT_PRIVATE_KEY: cannot read {}: {e}", path.display()))?;
        if let Ok(key) = EncodingKey::from_rsa_pem(&pem) {
            (Header::new(Algorithm::RS256), key)
        } else if let Ok(key) = EncodingKey::from_ec_pem(&pem) {
            (Header::new(Algorithm::ES256), key)
        } else if let Ok(key) = EncodingKey::from_ed_pem(&pem) {
            (Header::new(Algorithm::EdDSA), key)
        } else {
            return Err(format!(
                "MNEMO_JWT_PRIVATE_KEY: {} is not an RSA, EC or Ed25519 private key in PEM",
                path.display()
            ));
        }
    } else {
        return Err("signing needs MNEMO_JWT_SECRET or MNEMO_JWT_PRIVATE_KEY".into());
    };
    let now = chrono::Utc::now().timestamp();
    let mut claims = Map::new();
    claims.insert("sub".into(), Value::String(sub.into()));
    claims.insert(config.tenant_claim.clone(), Value::String(tenant.into()));
    claims.insert("iat".into(), now.into());
    claims.insert(
        "exp".into(),
        (now + i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2)).into(),
    );
    if let Some(issuer) = &config.jwt_issuer {
        claims.insert("iss".into(), Value::String(issuer.clone()));
    }
    if let Some(audience) = &config.jwt_audience {
        claims.insert("aud".into(), Value::String(audience.clone()));
    }
    if !scopes.is_empty() {
        claims.insert("scope".into(), Value::String(scopes.join(" ")));
    }
    jsonwebtoken::encode(&header, &claims, &key).map_err(|e| format!("cannot sign: {e}"))
}

/// The `WWW-Authenticate` value of a 401. RFC 9728: it names the protected-resource metadata,
/// which MCP clients follow to the authorization server. Made only when a request is refused.
fn challenge(state: &AppState, headers: &HeaderMap, error: Option<&str>) -> Option<HeaderValue> {
    let mut value = String::from("Bearer realm=\"mnemo\"");
    if let Some(detail) = error {
        value.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{}\"",
            detail.replace(['"', '\\'], "'")
        ));
    }
    let metadata = crate::mcp::resource_metadata_url(state, headers);
    value.push_str(&format!(", resource_metadata=\"{metadata}\""));
    HeaderValue::from_str(&value).ok()
}

/// Middleware: verifies the bearer token of every non-public route and stores the [`Principal`].
pub async fn require_bearer(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if crate::http::is_public(req.uri().path()) {
        return next.run(req).await;
    }
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        let mut response = ApiError::unauthorized("missing `Authorization: Bearer <token>` header")
            .into_response();
        if let Some(value) = challenge(&state, req.headers(), None) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        return response;
    };
    let token = match value.to_str().ok().and_then(bearer_token) {
        Some(token) => token.to_owned(),
        None => {
            return ApiError::unauthorized(
                "malformed `Authorization` header; expected `Bearer <token>`",
            )
            .into_response();
        }
    };
    match state.verifier.verify(&token).await {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(err) => {
            let unauthorized = err.status_code() == StatusCode::UNAUTHORIZED;
            let detail = err.to_string();
            let mut response = err.into_response();
            let value = unauthorized
                .then(|| challenge(&state, req.headers(), Some(&detail)))
                .flatten();
            if let Some(value) = value {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
    }
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header_forms() {
        assert_eq!(bearer_token("Bearer abc.def.ghi"), Some("abc.def.ghi"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("Basic dXNlcjpwYXNz"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer  "), None);
    }

    #[test]
    fn scopes_from_either_claim() {
        let claims: Map<String, Value> =
            serde_json::from_str(r#"{"scope":"openid memory:read","scopes":["admin"]}"#).unwrap();
        assert_eq!(scopes(&claims).unwrap(), vec![Scope::Read, Scope::Admin]);
        let scp: Map<String, Value> = serde_json::from_str(r#"{"scp":["memory:read"]}"#).unwrap();
        assert_eq!(scopes(&scp).unwrap(), vec![Scope::Read]);
        let absent: Map<String, Value> = serde_json::from_str(r#"{"sub":"a"}"#).unwrap();
        assert_eq!(scopes(&absent).unwrap(), vec![Scope::Read, Scope::Write]);
        let empty: Map<String, Value> = serde_json::from_str(r#"{"scope":""}"#).unwrap();
        assert_eq!(scopes(&empty).unwrap(), vec![Scope::Read, Scope::Write]);
        for unknown in [r#"{"scope":"openid"}"#, r#"{"scope":"memory.read read"}"#] {
            let claims: Map<String, Value> = serde_json::from_str(unknown).unwrap();
            assert!(scopes(&claims).is_err(), "{unknown}");
        }
    }

    #[test]
    fn nested_tenant_claim() {
        let claims: Map<String, Value> =
            serde_json::from_str(r#"{"app_metadata":{"tenant":"acme"}}"#).unwrap();
        let path = vec!["app_metadata".to_owned(), "tenant".to_owned()];
        assert_eq!(lookup(&claims, &path), Some(&Value::String("acme".into())));
    }
}

//! Bearer JWT verification and the [`Principal`] every request acts as.
//!
//! The accepted algorithms follow from the configured key: an HS secret accepts only HS256/384/512,
//! an RSA key only RS*/PS*, an EC key ES256/ES384, an Ed25519 key EdDSA. `alg: none` is always
//! refused. `exp` is required; `iss` and `aud` are checked when configured. Each failure has its
//! own `detail`, so a client can tell an expired token from a forged one.

mod keys;
mod verify;

use std::time::Duration;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;

pub use verify::Verifier;

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
}

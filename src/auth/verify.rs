//! The [`Verifier`]: a token's header and signature checked against the configured key, then its
//! claims read into the [`Principal`] (user, tenant and scopes), each refusal saying why.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::RwLock;

use super::keys::{
    HMAC, KeyEntry, Keys, decoding_key_from_pem, is_url, load_jwks, pick, unknown_kid,
};
use super::{Principal, Scope};
use crate::config::Config;
use crate::error::ApiError;

/// Largest tenant or user id; longer ones are refused at auth.
const MAX_ID_LEN: usize = 256;

/// Verifies bearer tokens according to the configuration.
pub struct Verifier {
    keys: Keys,
    issuer: Option<String>,
    audience: Option<String>,
    tenant_claim: Vec<String>,
    default_tenant: Option<String>,
}

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

#[cfg(test)]
mod tests {
    use super::*;

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

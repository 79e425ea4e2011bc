//! The keys tokens are verified with: one static key (an HS secret or a PEM public key) or a JWKS
//! read from a file or fetched from a URL, each with the algorithms it accepts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::RwLock;

use crate::error::ApiError;

/// JWKS keys by `kid`, with the time they were fetched.
pub(super) type KeyMap = HashMap<Option<String>, Arc<KeyEntry>>;

pub(super) struct KeyEntry {
    pub(super) key: DecodingKey,
    pub(super) algorithms: Vec<Algorithm>,
}

pub(super) enum Keys {
    Static(Arc<KeyEntry>),
    Jwks {
        source: String,
        http: reqwest::Client,
        /// Fewest time between two fetches caused by unknown `kid`s.
        min_refresh: Duration,
        keys: RwLock<(KeyMap, Instant)>,
    },
}

pub(super) const HMAC: &[Algorithm] = &[Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
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

pub(super) fn pick(keys: &KeyMap, kid: &Option<String>) -> Option<Arc<KeyEntry>> {
    if let Some(entry) = keys.get(kid) {
        return Some(entry.clone());
    }
    // A token without `kid` may use the only key there is.
    if kid.is_none() && keys.len() == 1 {
        return keys.values().next().cloned();
    }
    None
}

pub(super) fn unknown_kid(kid: Option<&str>) -> ApiError {
    match kid {
        Some(kid) => ApiError::unauthorized(format!("no key with kid `{kid}` in the JWKS")),
        None => ApiError::unauthorized("token has no `kid` and the JWKS holds several keys"),
    }
}

pub(super) fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

pub(super) async fn load_jwks(http: &reqwest::Client, source: &str) -> Result<KeyMap, String> {
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

pub(super) fn decoding_key_from_pem(pem: &[u8]) -> Option<KeyEntry> {
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

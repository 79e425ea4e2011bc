//! Request extractors whose failures are problem+json: malformed JSON is 400, a body that parses
//! but does not fit the schema is 422 naming the field by its JSON path, an oversize body is 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

mod strict;
pub use strict::Strict;

/// The body limit of the route, put in the request extensions by [`crate::http::body_limit`].
#[derive(Debug, Clone, Copy)]
pub struct RouteBodyLimit(pub usize);

/// JSON body extractor; see the module docs for its errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers().get(CONTENT_TYPE)) {
            return Err(ApiError::status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a JSON body with `Content-Type: application/json`",
            ));
        }
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(Json)
    }
}

/// Reads the whole body within the route's limit, answering 413 past it.
pub async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let limit = req.extensions().get::<RouteBodyLimit>().map(|l| l.0);
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {rejection}"))
        }
    })
}

/// Reads the whole body of a route that sets its own limit (`what` names the body in the answer):
/// 413 with `limit_bytes` when the declared `Content-Length` or the bytes read pass `limit`, 400
/// when the body cannot be read.
pub async fn read_limited(req: Request, limit: usize, what: &str) -> Result<Bytes, ApiError> {
    let over = || {
        ApiError::too_large(format!("the {what} is larger than {limit} bytes"))
            .with("limit_bytes", limit)
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(over());
    }
    match http_body_util::Limited::new(req.into_body(), limit)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(over()),
        Err(err) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {err}"
        ))),
    }
}

pub fn too_large(limit: Option<usize>) -> ApiError {
    match limit {
        Some(limit) => ApiError::too_large(format!(
            "request body is larger than this route's limit of {limit} bytes"
        ))
        .with("limit_bytes", limit),
        None => ApiError::too_large("request body is larger than this route accepts"),
    }
}

/// Parses JSON: syntax errors are 400, shape errors 422 with the JSON path in `field` (a struct
/// is an object: an array in its place is 422, see [`Strict`]). Strings
/// (and object keys) holding a NUL character, which PostgreSQL text cannot store, are 422 naming
/// the first such field, and so are numbers that would not read back as written.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if (has_nul_escape(bytes) || has_huge_number(bytes))
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes)
        && let Some(err) = unstorable(&value, &mut String::new())
    {
        return Err(err);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(Strict(&mut de));
    if value.is_ok() {
        de.end()
            .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    }
    value.map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                if let Some(err) = duplicate(&path, &inner.to_string()) {
                    return err;
                }
                let field = if path == "." { String::new() } else { path };
                let detail = if field.is_empty() {
                    format!("invalid request body: {inner}")
                } else {
                    format!("invalid `{field}`: {inner}")
                };
                ApiError::invalid(field, detail)
            }
            _ => ApiError::bad_request(format!("malformed JSON: {inner}")),
        }
    })
}

/// Members accepted under a second name: (the name, its alias).
pub const ALIASES: &[(&str, &str)] = &[
    ("memory_type", "type"),
    ("metadata", "content_metadata"),
    ("key", "memory_key"),
];

/// serde's "duplicate field" error (a member sent twice, or under both its names) as a 422 naming
/// the member, and its alias when it has one.
fn duplicate(path: &str, message: &str) -> Option<ApiError> {
    let name = message
        .strip_prefix("duplicate field `")?
        .split('`')
        .next()?;
    let parent = path.trim_start_matches('.');
    let field = if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    };
    let detail = match ALIASES.iter().find(|(member, _)| *member == name) {
        Some((member, alias)) => format!(
            "`{field}` is given twice: `{member}` and `{alias}` name the same member; send one"
        ),
        None => format!("`{field}` is given twice; send it once"),
    };
    Some(ApiError::invalid(field, detail))
}

/// Whether `bytes` may hold a JSON string with a NUL character (`\u0000`, any case of hex).
/// Cheap and conservative: a false alarm only costs a closer look.
fn has_nul_escape(bytes: &[u8]) -> bool {
    bytes
        .windows(6)
        .any(|w| w[0] == b'\\' && w[1] == b'u' && &w[2..] == b"0000")
}

/// Whether `bytes` may hold a number with an exponent of three digits or more, or a run of 300
/// digits (magnitudes that PostgreSQL's jsonb keeps exactly but that do not read back as a float).
fn has_huge_number(bytes: &[u8]) -> bool {
    let mut run = 0usize;
    for b in bytes {
        run = if b.is_ascii_digit() { run + 1 } else { 0 };
        if run >= 300 {
            return true;
        }
    }
    bytes.windows(4).any(|w| {
        (w[0] == b'e' || w[0] == b'E')
            && w[1..]
                .iter()
                .all(|b| b.is_ascii_digit() || *b == b'+' || *b == b'-')
            && w[1..].iter().filter(|b| b.is_ascii_digit()).count() >= 2
    })
}

/// Largest magnitude of a stored JSON number. PostgreSQL keeps jsonb numbers as exact decimals
/// and writes them back without an exponent, so a float near `f64::MAX` comes back as a
/// 309-digit integer; bounding magnitudes keeps every stored number readable as it was written.
pub const MAX_JSON_NUMBER: f64 = 1e300;

/// The first value in `value` that cannot be stored as given: a string or key with a NUL
/// character, or a number beyond [`MAX_JSON_NUMBER`]. `path` is the JSON path so far.
pub fn unstorable(value: &serde_json::Value, path: &mut String) -> Option<ApiError> {
    use serde_json::Value;
    let field = |path: &str| path.trim_start_matches('.').to_owned();
    match value {
        Value::String(s) if s.contains('\0') => {
            let field = field(path);
            Some(ApiError::invalid(
                field.clone(),
                format!("`{field}` contains a NUL character (U+0000), which cannot be stored"),
            ))
        }
        Value::Number(n) => {
            let huge = n.as_f64().is_some_and(|f| !f.is_finite() || f.abs() > MAX_JSON_NUMBER);
            huge.then(|| {
                let field = field(path);
                ApiError::invalid(
                    field.clone(),
                    format!(
                        "`{field}` is {n}; numbers must lie within ±{MAX_JSON_NUMBER:e} to be \
                         stored and read back exactly"
                    ),
                )
            })
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = unstorable(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            let len = path.len();
            path.push('.');
            path.push_str(key);
            if key.contains('\0') {
                let field = field(path).replace('\0', "\\u0000");
                path.truncate(len);
                return Some(ApiError::invalid(
                    field.clone(),
                    format!("the key `{field}` contains a NUL character (U+0000), which cannot be stored"),
                ));
            }
            let found = unstorable(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

fn is_json(content_type: Option<&axum::http::HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mime = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Query-string extractor: a parameter of the wrong type is 422 naming it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        if let Some((name, _)) = form_urlencoded::parse(query.as_bytes())
            .find(|(name, value)| name.contains('\0') || value.contains('\0'))
        {
            let name = name.replace('\0', "\\u0000");
            return Err(ApiError::invalid(
                name.clone(),
                format!("query parameter `{name}` contains a NUL character (U+0000)"),
            ));
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|err| {
                let field = err.path().to_string();
                let inner = err.into_inner();
                if field == "." {
                    ApiError::invalid("", format!("invalid query string: {inner}"))
                } else {
                    ApiError::invalid(
                        field.clone(),
                        format!("invalid query parameter `{field}`: {inner}"),
                    )
                }
            })
    }
}

/// Path-parameter extractor: a segment that does not parse as its parameter's type (a task id
/// that is no UUID, a version past the integer range) is 422 naming the parameter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => {
                let template = parts
                    .extensions
                    .get::<axum::extract::MatchedPath>()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default();
                Err(path_rejection(&template, rejection))
            }
        }
    }
}

/// The names of the parameters of a route template (`/api/tasks/{id}/waits/{wait_id}`), in order.
fn template_params(template: &str) -> Vec<&str> {
    template
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_start_matches('*'))
        .collect()
}

fn path_rejection(template: &str, rejection: axum::extract::rejection::PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    use axum::extract::rejection::PathRejection;
    let PathRejection::FailedToDeserializePathParams(failed) = rejection else {
        return ApiError::Internal(anyhow::anyhow!("path parameters missing: {rejection}"));
    };
    let names = template_params(template);
    let nth = |i: usize| names.get(i).map_or_else(String::new, |n| (*n).to_owned());
    let name = match failed.kind() {
        ErrorKind::ParseErrorAtKey { key, .. }
        | ErrorKind::DeserializeError { key, .. }
        | ErrorKind::InvalidUtf8InPathParam { key } => key.clone(),
        ErrorKind::ParseErrorAtIndex { index, .. } => nth(*index),
        ErrorKind::ParseError { .. } => nth(0),
        ErrorKind::Message(_) if names.len() == 1 => nth(0),
        ErrorKind::Message(_) => String::new(),
        // A route and its handler disagree: a bug, not the client's doing.
        other => return ApiError::Internal(anyhow::anyhow!("path extraction failed: {other}")),
    };
    let detail = if name.is_empty() {
        format!("a path parameter is not valid: {}", failed.kind())
    } else {
        format!("path parameter `{name}` is not valid: {}", failed.kind())
    };
    ApiError::invalid(name, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Batch {
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Item {
        sender: String,
    }

    fn status_and_field(err: ApiError) -> (u16, Option<String>) {
        let field = err.field().map(str::to_owned);
        (err.status_code().as_u16(), field)
    }

    #[test]
    fn template_parameters_in_order() {
        assert_eq!(
            template_params("/api/tasks/{id}/waits/{wait_id}"),
            vec!["id", "wait_id"]
        );
        assert!(template_params("/api/tasks").is_empty());
    }

    #[test]
    fn syntax_is_400_shape_is_422_with_path() {
        let err = parse_json::<Batch>(br#"{"items": ["#).unwrap_err();
        assert_eq!(status_and_field(err).0, 400);
        let err =
            parse_json::<Batch>(br#"{"items": [{"sender": "a"}, {"sender": 7}]}"#).unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("items[1].sender".into())));
        let err = parse_json::<Batch>(br#"{"items": [{"sender": "a"}]} trailing"#).unwrap_err();
        assert_eq!(status_and_field(err).0, 400);
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Aliased {
        #[serde(default, alias = "type")]
        memory_type: Option<String>,
        #[serde(default)]
        inner: Option<Box<Aliased>>,
    }

    #[test]
    fn a_member_under_both_names_is_422_naming_both() {
        let ok = parse_json::<Aliased>(br#"{"type": "a"}"#).unwrap();
        assert_eq!(ok.memory_type.as_deref(), Some("a"));
        let err = parse_json::<Aliased>(br#"{"type": "a", "memory_type": "b"}"#).unwrap_err();
        let detail = format!("{err:?}");
        assert_eq!(status_and_field(err), (422, Some("memory_type".into())));
        assert!(detail.contains("`type` name the same member"), "{detail}");
        let err =
            parse_json::<Aliased>(br#"{"inner": {"memory_type": "a", "type": "b"}}"#).unwrap_err();
        assert_eq!(
            status_and_field(err),
            (422, Some("inner.memory_type".into()))
        );
        let err = parse_json::<Aliased>(br#"{"inner": null, "inner": null}"#).unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("inner".into())));
        let err = parse_json::<Aliased>(br#"{"kind": "a"}"#).unwrap_err();
        assert_eq!(status_and_field(err).0, 422);
    }

    #[test]
    fn nul_characters_are_422_naming_the_field() {
        let err = parse_json::<Batch>(br#"{"items": [{"sender": "a"}, {"sender": "b\u0000c"}]}"#)
            .unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("items[1].sender".into())));
        let err = parse_json::<serde_json::Value>(br#"{"m": {"k\u0000": 1}}"#).unwrap_err();
        assert_eq!(status_and_field(err).0, 422);
        // An escaped backslash followed by `u0000` is text, not a NUL.
        let ok = parse_json::<serde_json::Value>(br#"{"s": "\\u0000"}"#).unwrap();
        assert_eq!(ok["s"], "\\u0000");
    }

    #[test]
    fn numbers_that_would_not_read_back_are_422() {
        let err =
            parse_json::<serde_json::Value>(br#"{"metadata": {"x": 1.7976931348623157e308}}"#)
                .unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("metadata.x".into())));
        let err = parse_json::<serde_json::Value>(br#"[1, -2e301]"#).unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("[1]".into())));
        for fine in [
            &br#"{"x": 1e300}"#[..],
            br#"{"x": 1.5e-300}"#,
            br#"{"x": 18446744073709551615}"#,
        ] {
            assert!(parse_json::<serde_json::Value>(fine).is_ok());
        }
    }
}

//! Request extractors whose failures are problem+json: malformed JSON is 400, a body that parses
//! but does not fit the schema is 422 naming the field by its JSON path, an oversize body is 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

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

pub fn too_large(limit: Option<usize>) -> ApiError {
    match limit {
        Some(limit) => ApiError::too_large(format!(
            "request body is larger than this route's limit of {limit} bytes"
        ))
        .with("limit_bytes", limit),
        None => ApiError::too_large("request body is larger than this route accepts"),
    }
}

/// Parses JSON: syntax errors are 400, shape errors 422 with the JSON path in `field`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de);
    if value.is_ok() {
        de.end()
            .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    }
    value.map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
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
    fn syntax_is_400_shape_is_422_with_path() {
        let err = parse_json::<Batch>(br#"{"items": ["#).unwrap_err();
        assert_eq!(status_and_field(err).0, 400);
        let err =
            parse_json::<Batch>(br#"{"items": [{"sender": "a"}, {"sender": 7}]}"#).unwrap_err();
        assert_eq!(status_and_field(err), (422, Some("items[1].sender".into())));
        let err = parse_json::<Batch>(br#"{"items": [{"sender": "a"}]} trailing"#).unwrap_err();
        assert_eq!(status_and_field(err).0, 400);
    }
}

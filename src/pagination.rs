//! Opaque list cursors, shared by every paginated route.
//!
//! A cursor is the position of the last item of a page (whatever the list orders by), serialized
//! as JSON and base64url-encoded. Clients pass `next_cursor` back unchanged; anything else is 422
//! naming `cursor`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ApiResult};

/// Encodes a position as an opaque cursor.
pub fn encode<T: Serialize>(position: &T) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(position).unwrap_or_default())
}

/// Decodes a cursor made by [`encode`] for the same position type; 422 on anything else.
pub fn decode<T: DeserializeOwned>(cursor: &str) -> ApiResult<T> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| {
            ApiError::invalid(
                "cursor",
                "`cursor` is not a `next_cursor` this list returned",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_foreign_cursors() {
        let cursor = encode(&(1_700_000_000_123_456_i64, "session-1"));
        let back: (i64, String) = decode(&cursor).unwrap();
        assert_eq!(back, (1_700_000_000_123_456, "session-1".to_owned()));
        let err = decode::<i64>("not a cursor!").unwrap_err();
        assert_eq!(
            (err.status_code().as_u16(), err.field()),
            (422, Some("cursor"))
        );
        let err = decode::<uuid::Uuid>(&encode(&42)).unwrap_err();
        assert_eq!(err.field(), Some("cursor"));
    }
}

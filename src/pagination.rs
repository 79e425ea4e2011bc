//! Paging, shared by every paginated route: the page size, splitting the rows fetched, and
//! opaque cursors.
//!
//! A list reads `limit + 1` rows; [`split`] keeps `limit` and says whether more follow. A cursor
//! is the position of the last item of a page (whatever the list orders by), serialized as JSON
//! and base64url-encoded. Clients pass `next_cursor` back unchanged; anything else is 422 naming
//! `cursor`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ApiResult};

/// The page size: `limit` within 1..=`max` (422 naming `limit` otherwise), else `default`.
pub fn size(limit: Option<i64>, default: i64, max: i64) -> ApiResult<i64> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(
            "limit",
            format!("`limit` must be between 1 and {max}"),
        )),
    }
}

/// Splits `limit + 1` fetched rows into the page and whether more follow.
pub fn split<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > limit;
    rows.truncate(limit);
    (rows, more)
}

/// Decodes the `cursor` parameter, if any (see [`decode`]).
pub fn position<T: DeserializeOwned>(cursor: Option<&str>) -> ApiResult<Option<T>> {
    cursor.map(decode).transpose()
}

/// The `next_cursor` of a page: the position of its last item when more follow.
pub fn next<T: Serialize>(more: bool, last: Option<T>) -> Option<String> {
    more.then_some(last).flatten().map(|p| encode(&p))
}

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
    fn page_sizes_and_splits() {
        assert_eq!(size(None, 50, 200).unwrap(), 50);
        assert_eq!(size(Some(200), 50, 200).unwrap(), 200);
        for bad in [0, -1, 201] {
            assert_eq!(size(Some(bad), 50, 200).unwrap_err().field(), Some("limit"));
        }
        assert_eq!(split(vec![1, 2, 3], 2), (vec![1, 2], true));
        assert_eq!(split(vec![1, 2], 2), (vec![1, 2], false));
        assert_eq!(position::<i64>(None).unwrap(), None);
        assert_eq!(position::<i64>(Some(&encode(&7))).unwrap(), Some(7));
    }

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

//! HTTP `Range: bytes=...` for artifact reads (RFC 9110 §14): one range, a suffix (`-N`), or an
//! open end (`N-`). A header this server does not take on (another unit, several ranges, bad
//! syntax) is ignored and the whole body is served, as the RFC allows; a well-formed range that
//! misses the body entirely is 416.

/// What to answer for a `Range` header on a body of a known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// 200 with the whole body.
    Full,
    /// 206 with bytes `start..=end` (`Content-Range: bytes start-end/len`).
    Partial { start: u64, end: u64 },
    /// 416 (`Content-Range: bytes */len`).
    Unsatisfiable,
}

impl RangeAnswer {
    /// The `Content-Range` value for a 206 or 416, given the body length.
    pub fn content_range(self, len: u64) -> Option<String> {
        match self {
            RangeAnswer::Full => None,
            RangeAnswer::Partial { start, end } => Some(format!("bytes {start}-{end}/{len}")),
            RangeAnswer::Unsatisfiable => Some(format!("bytes */{len}")),
        }
    }
}

/// Decides the answer for an optional `Range` header value on a body of `len` bytes.
pub fn answer(header: Option<&str>, len: u64) -> RangeAnswer {
    let Some(header) = header else {
        return RangeAnswer::Full;
    };
    let Some(spec) = parse(header) else {
        return RangeAnswer::Full;
    };
    resolve(spec, len)
}

/// One parsed byte range before the length is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-` or `first-last`.
    From { first: u64, last: Option<u64> },
    /// `-suffix`: the last `suffix` bytes.
    Suffix(u64),
}

fn parse(header: &str) -> Option<Spec> {
    let (unit, set) = header.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let set = set.trim();
    // Several ranges would need multipart/byteranges; serving the whole body is allowed instead.
    if set.contains(',') {
        return None;
    }
    let (first, last) = set.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        return digits(last).map(Spec::Suffix);
    }
    let first = digits(first)?;
    if last.is_empty() {
        return Some(Spec::From { first, last: None });
    }
    let last = digits(last)?;
    // first > last is syntactically invalid: the header is ignored (RFC 9110 §14.1.1).
    if last < first {
        return None;
    }
    Some(Spec::From {
        first,
        last: Some(last),
    })
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn resolve(spec: Spec, len: u64) -> RangeAnswer {
    match spec {
        Spec::From { first, last } => {
            if first >= len {
                return RangeAnswer::Unsatisfiable;
            }
            let end = last.map_or(len - 1, |last| last.min(len - 1));
            RangeAnswer::Partial { start: first, end }
        }
        Spec::Suffix(suffix) => {
            if suffix == 0 || len == 0 {
                return RangeAnswer::Unsatisfiable;
            }
            RangeAnswer::Partial {
                start: len.saturating_sub(suffix),
                end: len - 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeAnswer::*;

    #[test]
    fn single_ranges() {
        assert_eq!(answer(Some("bytes=0-4"), 10), Partial { start: 0, end: 4 });
        assert_eq!(answer(Some("bytes=5-"), 10), Partial { start: 5, end: 9 });
        assert_eq!(answer(Some("bytes=-3"), 10), Partial { start: 7, end: 9 });
        assert_eq!(
            answer(Some("bytes=8-100"), 10),
            Partial { start: 8, end: 9 },
            "the end is clamped to the body"
        );
        assert_eq!(
            answer(Some("bytes=-100"), 10),
            Partial { start: 0, end: 9 },
            "a suffix longer than the body is the whole body"
        );
        assert_eq!(
            answer(Some(" Bytes = 2 - 2 "), 10),
            Partial { start: 2, end: 2 }
        );
    }

    #[test]
    fn unsatisfiable_ranges() {
        assert_eq!(answer(Some("bytes=10-"), 10), Unsatisfiable);
        assert_eq!(answer(Some("bytes=10-20"), 10), Unsatisfiable);
        assert_eq!(answer(Some("bytes=-0"), 10), Unsatisfiable);
        assert_eq!(answer(Some("bytes=0-"), 0), Unsatisfiable);
        assert_eq!(answer(Some("bytes=-5"), 0), Unsatisfiable);
        assert_eq!(Unsatisfiable.content_range(10).unwrap(), "bytes */10");
        assert_eq!(
            Partial { start: 1, end: 2 }.content_range(10).unwrap(),
            "bytes 1-2/10"
        );
        assert_eq!(Full.content_range(10), None);
    }

    #[test]
    fn headers_not_taken_on_serve_the_whole_body() {
        for header in [
            "items=0-1",
            "bytes=0-1,3-4",
            "bytes=5-2",
            "bytes=a-b",
            "bytes=-",
            "bytes=+1-2",
            "bytes",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(answer(Some(header), 10), Full, "{header}");
        }
        assert_eq!(answer(None, 10), Full);
    }
}

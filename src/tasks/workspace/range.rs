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

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use regex::Regex;

    /// The reference: what the module docs promise, written as one regular expression and
    /// arithmetic on wide integers. `[0-9]` and `[bB]...` on purpose: `\d` and `(?i)` would take
    /// other scripts' digits and the Kelvin sign.
    fn model(header: &str, len: u64) -> RangeAnswer {
        let pattern =
            Regex::new(r"^\s*[bB][yY][tT][eE][sS]\s*=\s*([0-9]*)\s*-\s*([0-9]*)\s*$").unwrap();
        let Some(caps) = pattern.captures(header) else {
            return RangeAnswer::Full;
        };
        // Numbers past u64 are not taken on (the whole body is served).
        let number = |i: usize| -> Option<Option<u128>> {
            let text = caps.get(i).map_or("", |m| m.as_str());
            if text.is_empty() {
                return Some(None);
            }
            let value: u128 = text.trim_start_matches('0').parse().unwrap_or(0);
            let fits = text.trim_start_matches('0').len() <= 20 && value <= u128::from(u64::MAX);
            fits.then_some(Some(value))
        };
        let (Some(first), Some(last)) = (number(1), number(2)) else {
            return RangeAnswer::Full;
        };
        let len = u128::from(len);
        let to_u64 = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        match (first, last) {
            (None, None) => RangeAnswer::Full,
            (None, Some(suffix)) => {
                if suffix == 0 || len == 0 {
                    RangeAnswer::Unsatisfiable
                } else {
                    RangeAnswer::Partial {
                        start: to_u64(len - suffix.min(len)),
                        end: to_u64(len - 1),
                    }
                }
            }
            (Some(first), last) => {
                if last.is_some_and(|last| last < first) {
                    RangeAnswer::Full
                } else if first >= len {
                    RangeAnswer::Unsatisfiable
                } else {
                    RangeAnswer::Partial {
                        start: to_u64(first),
                        end: to_u64(last.unwrap_or(len - 1).min(len - 1)),
                    }
                }
            }
        }
    }

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            (0u64..40).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just(u64::MAX.to_string()),
            Just("18446744073709551616".to_string()),
            Just("99999999999999999999999".to_string()),
            (0u64..40).prop_map(|n| format!("000{n}")),
            Just("+1".to_string()),
            Just("1.5".to_string()),
            Just("٣".to_string()),
        ]
    }

    fn space() -> impl Strategy<Value = &'static str> {
        prop::sample::select(&["", "", " ", "\t", "  ", "\u{a0}"][..])
    }

    /// Headers close to the grammar: units, separators, numbers and extra ranges mixed.
    fn near_header() -> impl Strategy<Value = String> {
        (
            prop::sample::select(
                &[
                    "bytes", "BYTES", "Bytes", "byte", "items", "", "bytes ", "\u{212a}",
                ][..],
            ),
            prop::sample::select(&["=", "=", "=", ":", "==", ""][..]),
            number(),
            prop::sample::select(&["-", "-", "-", "", "--", "–"][..]),
            number(),
            prop::sample::select(&["", "", "", ",", ", 0-1", ",-5"][..]),
            (space(), space(), space(), space()),
        )
            .prop_map(|(unit, eq, first, dash, last, extra, (s1, s2, s3, s4))| {
                format!("{s1}{unit}{s2}{eq}{s3}{first}{dash}{last}{extra}{s4}")
            })
    }

    fn header() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => near_header(),
            1 => any::<String>(),
            1 => "[bytes=0-9, \t-]{0,16}",
        ]
    }

    fn len() -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => 0u64..50,
            1 => any::<u64>(),
            1 => Just(u64::MAX),
        ]
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        /// Any header: no panic, a partial answer lies inside the body, and the answer is the
        /// reference model's.
        #[test]
        fn answers_match_the_model(header in header(), len in len()) {
            let got = answer(Some(&header), len);
            match got {
                RangeAnswer::Partial { start, end } => {
                    prop_assert!(start <= end && end < len, "{start}-{end} of {len}");
                    let shown = format!("bytes {start}-{end}/{len}");
                    prop_assert_eq!(got.content_range(len), Some(shown));
                }
                RangeAnswer::Unsatisfiable => {
                    prop_assert_eq!(got.content_range(len), Some(format!("bytes */{len}")));
                }
                RangeAnswer::Full => prop_assert_eq!(got.content_range(len), None),
            }
            prop_assert_eq!(got, model(&header, len), "header {:?}, length {}", header, len);
        }

        /// A well-formed range is served as asked, clamped to the body.
        #[test]
        fn well_formed_ranges_are_served(first in 0u64..100, span in 0u64..100, len in 0u64..100) {
            let last = first + span;
            let got = answer(Some(&format!("bytes={first}-{last}")), len);
            if first < len {
                prop_assert_eq!(got, RangeAnswer::Partial { start: first, end: last.min(len - 1) });
            } else {
                prop_assert_eq!(got, RangeAnswer::Unsatisfiable);
            }
            let suffix = answer(Some(&format!("bytes=-{span}")), len);
            if span == 0 || len == 0 {
                prop_assert_eq!(suffix, RangeAnswer::Unsatisfiable);
            } else {
                prop_assert_eq!(suffix, RangeAnswer::Partial { start: len - span.min(len), end: len - 1 });
            }
        }
    }
}

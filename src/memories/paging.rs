//! Cutting one page out of the stored chunks that a request overlaps. Pure: the store fetches the
//! window (consecutive chunks, joined) and these functions pick the slice, its range and the
//! parameters of the following page.

use super::chunks::{count_newlines, floor_char_boundary, next_char_boundary};

/// Consecutive chunks of one memory, joined.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    pub text: &'a str,
    /// Byte offset of `text` in the content.
    pub byte_start: u64,
    /// Line number of the first byte of `text`.
    pub line_start: u64,
}

/// Totals of the whole content.
#[derive(Debug, Clone, Copy)]
pub struct Totals {
    pub size_bytes: u64,
    pub line_count: u64,
}

/// What a page asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `limit` bytes from byte `offset`; edges move to character boundaries.
    Bytes { offset: u64, limit: u64 },
    /// `count` whole lines from line `start` (1-based).
    Lines { start: u64, count: u64 },
}

/// One page: the slice and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    pub text: &'a str,
    /// Byte range `[byte_start, byte_end)` of `text` in the content.
    pub byte_start: u64,
    pub byte_end: u64,
    /// Lines the slice touches (first and last); `None` for an empty slice.
    pub lines: Option<(u64, u64)>,
    /// The request that reads on from here; `None` at the end.
    pub next: Option<Request>,
    /// A line page stopped early because the byte cap was reached.
    pub capped: bool,
    /// A line page's only line is longer than the cap: the slice ends inside it and `next` goes on
    /// by bytes.
    pub line_split: bool,
}

impl Page<'_> {
    fn empty(at: u64) -> Self {
        Page {
            text: "",
            byte_start: at,
            byte_end: at,
            lines: None,
            next: None,
            capped: false,
            line_split: false,
        }
    }
}

fn line_of(window: &Window<'_>, rel: usize) -> u64 {
    window.line_start + count_newlines(&window.text.as_bytes()[..rel])
}

/// A byte page. Offsets inside a character move back to its first byte; an end inside a character
/// moves back too, except that a page always holds at least one character.
pub fn bytes<'a>(window: &Window<'a>, totals: Totals, offset: u64, limit: u64) -> Page<'a> {
    if offset >= totals.size_bytes || window.text.is_empty() || offset < window.byte_start {
        return Page::empty(offset.min(totals.size_bytes));
    }
    let text = window.text;
    let rel = usize::try_from(offset - window.byte_start).unwrap_or(usize::MAX);
    if rel >= text.len() {
        return Page::empty(offset);
    }
    let start = floor_char_boundary(text, rel);
    let want = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .saturating_add(start);
    let mut end = floor_char_boundary(text, want.min(text.len()));
    if end <= start {
        end = next_char_boundary(text, start);
    }
    let byte_start = window.byte_start + start as u64;
    let byte_end = window.byte_start + end as u64;
    Page {
        text: &text[start..end],
        byte_start,
        byte_end,
        lines: Some((line_of(window, start), line_of(window, end - 1))),
        next: (byte_end < totals.size_bytes).then_some(Request::Bytes {
            offset: byte_end,
            limit,
        }),
        capped: false,
        line_split: false,
    }
}

/// A line page of at most `cap` bytes: whole lines only, fewer than asked when the cap is reached
/// (`capped`), or, when the first line alone is over the cap, its first `cap` bytes (`line_split`,
/// and `next` reads on by bytes, `fallback_limit` at a time).
pub fn lines<'a>(
    window: &Window<'a>,
    totals: Totals,
    start_line: u64,
    count: u64,
    cap: u64,
    fallback_limit: u64,
) -> Page<'a> {
    if start_line > totals.line_count || window.text.is_empty() || start_line < window.line_start {
        return Page::empty(totals.size_bytes);
    }
    let text = window.text;
    let bytes = text.as_bytes();
    // Skip to the first byte of `start_line`.
    let mut start = 0;
    let mut line = window.line_start;
    while line < start_line {
        match bytes[start..].iter().position(|b| *b == b'\n') {
            Some(i) => {
                start += i + 1;
                line += 1;
            }
            None => return Page::empty(totals.size_bytes),
        }
    }
    if start >= text.len() {
        return Page::empty(totals.size_bytes);
    }
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut end = start;
    let mut taken = 0u64;
    let mut capped = false;
    while taken < count && end < text.len() {
        let line_end = match bytes[end..].iter().position(|b| *b == b'\n') {
            Some(i) => end + i + 1,
            None => text.len(),
        };
        if line_end - start > cap {
            capped = true;
            break;
        }
        end = line_end;
        taken += 1;
    }
    let byte_start = window.byte_start + start as u64;
    if taken == 0 {
        // The first line alone is over the cap: give its first `cap` bytes.
        let mut cut = floor_char_boundary(text, start.saturating_add(cap));
        if cut <= start {
            cut = next_char_boundary(text, start);
        }
        let byte_end = window.byte_start + cut as u64;
        return Page {
            text: &text[start..cut],
            byte_start,
            byte_end,
            lines: Some((start_line, start_line)),
            next: (byte_end < totals.size_bytes).then_some(Request::Bytes {
                offset: byte_end,
                limit: fallback_limit,
            }),
            capped: true,
            line_split: true,
        };
    }
    let last = start_line + taken - 1;
    Page {
        text: &text[start..end],
        byte_start,
        byte_end: window.byte_start + end as u64,
        lines: Some((start_line, last)),
        next: (last < totals.line_count).then_some(Request::Lines {
            start: last + 1,
            count,
        }),
        capped,
        line_split: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memories::chunks::line_count;

    fn whole(text: &str) -> (Window<'_>, Totals) {
        (
            Window {
                text,
                byte_start: 0,
                line_start: 1,
            },
            Totals {
                size_bytes: text.len() as u64,
                line_count: line_count(text),
            },
        )
    }

    #[test]
    fn byte_pages_never_split_characters_and_concatenate() {
        let text = "añb€c🦀d\nsecond line é\n";
        for limit in 1..8 {
            let (window, totals) = whole(text);
            let mut out = String::new();
            let mut offset = 0;
            loop {
                let page = bytes(&window, totals, offset, limit);
                assert!(!page.text.is_empty());
                out.push_str(page.text);
                match page.next {
                    Some(Request::Bytes { offset: next, .. }) => offset = next,
                    None => break,
                    other => panic!("unexpected next {other:?}"),
                }
            }
            assert_eq!(out, text, "limit {limit}");
        }
    }

    #[test]
    fn byte_offset_inside_a_character_moves_back() {
        let (window, totals) = whole("a€b");
        let page = bytes(&window, totals, 2, 1);
        assert_eq!(page.text, "€");
        assert_eq!((page.byte_start, page.byte_end), (1, 4));
    }

    #[test]
    fn byte_page_reports_lines() {
        let (window, totals) = whole("one\ntwo\nthree\n");
        let page = bytes(&window, totals, 4, 6);
        assert_eq!(page.text, "two\nth");
        assert_eq!(page.lines, Some((2, 3)));
    }

    #[test]
    fn past_the_end_is_empty() {
        let (window, totals) = whole("abc");
        let page = bytes(&window, totals, 3, 10);
        assert_eq!(page.text, "");
        assert_eq!(page.next, None);
        let page = lines(&window, totals, 2, 10, 100, 10);
        assert_eq!(page.text, "");
        assert_eq!(page.lines, None);
    }

    #[test]
    fn line_pages_walk_the_content() {
        let text = "l1\nl2\nl3\nl4\nl5";
        let (window, totals) = whole(text);
        let page = lines(&window, totals, 2, 2, 1000, 10);
        assert_eq!(page.text, "l2\nl3\n");
        assert_eq!(page.lines, Some((2, 3)));
        assert_eq!(page.next, Some(Request::Lines { start: 4, count: 2 }));
        let page = lines(&window, totals, 4, 2, 1000, 10);
        assert_eq!(page.text, "l4\nl5");
        assert_eq!(page.next, None);
    }

    #[test]
    fn line_pages_honour_the_cap() {
        let text = "aaaa\nbbbb\ncccccccccccc\n";
        let (window, totals) = whole(text);
        let page = lines(&window, totals, 1, 3, 10, 4);
        assert_eq!(page.text, "aaaa\nbbbb\n");
        assert!(page.capped && !page.line_split);
        assert_eq!(page.next, Some(Request::Lines { start: 3, count: 3 }));
        let page = lines(&window, totals, 3, 3, 10, 4);
        assert_eq!(page.text, "cccccccccc");
        assert!(page.line_split);
        assert_eq!(
            page.next,
            Some(Request::Bytes {
                offset: 20,
                limit: 4
            })
        );
    }

    #[test]
    fn windows_that_start_inside_the_content() {
        // Window of the chunk "l3\nl4\n" at byte 6, line 3.
        let window = Window {
            text: "l3\nl4\n",
            byte_start: 6,
            line_start: 3,
        };
        let totals = Totals {
            size_bytes: 14,
            line_count: 5,
        };
        let page = lines(&window, totals, 4, 1, 100, 10);
        assert_eq!(page.text, "l4\n");
        assert_eq!((page.byte_start, page.byte_end), (9, 12));
        let page = bytes(&window, totals, 7, 3);
        assert_eq!(page.text, "3\nl");
        assert_eq!(page.lines, Some((3, 4)));
    }
}

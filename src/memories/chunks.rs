//! How content is laid out in stored chunks: split after a newline into pieces of at most
//! [`CHUNK_BYTES`], each knowing its byte offset and the line numbers of its first and last byte.
//! Pure; the store writes what [`split`] returns.

/// Largest chunk, in bytes. Small enough that a page read pulls little more than the page, and a
/// search hit names a narrow line range; large enough that a 32 MiB memory is ~2k rows.
pub const CHUNK_BYTES: usize = 16 * 1024;

/// One stored piece of content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Byte offset in the content.
    pub byte_start: usize,
    /// Length in bytes (> 0).
    pub byte_len: usize,
    /// Line number (1-based) of the chunk's first byte.
    pub line_start: u64,
    /// Line number of the chunk's last byte.
    pub line_end: u64,
}

impl Chunk {
    /// The chunk's text within `content`.
    pub fn text<'a>(&self, content: &'a str) -> &'a str {
        content
            .get(self.byte_start..self.byte_start + self.byte_len)
            .unwrap_or_default()
    }
}

/// Number of lines: every `\n` ends one, and text after the last `\n` is one more. (The store
/// takes it from the last chunk's `line_end`; tests check the two agree.)
#[cfg(test)]
pub fn line_count(text: &str) -> u64 {
    let newlines = count_newlines(text.as_bytes());
    if text.is_empty() || text.ends_with('\n') {
        newlines
    } else {
        newlines + 1
    }
}

pub fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\n').count() as u64
}

/// The largest char boundary of `text` at or below `index`.
pub fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut i = index;
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary of `text` above `index` (or the end).
pub fn next_char_boundary(text: &str, index: usize) -> usize {
    let mut i = index + 1;
    while i < text.len() && !text.is_char_boundary(i) {
        i += 1;
    }
    i.min(text.len())
}

/// Splits `content` into chunks of at most `max` bytes (at least 4, one UTF-8 character), each
/// ending just after a newline when the content has one in reach; a line longer than `max` is cut
/// at a character boundary and continues in the next chunk. Concatenating the chunks gives the
/// content back.
pub fn split(content: &str, max: usize) -> Vec<Chunk> {
    let max = max.max(4);
    let bytes = content.as_bytes();
    let mut chunks = Vec::with_capacity(content.len() / max + 1);
    let mut pos = 0;
    let mut line = 1u64;
    while pos < bytes.len() {
        let limit = (pos + max).min(bytes.len());
        let end = if limit == bytes.len() {
            limit
        } else {
            match bytes[pos..limit].iter().rposition(|b| *b == b'\n') {
                Some(i) => pos + i + 1,
                None => {
                    let cut = floor_char_boundary(content, limit);
                    if cut > pos {
                        cut
                    } else {
                        next_char_boundary(content, pos)
                    }
                }
            }
        };
        let body = &bytes[pos..end];
        // Newlines before the last byte move the line number of the last byte; one at the very
        // end belongs to the last line.
        let inner = count_newlines(&body[..body.len() - 1]);
        let all = inner + u64::from(body[body.len() - 1] == b'\n');
        chunks.push(Chunk {
            byte_start: pos,
            byte_len: end - pos,
            line_start: line,
            line_end: line + inner,
        });
        line += all;
        pos = end;
    }
    chunks
}

/// Whether `key` is a valid memory key: 1 to 128 of `[A-Za-z0-9._:-]`.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(content: &str, max: usize) -> Vec<Chunk> {
        let chunks = split(content, max);
        let joined: String = chunks.iter().map(|c| c.text(content)).collect();
        assert_eq!(joined, content);
        let mut expected_start = 0;
        for chunk in &chunks {
            assert_eq!(chunk.byte_start, expected_start);
            assert!(chunk.byte_len > 0 && chunk.byte_len <= max.max(4));
            expected_start += chunk.byte_len;
            // Line numbers agree with counting from the start.
            let before = &content[..chunk.byte_start];
            assert_eq!(chunk.line_start, count_newlines(before.as_bytes()) + 1);
            let last = chunk.byte_start + chunk.byte_len - 1;
            assert_eq!(
                chunk.line_end,
                count_newlines(&content.as_bytes()[..last]) + 1
            );
        }
        if let Some(last) = chunks.last() {
            assert_eq!(last.line_end, line_count(content));
        }
        chunks
    }

    #[test]
    fn lines_are_counted_like_an_editor() {
        assert_eq!(line_count(""), 0);
        assert_eq!(line_count("a"), 1);
        assert_eq!(line_count("a\n"), 1);
        assert_eq!(line_count("a\nb"), 2);
        assert_eq!(line_count("\n\n"), 2);
    }

    #[test]
    fn splits_after_newlines() {
        let chunks = check("aa\nbb\ncc\n", 7);
        assert_eq!(
            chunks,
            vec![
                Chunk {
                    byte_start: 0,
                    byte_len: 6,
                    line_start: 1,
                    line_end: 2
                },
                Chunk {
                    byte_start: 6,
                    byte_len: 3,
                    line_start: 3,
                    line_end: 3
                },
            ]
        );
    }

    #[test]
    fn long_lines_continue_on_char_boundaries() {
        let content = "ééééé\nx";
        let chunks = check(content, 5);
        assert_eq!(chunks[0].byte_len, 4);
        assert_eq!(chunks[1].line_start, 1, "a continued line keeps its number");
        assert_eq!(chunks.last().map(|c| c.line_end), Some(2));
        check("🦀🦀🦀", 4);
        check("🦀🦀🦀", 5);
    }

    #[test]
    fn keys() {
        assert!(valid_key("cmd_log-1.2:x"));
        assert!(!valid_key(""));
        assert!(!valid_key("a b"));
        assert!(!valid_key("ключ"));
        assert!(!valid_key(&"k".repeat(129)));
        assert!(valid_key(&"k".repeat(128)));
    }

    proptest! {
        #[test]
        fn any_text_round_trips(text in "(\\PC|\n){0,200}", max in 4usize..40) {
            check(&text, max);
        }
    }
}

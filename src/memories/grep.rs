//! Grep over content that arrives chunk by chunk: [`Lines`] reassembles lines across chunk edges,
//! [`Grep`] collects matching lines with context. Pure; the store feeds it the chunks in order.

use std::collections::VecDeque;

use regex::{Regex, RegexBuilder};

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Lines in the answer are cut to this many bytes (flagged `truncated`).
pub const MAX_LINE_BYTES: usize = 2000;

/// Compiles a user pattern with bounded compiled size. The `regex` crate has no backtracking, so
/// matching time is linear in the input whatever the pattern.
pub fn compile(pattern: &str, ignore_case: bool) -> Result<Regex, String> {
    if pattern.is_empty() {
        return Err("pattern must not be empty".into());
    }
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "pattern is {} bytes; at most {MAX_PATTERN_BYTES} are accepted",
            pattern.len()
        ));
    }
    RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .size_limit(1 << 20)
        .dfa_size_limit(4 << 20)
        .nest_limit(64)
        .build()
        .map_err(|err| format!("invalid regular expression: {err}"))
}

/// One line of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: u64,
    pub text: String,
    /// The line was longer than [`MAX_LINE_BYTES`] and `text` is its beginning.
    pub truncated: bool,
}

impl Line {
    fn new(number: u64, text: &str) -> Self {
        let text = text.strip_suffix('\r').unwrap_or(text);
        let cut = super::chunks::floor_char_boundary(text, MAX_LINE_BYTES);
        Line {
            number,
            text: text[..cut].to_owned(),
            truncated: cut < text.len(),
        }
    }
}

/// A matching line with the lines around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub line: Line,
    pub before: Vec<Line>,
    pub after: Vec<Line>,
}

/// The outcome of a grep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub matches: Vec<Match>,
    /// Matching lines in the whole content, including those past `max_matches`.
    pub total_matches: u64,
    /// More lines matched than were returned.
    pub truncated: bool,
}

/// Collects matches as lines are fed in order.
pub struct Grep<'r> {
    regex: &'r Regex,
    context: usize,
    max_matches: usize,
    before: VecDeque<Line>,
    matches: Vec<Match>,
    total: u64,
}

impl<'r> Grep<'r> {
    pub fn new(regex: &'r Regex, context: usize, max_matches: usize) -> Self {
        Grep {
            regex,
            context,
            max_matches,
            before: VecDeque::with_capacity(context + 1),
            matches: Vec::new(),
            total: 0,
        }
    }

    /// Feeds line `number` (without its newline).
    pub fn line(&mut self, number: u64, text: &str) {
        // After-context of the matches still waiting for it.
        if self.context > 0 {
            for m in self.matches.iter_mut().rev() {
                if number > m.line.number + self.context as u64 {
                    break;
                }
                if m.after.len() < self.context {
                    m.after.push(Line::new(number, text));
                }
            }
        }
        let hay = text.strip_suffix('\r').unwrap_or(text);
        if self.regex.is_match(hay) {
            self.total += 1;
            if self.matches.len() < self.max_matches {
                self.matches.push(Match {
                    line: Line::new(number, text),
                    before: self.before.iter().cloned().collect(),
                    after: Vec::new(),
                });
            }
        }
        // Before-context is only needed while matches are still being collected.
        if self.context > 0 && self.matches.len() < self.max_matches {
            if self.before.len() == self.context {
                self.before.pop_front();
            }
            self.before.push_back(Line::new(number, text));
        }
    }

    pub fn finish(self) -> Outcome {
        Outcome {
            truncated: self.total > self.matches.len() as u64,
            matches: self.matches,
            total_matches: self.total,
        }
    }
}

/// Reassembles lines from text that arrives in pieces, numbering them from 1.
#[derive(Default)]
pub struct Lines {
    partial: String,
    number: u64,
}

impl Lines {
    /// Calls `each(number, line)` for every line completed by `piece`.
    pub fn push(&mut self, piece: &str, mut each: impl FnMut(u64, &str)) {
        let mut rest = piece;
        while let Some(i) = rest.find('\n') {
            self.number += 1;
            if self.partial.is_empty() {
                each(self.number, &rest[..i]);
            } else {
                self.partial.push_str(&rest[..i]);
                each(self.number, &self.partial);
                self.partial.clear();
            }
            rest = &rest[i + 1..];
        }
        self.partial.push_str(rest);
    }

    /// Calls `each` for a last line that had no newline.
    pub fn finish(mut self, mut each: impl FnMut(u64, &str)) {
        if !self.partial.is_empty() {
            self.number += 1;
            each(self.number, &self.partial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grep(text: &str, pieces: usize, pattern: &str, context: usize, max: usize) -> Outcome {
        let regex = compile(pattern, false).unwrap();
        let mut grep = Grep::new(&regex, context, max);
        let mut lines = Lines::default();
        let step = text.len().div_ceil(pieces.max(1)).max(1);
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + step).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            lines.push(&text[start..end], |n, l| grep.line(n, l));
            start = end;
        }
        lines.finish(|n, l| grep.line(n, l));
        grep.finish()
    }

    fn numbers(lines: &[Line]) -> Vec<u64> {
        lines.iter().map(|l| l.number).collect()
    }

    #[test]
    fn matches_with_context_across_pieces() {
        let text = "a\nb\nERROR x\nc\nd\ne\nERROR y\nf";
        for pieces in [1, 3, 7, 40] {
            let out = grep(text, pieces, "ERROR", 2, 10);
            assert_eq!(out.total_matches, 2);
            assert!(!out.truncated);
            assert_eq!(out.matches[0].line.number, 3);
            assert_eq!(out.matches[0].line.text, "ERROR x");
            assert_eq!(numbers(&out.matches[0].before), vec![1, 2]);
            assert_eq!(numbers(&out.matches[0].after), vec![4, 5]);
            assert_eq!(numbers(&out.matches[1].before), vec![5, 6]);
            assert_eq!(numbers(&out.matches[1].after), vec![8]);
        }
    }

    #[test]
    fn counts_past_the_limit_and_flags_truncation() {
        let text = "x1\nx2\nx3\nx4\n";
        let out = grep(text, 1, "x", 1, 2);
        assert_eq!(out.matches.len(), 2);
        assert_eq!(out.total_matches, 4);
        assert!(out.truncated);
        assert_eq!(numbers(&out.matches[1].after), vec![3]);
    }

    #[test]
    fn long_lines_are_cut_and_flagged() {
        let text = format!("{}é\n", "é".repeat(MAX_LINE_BYTES));
        let out = grep(&text, 5, "é", 0, 1);
        assert!(out.matches[0].line.truncated);
        assert!(out.matches[0].line.text.len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn crlf_lines_match_at_end() {
        let out = grep("abc\r\ndef\r\n", 1, "c$", 0, 5);
        assert_eq!(out.total_matches, 1);
        assert_eq!(out.matches[0].line.text, "abc");
    }

    #[test]
    fn bad_and_huge_patterns_are_refused() {
        assert!(compile("(", false).is_err());
        assert!(compile("", false).is_err());
        assert!(compile(&"a".repeat(MAX_PATTERN_BYTES + 1), false).is_err());
        // Compiles to far more than the size limit.
        assert!(compile("\\w{1000}\\w{1000}\\w{1000}", false).is_err());
        assert!(compile("(?i)error", false).is_ok());
    }
}

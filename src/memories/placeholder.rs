//! The text an agent's context keeps instead of the content: the placeholder
//! `[MemoryRef: <key> - <summary>]`, the deterministic summary (no model involved), and the line
//! capture puts in the context. Pure; no I/O.

/// Longest summary, in characters; the placeholder is meant to cost a few dozen tokens.
pub const SUMMARY_MAX_CHARS: usize = 240;
/// Longest quoted line inside a summary.
const QUOTE_MAX_CHARS: usize = 80;

/// `[MemoryRef: <key> - <summary>]`, exactly.
pub fn placeholder(key: &str, summary: &str) -> String {
    format!("[MemoryRef: {key} - {summary}]")
}

/// Text made safe to sit inside a placeholder: ANSI escape sequences dropped, control characters
/// and runs of whitespace turned into one space, square brackets into parentheses (so the
/// placeholder's own brackets stay unambiguous), trimmed and cut to `max` characters with `…`.
pub fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4 + 8));
    let mut count = 0usize;
    let mut pending_space = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI sequence: ESC [ parameters, then a final character in @..~
            if chars.peek() == Some(&'[') {
                chars.next();
                for f in chars.by_ref() {
                    if ('@'..='~').contains(&f) {
                        break;
                    }
                }
            }
            continue;
        }
        let c = match c {
            '[' => '(',
            ']' => ')',
            c if c.is_whitespace() || c.is_control() => ' ',
            c => c,
        };
        if c == ' ' {
            pending_space = count > 0;
            continue;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
        if count > max {
            break;
        }
    }
    if count <= max {
        return out;
    }
    let cut: String = out.chars().take(max.saturating_sub(1)).collect();
    let mut cut = cut.trim_end().to_owned();
    cut.push('…');
    cut
}

/// What a scan of the content found for the summary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    /// First line with a letter or digit in it, cleaned.
    pub first_line: Option<String>,
    /// Lines that look like errors, and the first of them (line number, cleaned text).
    pub errors: u64,
    pub first_error: Option<(u64, String)>,
    /// Lines that look like warnings (and not errors), and the first of them.
    pub warnings: u64,
    pub first_warning: Option<(u64, String)>,
}

const ERROR_WORDS: &[&str] = &[
    "error",
    "errors",
    "err",
    "fatal",
    "panic",
    "panicked",
    "exception",
    "traceback",
    "failed",
    "failure",
    "critical",
    "segfault",
];
const WARNING_WORDS: &[&str] = &["warn", "warning", "warnings", "deprecated"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    None,
    Warning,
    Error,
}

/// Classifies one line by its words (case-insensitive). A word preceded by `0`, `no` or `without`
/// does not count, so `0 errors, 0 warnings` and `no errors found` are not errors.
fn severity(line: &str) -> Severity {
    let mut found = Severity::None;
    let mut previous = "";
    for word in line
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let negated = previous == "0"
            || previous.eq_ignore_ascii_case("no")
            || previous.eq_ignore_ascii_case("without");
        if !negated {
            if ERROR_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w)) {
                return Severity::Error;
            }
            if WARNING_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w)) {
                found = Severity::Warning;
            }
        }
        previous = word;
    }
    found
}

/// Case-insensitive fragments every error or warning word contains (`err` for error/errors/err,
/// `fail` for failed/failure, ...): a fast pre-filter so [`severity`] runs only on lines that can
/// match, which matters for 32 MiB of log.
const CANDIDATES: &str =
    "(?i)err|fatal|panic|exception|traceback|fail|critical|segfault|warn|deprecated";

fn candidates() -> Option<&'static regex::bytes::Regex> {
    static RE: std::sync::OnceLock<Option<regex::bytes::Regex>> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::bytes::Regex::new(CANDIDATES).ok())
        .as_ref()
}

/// One pass over the content for [`summarize`].
pub fn scan(content: &str) -> Scan {
    let mut scan = Scan {
        first_line: content
            .lines()
            .find(|line| line.chars().any(char::is_alphanumeric))
            .map(|line| clean(line, QUOTE_MAX_CHARS)),
        ..Scan::default()
    };
    let bytes = content.as_bytes();
    let mut record = |number: u64, line: &str| match severity(line) {
        Severity::Error => {
            scan.errors += 1;
            if scan.first_error.is_none() {
                scan.first_error = Some((number, clean(line, QUOTE_MAX_CHARS)));
            }
        }
        Severity::Warning => {
            scan.warnings += 1;
            if scan.first_warning.is_none() {
                scan.first_warning = Some((number, clean(line, QUOTE_MAX_CHARS)));
            }
        }
        Severity::None => {}
    };
    let Some(re) = candidates() else {
        for (index, line) in content.lines().enumerate() {
            record(index as u64 + 1, line);
        }
        return scan;
    };
    // Walk the candidate matches; each line is classified once, numbered by counting newlines
    // since the previous candidate line.
    let mut line_number = 1u64;
    let mut counted_to = 0usize;
    let mut line_start = 0usize;
    let mut next_line = 0usize;
    for m in re.find_iter(bytes) {
        if m.start() < next_line {
            continue;
        }
        for (i, b) in bytes[counted_to..m.start()].iter().enumerate() {
            if *b == b'\n' {
                line_number += 1;
                line_start = counted_to + i + 1;
            }
        }
        counted_to = m.start();
        let line_end = bytes[m.start()..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| m.start() + i);
        if let Some(line) = content.get(line_start..line_end) {
            record(line_number, line);
        }
        next_line = line_end + 1;
    }
    scan
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// `512 B`, `1.5 KiB`, `5.0 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{} {many}", thousands(n))
    }
}

/// The deterministic summary: the command (when given), the first meaningful line, size and line
/// count, and for logs the number of error and warning lines with the first of each, e.g.
/// `npm install: "added 3 packages" (5.0 MiB, 70,001 lines; 1 error line, first at line 69,990:
/// "ERROR connect ECONNREFUSED"; 2 warning lines)`.
pub fn summarize(command: Option<&str>, scan: &Scan, size_bytes: u64, line_count: u64) -> String {
    let mut out = String::new();
    if let Some(command) = command.map(|c| clean(c, QUOTE_MAX_CHARS))
        && !command.is_empty()
    {
        out.push_str(&command);
        out.push_str(": ");
    }
    match &scan.first_line {
        Some(line) => out.push_str(&format!("\"{line}\" ")),
        None => out.push_str("(blank) "),
    }
    out.push('(');
    out.push_str(&human_size(size_bytes));
    out.push_str(", ");
    out.push_str(&plural(line_count, "line", "lines"));
    if scan.errors > 0 {
        out.push_str("; ");
        out.push_str(&plural(scan.errors, "error line", "error lines"));
        if let Some((line, text)) = &scan.first_error {
            if scan.errors > 1 {
                out.push_str(", first");
            }
            out.push_str(&format!(" at line {}: \"{text}\"", thousands(*line)));
        }
    }
    if scan.warnings > 0 {
        out.push_str("; ");
        out.push_str(&plural(scan.warnings, "warning line", "warning lines"));
        if scan.errors == 0
            && let Some((line, text)) = &scan.first_warning
        {
            if scan.warnings > 1 {
                out.push_str(", first");
            }
            out.push_str(&format!(" at line {}: \"{text}\"", thousands(*line)));
        }
    }
    out.push(')');
    clean(&out, SUMMARY_MAX_CHARS)
}

/// The line capture hands back for the agent's context in place of the output.
pub fn context_line(command: Option<&str>, exit_code: Option<i64>, placeholder: &str) -> String {
    let command = command.map(|c| clean(c, QUOTE_MAX_CHARS));
    match (command.as_deref().filter(|c| !c.is_empty()), exit_code) {
        (Some(command), Some(code)) => {
            format!("Command '{command}' exited with {code}; its output is stored in {placeholder}")
        }
        (Some(command), None) => {
            format!("Command '{command}' ran; its output is stored in {placeholder}")
        }
        (None, _) => format!("Output stored in {placeholder}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_is_exact() {
        assert_eq!(
            placeholder("cmd_log_123", "npm install output"),
            "[MemoryRef: cmd_log_123 - npm install output]"
        );
    }

    #[test]
    fn clean_strips_controls_brackets_and_ansi() {
        assert_eq!(
            clean("  \u{1b}[31mERROR\u{1b}[0m  [main]\tfailed\r\n", 100),
            "ERROR (main) failed"
        );
        assert_eq!(clean("", 10), "");
    }

    #[test]
    fn clean_cuts_on_characters_with_an_ellipsis() {
        let cut = clean("ééééééééé", 5);
        assert_eq!(cut, "éééé…");
        assert_eq!(cut.chars().count(), 5);
        assert_eq!(clean("abcde", 5), "abcde");
        assert_eq!(clean("abc def ghi", 8), "abc def…");
    }

    #[test]
    fn severity_ignores_zero_counts() {
        assert_eq!(severity("Found 0 errors."), Severity::None);
        assert_eq!(severity("no errors, 2 warnings"), Severity::Warning);
        assert_eq!(severity("npm ERR! code ELIFECYCLE"), Severity::Error);
        assert_eq!(
            severity("thread 'main' panicked at src/x.rs"),
            Severity::Error
        );
        assert_eq!(severity("WARN deprecated inflight"), Severity::Warning);
        assert_eq!(severity("terror is not a word match"), Severity::None);
    }

    #[test]
    fn scan_finds_first_meaningful_line_and_first_error() {
        let log = "\n   \n---\nStarting build\nwarning: unused variable\nok\nerror[E0308]: mismatched types\nerror: aborting\n";
        let found = scan(log);
        assert_eq!(found.first_line.as_deref(), Some("Starting build"));
        assert_eq!(found.errors, 2);
        assert_eq!(
            found.first_error,
            Some((7, "error(E0308): mismatched types".into()))
        );
        assert_eq!(found.warnings, 1);
        assert_eq!(found.first_warning.as_ref().map(|w| w.0), Some(5));
    }

    #[test]
    fn scan_numbers_candidate_lines_right() {
        let log = "ok\nterror\nfine\nx ERR! y\n\nwarn a\nwarn b ERROR\nlast";
        let found = scan(log);
        assert_eq!(found.errors, 2);
        assert_eq!(found.first_error, Some((4, "x ERR! y".into())));
        assert_eq!(found.warnings, 1);
        assert_eq!(found.first_warning, Some((6, "warn a".into())));
        let found = scan("error at the very start");
        assert_eq!(found.first_error.map(|e| e.0), Some(1));
    }

    #[test]
    fn summary_reads_well() {
        let found = scan("added 3 packages\nERROR connect ECONNREFUSED\n");
        assert_eq!(
            summarize(Some("npm install"), &found, 5 * 1024 * 1024, 70_001),
            "npm install: \"added 3 packages\" (5.0 MiB, 70,001 lines; 1 error line at line 2: \"ERROR connect ECONNREFUSED\")"
        );
        let found = scan("plain text\n");
        assert_eq!(
            summarize(None, &found, 11, 1),
            "\"plain text\" (11 B, 1 line)"
        );
        let found = scan("a\nwarn: x\nwarn: y\n");
        assert_eq!(
            summarize(None, &found, 2048, 3),
            "\"a\" (2.0 KiB, 3 lines; 2 warning lines, first at line 2: \"warn: x\")"
        );
    }

    #[test]
    fn summary_is_bounded() {
        let long = "x".repeat(10_000);
        let found = scan(&format!("{long}\nerror {long}\n"));
        let summary = summarize(Some(&long), &found, 20_000, 2);
        assert!(summary.chars().count() <= SUMMARY_MAX_CHARS);
        assert!(!summary.contains('[') && !summary.contains(']'));
    }

    #[test]
    fn numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.5 KiB");
    }

    #[test]
    fn context_lines() {
        let p = placeholder("k", "s");
        assert_eq!(
            context_line(Some("make"), Some(2), &p),
            "Command 'make' exited with 2; its output is stored in [MemoryRef: k - s]"
        );
        assert_eq!(
            context_line(None, None, &p),
            "Output stored in [MemoryRef: k - s]"
        );
    }
}

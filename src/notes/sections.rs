//! Markdown section editing for long-term notes: pure text logic, no I/O.
//!
//! # What a section is
//! Headings are found by a real CommonMark parser (pulldown-cmark, with source offsets), so:
//! - ATX (`## Title`) and setext (`Title` underlined with `===` or `---`) headings both count;
//! - a `#` line inside a fenced or indented code block, an HTML block or a paragraph is not a heading;
//! - only top-level headings count: a heading inside a block quote or a list item is part of the
//!   text of the section it sits in.
//!
//! A section starts at the first byte of its heading line and runs to just before the next heading
//! of the same or a higher level (fewer `#`s), or to the end of the notes. It therefore contains its
//! subsections. Its *body* is everything after the heading block (the heading line, or the two or
//! more lines of a setext heading) up to the end of the section.
//!
//! # Matching a `section_header`
//! The header is trimmed and compared case-insensitively (Unicode lower case, runs of whitespace
//! collapsed to one space) with each heading's text: its rendered text (`**Tea** time` is
//! `Tea time`) or its source text (`**Tea** time`). Written with leading `#`s followed by a space
//! (`## Preferences`), the heading must also have that level; setext headings have level 1 (`===`)
//! or 2 (`---`). No match is [`SectionError::NotFound`] (carrying the list of headings), more than
//! one is [`SectionError::Ambiguous`] (carrying the matches and their line numbers).
//!
//! # Edits
//! - [`replace_section`] keeps the heading and replaces the body with `content`, unless `content`
//!   itself starts with a heading (its first non-blank line is a heading), which then replaces the
//!   heading too. With `upsert`, a header that matches nothing appends a new section at the end of
//!   the notes (heading level from the header's `#`s, else level 2).
//! - [`delete_section`] removes the heading and the whole body, subsections included.
//! - [`append`] and [`prepend`] join `content` to the notes on a new line.
//!
//! Inserted text always ends with a line break, written in the notes' own style (`\r\n` when the
//! first line of the notes ends with one, else `\n`). Bytes outside the edited range are copied
//! untouched: CRLF, emoji, trailing spaces, a missing final newline. An edit that would change how
//! the rest of the notes parse (a `content` with an unclosed ``` fence swallowing later headings,
//! a paragraph merging into a setext heading) is first retried with a blank line at the seam, and
//! refused with [`SectionError::BreaksStructure`] if that does not help.

use std::borrow::Cow;
use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// A top-level heading of a Markdown document, with its byte offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1 to 6.
    pub level: u8,
    /// Rendered text, trimmed, whitespace runs collapsed.
    pub text: String,
    /// Source text of the heading's inline content (`**Tea** time`), trimmed.
    pub source: String,
    /// Byte offset of the start of the heading's first line.
    pub start: usize,
    /// Byte offset just after the heading block and its line break: where the body starts.
    pub body_start: usize,
    /// 1-based line number of the heading's first line.
    pub line: usize,
}

impl Heading {
    /// The heading as an ATX line without the line break (`## Preferences`), whatever its syntax.
    pub fn display(&self) -> String {
        format!("{} {}", "#".repeat(usize::from(self.level)), self.text)
    }
}

/// A section: a heading and everything up to the next heading of the same or a higher level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub heading: Heading,
    /// Byte offset just past the section (the next such heading's start, or the document's end).
    pub end: usize,
}

impl Section {
    /// The whole section, heading included.
    pub fn range(&self) -> Range<usize> {
        self.heading.start..self.end
    }

    /// The section without its heading block.
    pub fn body_range(&self) -> Range<usize> {
        self.heading.body_start..self.end
    }
}

/// A heading reported by a failed lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadingRef {
    /// `## Preferences`.
    pub heading: String,
    pub line: usize,
}

/// Why a section operation could not be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SectionError {
    /// The header is empty once trimmed and stripped of its `#`s.
    EmptyHeader,
    /// No heading matches; every heading of the notes, in order.
    NotFound { headings: Vec<HeadingRef> },
    /// More than one heading matches; the matches, in order.
    Ambiguous { matches: Vec<HeadingRef> },
    /// The edit would change how text outside the edited range parses.
    BreaksStructure,
}

/// The result of a section edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionEdit {
    /// The whole new document.
    pub notes: String,
    /// The heading that was edited, deleted or added (`## Preferences`).
    pub heading: String,
    /// Characters removed (the old body, or the whole old section when the heading was replaced or
    /// the section deleted).
    pub removed_chars: usize,
    /// Characters written (including a line break added at the end).
    pub inserted_chars: usize,
    /// True when `upsert` added a new section because none matched.
    pub created: bool,
}

/// A parsed `section_header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderQuery {
    /// The level demanded by leading `#`s, if any.
    pub level: Option<u8>,
    /// The text as written (trimmed), for new headings.
    pub text: String,
    /// The normalised text compared with headings.
    key: String,
}

impl HeaderQuery {
    /// Parses a header; [`SectionError::EmptyHeader`] when nothing is left to match.
    pub fn parse(header: &str) -> Result<HeaderQuery, SectionError> {
        let trimmed = header.trim();
        let hashes = trimmed.bytes().take_while(|b| *b == b'#').count();
        let rest = &trimmed[hashes..];
        let (level, text) = if (1..=6).contains(&hashes)
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            (u8::try_from(hashes).ok(), strip_closing_hashes(rest.trim()))
        } else {
            (None, trimmed)
        };
        let key = normalise(text);
        if key.is_empty() {
            return Err(SectionError::EmptyHeader);
        }
        Ok(HeaderQuery {
            level,
            text: text.to_owned(),
            key,
        })
    }

    fn matches(&self, heading: &Heading) -> bool {
        self.level.is_none_or(|level| level == heading.level)
            && (normalise(&heading.text) == self.key || normalise(&heading.source) == self.key)
    }
}

/// `Title ##` is `Title` (an ATX closing sequence), `C#` stays `C#`.
fn strip_closing_hashes(text: &str) -> &str {
    let without = text.trim_end_matches('#');
    if without.len() < text.len() && (without.is_empty() || without.ends_with(char::is_whitespace))
    {
        without.trim_end()
    } else {
        text
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A top-level heading while its events are read.
struct OpenHeading {
    level: u8,
    /// The heading element's source range.
    block: Range<usize>,
    /// Rendered text so far.
    text: String,
    /// Source range of the inline content so far.
    inline: Option<Range<usize>>,
}

/// Every top-level heading of `doc`, in order.
pub fn headings(doc: &str) -> Vec<Heading> {
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut open: Option<OpenHeading> = None;
    for (event, range) in Parser::new_ext(doc, Options::empty()).into_offset_iter() {
        match &event {
            Event::Start(Tag::Heading { level, .. }) if depth == 0 => {
                open = Some(OpenHeading {
                    level: *level as u8,
                    block: range,
                    text: String::new(),
                    inline: None,
                });
                depth = 1;
                continue;
            }
            Event::End(TagEnd::Heading(_)) if depth == 1 => {
                depth = 0;
                if let Some(OpenHeading {
                    level,
                    block,
                    text,
                    inline,
                }) = open.take()
                {
                    let start = line_start(doc, block.start);
                    let body_start = if ends_line(doc, block.end) {
                        block.end
                    } else {
                        after_line(doc, block.end)
                    };
                    found.push(Heading {
                        level,
                        text: text.split_whitespace().collect::<Vec<_>>().join(" "),
                        source: inline.map_or("", |r| doc[r].trim()).to_owned(),
                        start,
                        body_start,
                        line: line_number(doc, start),
                    });
                }
                continue;
            }
            Event::Start(_) => depth += 1,
            Event::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
        // Inside a top-level heading: collect its rendered text and the source span of its inlines.
        if let Some(heading) = open.as_mut() {
            match &event {
                Event::Text(t) | Event::Code(t) | Event::InlineHtml(t) | Event::Html(t) => {
                    heading.text.push_str(t);
                }
                Event::SoftBreak | Event::HardBreak => heading.text.push(' '),
                _ => {}
            }
            heading.inline = Some(match heading.inline.take() {
                Some(r) => r.start.min(range.start)..r.end.max(range.end),
                None => range,
            });
        }
    }
    found
}

/// Every section of `doc`, in heading order (a section's subsections follow it).
pub fn sections(doc: &str) -> Vec<Section> {
    let all = headings(doc);
    all.iter()
        .enumerate()
        .map(|(i, heading)| Section {
            heading: heading.clone(),
            end: all[i + 1..]
                .iter()
                .find(|next| next.level <= heading.level)
                .map_or(doc.len(), |next| next.start),
        })
        .collect()
}

/// The one section `header` names.
pub fn find(doc: &str, header: &str) -> Result<Section, SectionError> {
    let query = HeaderQuery::parse(header)?;
    find_query(doc, &query)
}

fn find_query(doc: &str, query: &HeaderQuery) -> Result<Section, SectionError> {
    let all = sections(doc);
    let mut matching: Vec<Section> = all
        .iter()
        .filter(|s| query.matches(&s.heading))
        .cloned()
        .collect();
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 => Err(SectionError::NotFound {
            headings: all.iter().map(|s| heading_ref(&s.heading)).collect(),
        }),
        _ => Err(SectionError::Ambiguous {
            matches: matching.iter().map(|s| heading_ref(&s.heading)).collect(),
        }),
    }
}

fn heading_ref(heading: &Heading) -> HeadingRef {
    HeadingRef {
        heading: heading.display(),
        line: heading.line,
    }
}

/// The body of the section `header` names (its text without the heading block).
pub fn read_section<'a>(doc: &'a str, header: &str) -> Result<&'a str, SectionError> {
    let section = find(doc, header)?;
    Ok(&doc[section.body_range()])
}

/// Replaces the body of the section `header` names (or the whole section when `content` starts
/// with a heading); with `upsert`, adds the section at the end when none matches. See the module
/// docs.
pub fn replace_section(
    doc: &str,
    header: &str,
    content: &str,
    upsert: bool,
) -> Result<SectionEdit, SectionError> {
    let query = HeaderQuery::parse(header)?;
    let eol = line_ending(doc);
    let heading_content = leading_heading(content);
    let section = match find_query(doc, &query) {
        Ok(section) => section,
        Err(SectionError::NotFound { .. }) if upsert => {
            return add_section(doc, &query, content, eol);
        }
        Err(err) => return Err(err),
    };
    let (old, insert, new_heading) = match &heading_content {
        Some((offset, heading)) => (
            section.range(),
            terminated(&content[*offset..], eol),
            Some(heading.display()),
        ),
        None => {
            let mut insert = terminated(content, eol);
            // The body starts on a new line: after a heading on the last line without a line
            // break, and after a `\r` alone that a leading `\n` would turn into one `\r\n`.
            let at = section.heading.body_start;
            if !insert.is_empty() && at > 0 {
                if !ends_line(doc, at) {
                    insert = Cow::Owned(format!("{eol}{insert}"));
                } else if doc[..at].ends_with('\r') && insert.starts_with('\n') {
                    insert = Cow::Owned(format!("\n{insert}"));
                }
            }
            (section.body_range(), insert, None)
        }
    };
    let removed_chars = doc[old.clone()].chars().count();
    let notes = splice_checked(doc, old, &insert, new_heading.is_some(), eol)?;
    Ok(SectionEdit {
        notes,
        heading: new_heading.unwrap_or_else(|| section.heading.display()),
        removed_chars,
        inserted_chars: insert.chars().count(),
        created: false,
    })
}

/// Removes the section `header` names, subsections included.
pub fn delete_section(doc: &str, header: &str) -> Result<SectionEdit, SectionError> {
    let section = find(doc, header)?;
    let range = section.range();
    let removed_chars = doc[range.clone()].chars().count();
    let notes = splice_checked(doc, range, "", false, line_ending(doc))?;
    Ok(SectionEdit {
        notes,
        heading: section.heading.display(),
        removed_chars,
        inserted_chars: 0,
        created: false,
    })
}

/// `doc` followed by `content` on a new line; `content` gets a final line break.
pub fn append(doc: &str, content: &str) -> String {
    let eol = line_ending(doc);
    let mut out = String::with_capacity(doc.len() + content.len() + 4);
    out.push_str(doc);
    if !doc.is_empty() && !doc.ends_with('\n') && !content.is_empty() {
        out.push_str(eol);
    }
    out.push_str(&terminated(content, eol));
    out
}

/// `content` (given a final line break) followed by `doc`.
pub fn prepend(doc: &str, content: &str) -> String {
    let eol = line_ending(if doc.is_empty() { content } else { doc });
    let mut out = String::with_capacity(doc.len() + content.len() + 4);
    out.push_str(&terminated(content, eol));
    out.push_str(doc);
    out
}

/// `\r\n` when the first line of `doc` ends with one, else `\n`.
pub fn line_ending(doc: &str) -> &'static str {
    match doc.find('\n') {
        Some(i) if i > 0 && doc.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// `text` with a final line break (none added to empty text).
fn terminated<'a>(text: &'a str, eol: &str) -> Cow<'a, str> {
    if text.is_empty() || text.ends_with('\n') {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{text}{eol}"))
    }
}

/// When the first non-blank line of `content` is a heading: the offset of that line and the heading.
fn leading_heading(content: &str) -> Option<(usize, Heading)> {
    let first = headings(content).into_iter().next()?;
    content[..first.start]
        .chars()
        .all(char::is_whitespace)
        .then_some((first.start, first))
}

fn add_section(
    doc: &str,
    query: &HeaderQuery,
    content: &str,
    eol: &str,
) -> Result<SectionEdit, SectionError> {
    let (block, heading) = match leading_heading(content) {
        Some((offset, heading)) => (
            terminated(&content[offset..], eol).into_owned(),
            heading.display(),
        ),
        None => {
            let hashes = "#".repeat(usize::from(query.level.unwrap_or(2)));
            let line = format!("{hashes} {}", query.text);
            (format!("{line}{eol}{}", terminated(content, eol)), line)
        }
    };
    let separator = if doc.is_empty() || doc.ends_with("\n\n") || doc.ends_with("\n\r\n") {
        ""
    } else if doc.ends_with('\n') {
        eol
    } else {
        // Both line breaks: end the last line, then leave a blank one.
        if eol == "\r\n" { "\r\n\r\n" } else { "\n\n" }
    };
    let insert = format!("{separator}{block}");
    let notes = format!("{doc}{insert}");
    let start = doc.len() + separator.len();
    if !parses_as_expected(doc, &notes, doc.len()..doc.len(), start..notes.len(), true) {
        return Err(SectionError::BreaksStructure);
    }
    Ok(SectionEdit {
        notes,
        heading,
        removed_chars: 0,
        inserted_chars: insert.chars().count(),
        created: true,
    })
}

/// Replaces `old` with `insert`, checking that everything outside keeps its headings; retries with
/// a blank line at either seam before giving up.
fn splice_checked(
    doc: &str,
    old: Range<usize>,
    insert: &str,
    heading_first: bool,
    eol: &str,
) -> Result<String, SectionError> {
    let has_before = old.start > 0;
    let has_after = old.end < doc.len();
    for (lead, trail) in [(false, false), (false, true), (true, false), (true, true)] {
        if (lead && !has_before) || (trail && !has_after) {
            continue;
        }
        let mut middle = String::with_capacity(insert.len() + 4);
        if lead {
            middle.push_str(eol);
        }
        middle.push_str(insert);
        if trail {
            middle.push_str(eol);
        }
        let notes = format!("{}{middle}{}", &doc[..old.start], &doc[old.end..]);
        let inserted = old.start..old.start + middle.len();
        // With a leading blank line the new heading starts one line later.
        let heading_at = if lead {
            old.start + eol.len()
        } else {
            old.start
        };
        if parses_as_expected(
            doc,
            &notes,
            old.clone(),
            heading_at..inserted.end,
            heading_first,
        ) {
            return Ok(notes);
        }
    }
    Err(SectionError::BreaksStructure)
}

/// True when `new` (= `old` with `old_range` replaced by text at `new_range`) has exactly the
/// headings of `old` before and after the edit (same levels, texts and shifted offsets), and, when
/// `heading_first`, a heading starting at `new_range.start`.
fn parses_as_expected(
    old: &str,
    new: &str,
    old_range: Range<usize>,
    new_range: Range<usize>,
    heading_first: bool,
) -> bool {
    let key = |h: &Heading, shift: isize| (h.level, h.text.clone(), h.start as isize + shift);
    let old_headings = headings(old);
    let before_old: Vec<_> = old_headings
        .iter()
        .filter(|h| h.start < old_range.start)
        .map(|h| key(h, 0))
        .collect();
    let after_old: Vec<_> = old_headings
        .iter()
        .filter(|h| h.start >= old_range.end)
        .map(|h| key(h, new_range.end as isize - old_range.end as isize))
        .collect();
    let new_headings = headings(new);
    let before_new: Vec<_> = new_headings
        .iter()
        .filter(|h| h.start < new_range.start)
        .map(|h| key(h, 0))
        .collect();
    let after_new: Vec<_> = new_headings
        .iter()
        .filter(|h| h.start >= new_range.end)
        .map(|h| key(h, 0))
        .collect();
    let first_ok = !heading_first || new_headings.iter().any(|h| h.start == new_range.start);
    before_old == before_new && after_old == after_new && first_ok
}

// Line breaks are `\n`, `\r\n` and, as CommonMark has it, a `\r` alone.

/// The start of the line `offset` is on.
fn line_start(doc: &str, offset: usize) -> usize {
    doc[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1)
}

/// Whether `offset` is just after a line break (and not between the `\r` and `\n` of one).
fn ends_line(doc: &str, offset: usize) -> bool {
    let before = &doc.as_bytes()[..offset];
    before.ends_with(b"\n") || (before.ends_with(b"\r") && !doc[offset..].starts_with('\n'))
}

/// The offset just after the line break at or after `offset` (the end of `doc` when none).
fn after_line(doc: &str, offset: usize) -> usize {
    match doc[offset..].find(['\n', '\r']) {
        Some(i) if doc[offset + i..].starts_with("\r\n") => offset + i + 2,
        Some(i) => offset + i + 1,
        None => doc.len(),
    }
}

/// The 1-based number of the line starting at `offset`.
fn line_number(doc: &str, offset: usize) -> usize {
    let text = &doc[..offset];
    text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titles(doc: &str) -> Vec<(u8, String)> {
        headings(doc)
            .into_iter()
            .map(|h| (h.level, h.text))
            .collect()
    }

    fn replaced(doc: &str, header: &str, content: &str) -> String {
        replace_section(doc, header, content, false).unwrap().notes
    }

    #[test]
    fn nested_levels_contain_their_subsections() {
        let doc = "# Top\nt\n## Sub1\ns1\n### Deep\nd\n## Sub2\ns2\n# Other\no\n";
        assert_eq!(
            titles(doc),
            vec![
                (1, "Top".into()),
                (2, "Sub1".into()),
                (3, "Deep".into()),
                (2, "Sub2".into()),
                (1, "Other".into())
            ]
        );
        assert_eq!(read_section(doc, "sub1").unwrap(), "s1\n### Deep\nd\n");
        assert_eq!(
            read_section(doc, "top").unwrap(),
            "t\n## Sub1\ns1\n### Deep\nd\n## Sub2\ns2\n"
        );
        assert_eq!(read_section(doc, "Other").unwrap(), "o\n");
        assert_eq!(
            delete_section(doc, "Sub1").unwrap().notes,
            "# Top\nt\n## Sub2\ns2\n# Other\no\n"
        );
        assert_eq!(
            replaced(doc, "deep", "D"),
            "# Top\nt\n## Sub1\ns1\n### Deep\nD\n## Sub2\ns2\n# Other\no\n"
        );
    }

    #[test]
    fn hashes_in_code_are_not_headings() {
        let doc = "## A\n```sh\n# not a heading\n## nor this\n```\n    # indented code\n## B\nb\n";
        assert_eq!(titles(doc), vec![(2, "A".into()), (2, "B".into())]);
        assert_eq!(
            read_section(doc, "A").unwrap(),
            "```sh\n# not a heading\n## nor this\n```\n    # indented code\n"
        );
        assert!(matches!(
            find(doc, "not a heading"),
            Err(SectionError::NotFound { .. })
        ));
        assert_eq!(replaced(doc, "a", "new"), "## A\nnew\n## B\nb\n");
    }

    #[test]
    fn headings_in_quotes_and_lists_belong_to_their_section() {
        let doc = "## Real\n> # quoted\n- # in a list\n\n## Next\n";
        assert_eq!(titles(doc), vec![(2, "Real".into()), (2, "Next".into())]);
        assert_eq!(
            read_section(doc, "real").unwrap(),
            "> # quoted\n- # in a list\n\n"
        );
    }

    #[test]
    fn setext_headings_count_with_their_level() {
        let doc = "Title\n=====\nintro\n\nSub\n---\nbody\n\nMore\n----\nm\n";
        assert_eq!(
            titles(doc),
            vec![(1, "Title".into()), (2, "Sub".into()), (2, "More".into())]
        );
        assert_eq!(read_section(doc, "## sub").unwrap(), "body\n\n");
        assert!(matches!(
            find(doc, "# sub"),
            Err(SectionError::NotFound { .. })
        ));
        // `B` right above `More` would make them one setext heading: a blank line keeps them apart.
        assert_eq!(
            replaced(doc, "Sub", "B"),
            "Title\n=====\nintro\n\nSub\n---\nB\n\nMore\n----\nm\n"
        );
        assert_eq!(
            replaced(doc, "Sub", "B\n\n"),
            "Title\n=====\nintro\n\nSub\n---\nB\n\nMore\n----\nm\n"
        );
        let multi_line = "First\nline\n===\nx\n";
        assert_eq!(titles(multi_line), vec![(1, "First line".into())]);
        assert_eq!(read_section(multi_line, "first   LINE").unwrap(), "x\n");
    }

    #[test]
    fn duplicate_headings_are_ambiguous_unless_the_level_decides() {
        let doc = "## Tea\na\n## Tea\nb\n";
        assert_eq!(
            find(doc, "tea"),
            Err(SectionError::Ambiguous {
                matches: vec![
                    HeadingRef {
                        heading: "## Tea".into(),
                        line: 1
                    },
                    HeadingRef {
                        heading: "## Tea".into(),
                        line: 3
                    }
                ]
            })
        );
        let doc = "# Tea\na\n## Tea\nb\n";
        assert!(matches!(
            find(doc, "tea"),
            Err(SectionError::Ambiguous { .. })
        ));
        assert_eq!(read_section(doc, "## Tea").unwrap(), "b\n");
        assert_eq!(read_section(doc, "# TEA").unwrap(), "a\n## Tea\nb\n");
    }

    #[test]
    fn not_found_lists_every_heading() {
        let doc = "# Notes\n## Prefs\nSetext\n---\n";
        let Err(SectionError::NotFound { headings }) = find(doc, "missing") else {
            panic!("expected NotFound");
        };
        let shown: Vec<_> = headings.iter().map(|h| h.heading.as_str()).collect();
        assert_eq!(shown, vec!["# Notes", "## Prefs", "## Setext"]);
        assert_eq!(headings[2].line, 3);
        assert!(matches!(
            find("", "x"),
            Err(SectionError::NotFound { headings }) if headings.is_empty()
        ));
    }

    #[test]
    fn empty_headers_are_refused() {
        for header in ["", "   ", "##", "## ", "# ##"] {
            assert_eq!(
                find("# a\n", header),
                Err(SectionError::EmptyHeader),
                "{header:?}"
            );
        }
    }

    #[test]
    fn header_forms() {
        let doc = "## **Tea** time\nt\n## C#\nc\n## Closed ##\nx\n#hashtag\n";
        assert_eq!(read_section(doc, "tea time").unwrap(), "t\n");
        assert_eq!(read_section(doc, "**TEA** time").unwrap(), "t\n");
        assert_eq!(read_section(doc, "  ##   Tea   time  ").unwrap(), "t\n");
        assert_eq!(read_section(doc, "c#").unwrap(), "c\n");
        assert_eq!(read_section(doc, "## C#").unwrap(), "c\n");
        assert_eq!(read_section(doc, "closed").unwrap(), "x\n#hashtag\n");
        assert_eq!(read_section(doc, "## closed ##").unwrap(), "x\n#hashtag\n");
    }

    #[test]
    fn empty_sections() {
        let doc = "## A\n## B\nb\n## C";
        assert_eq!(read_section(doc, "A").unwrap(), "");
        assert_eq!(read_section(doc, "C").unwrap(), "");
        assert_eq!(replaced(doc, "A", "x"), "## A\nx\n## B\nb\n## C");
        assert_eq!(replaced(doc, "B", ""), "## A\n## B\n## C");
        // A heading on the last line without a line break still gets its body on the next line.
        assert_eq!(replaced(doc, "C", "c"), "## A\n## B\nb\n## C\nc\n");
    }

    #[test]
    fn no_trailing_newline() {
        let doc = "## A\na\n## B\nb";
        assert_eq!(read_section(doc, "B").unwrap(), "b");
        assert_eq!(replaced(doc, "B", "new"), "## A\na\n## B\nnew\n");
        assert_eq!(replaced(doc, "A", "new"), "## A\nnew\n## B\nb");
        assert_eq!(delete_section(doc, "B").unwrap().notes, "## A\na\n");
        assert_eq!(delete_section(doc, "A").unwrap().notes, "## B\nb");
    }

    #[test]
    fn crlf_survives_outside_the_edit() {
        let doc = "# N\r\n\r\n## A\r\na\r\n## B\r\nb  \r\n";
        assert_eq!(read_section(doc, "a").unwrap(), "a\r\n");
        assert_eq!(
            replaced(doc, "a", "x"),
            "# N\r\n\r\n## A\r\nx\r\n## B\r\nb  \r\n"
        );
        assert_eq!(
            delete_section(doc, "a").unwrap().notes,
            "# N\r\n\r\n## B\r\nb  \r\n"
        );
        let setext = "T\r\n===\r\nbody\r\n";
        assert_eq!(read_section(setext, "t").unwrap(), "body\r\n");
    }

    #[test]
    fn a_lone_carriage_return_ends_a_line() {
        // CommonMark ends a line at `\r` alone too: the `!` line is a setext heading of its own,
        // after the ATX heading, not part of the ATX heading's line.
        let doc = "## A\r!\n===\nbody\n";
        assert_eq!(titles(doc), vec![(2, "A".into()), (1, "!".into())]);
        let all = headings(doc);
        assert_eq!((all[0].start, all[0].body_start, all[0].line), (0, 5, 1));
        assert_eq!((all[1].start, all[1].body_start, all[1].line), (5, 11, 2));
        assert_eq!(read_section(doc, "A").unwrap(), "");
        assert_eq!(read_section(doc, "!").unwrap(), "body\n");
        // `a` right above `!` would make them one setext heading: a blank line keeps them apart.
        assert_eq!(replaced(doc, "A", "a"), "## A\ra\n\n!\n===\nbody\n");
        assert_eq!(delete_section(doc, "A").unwrap().notes, "!\n===\nbody\n");
        let crlf = "## A\r\nx\r## B\r";
        assert_eq!(titles(crlf), vec![(2, "A".into()), (2, "B".into())]);
        assert_eq!(read_section(crlf, "A").unwrap(), "x\r");
        assert_eq!(read_section(crlf, "B").unwrap(), "");
        assert_eq!(headings(crlf)[1].line, 3);
        // A body starting with `\n` after a heading ending in `\r` keeps its blank line.
        let edit = replace_section("## A\rold\n", "A", "\nx", false).unwrap();
        assert_eq!(edit.notes, "## A\r\n\nx\n");
        assert_eq!(read_section(&edit.notes, "A").unwrap(), "\nx\n");
    }

    #[test]
    fn unicode_and_emoji() {
        let doc = "## 🍵 Tea\nlikes 🍵\n## ÜNÏCODE straße\nß 日本\n## Last 👍";
        assert_eq!(read_section(doc, "🍵 TEA").unwrap(), "likes 🍵\n");
        assert_eq!(read_section(doc, "ünïcode STRASSE").ok(), None);
        assert_eq!(read_section(doc, "ünïcode straße").unwrap(), "ß 日本\n");
        assert_eq!(read_section(doc, "last 👍").unwrap(), "");
        let edit = replace_section(doc, "🍵 tea", "新しい 🎉", false).unwrap();
        assert_eq!(
            edit.notes,
            "## 🍵 Tea\n新しい 🎉\n## ÜNÏCODE straße\nß 日本\n## Last 👍"
        );
        assert_eq!(edit.removed_chars, "likes 🍵\n".chars().count());
        assert_eq!(edit.inserted_chars, 6);
        assert_eq!(edit.heading, "## 🍵 Tea");
    }

    #[test]
    fn content_starting_with_a_heading_replaces_the_heading() {
        let doc = "## A\na\n## B\nb\n";
        let edit = replace_section(doc, "A", "\n### A2\nnew", false).unwrap();
        assert_eq!(edit.notes, "### A2\nnew\n## B\nb\n");
        assert_eq!(edit.heading, "### A2");
        // Text before the heading means it is body text.
        assert_eq!(
            replaced(doc, "A", "x\n### A2\n"),
            "## A\nx\n### A2\n## B\nb\n"
        );
    }

    #[test]
    fn upsert_adds_a_section_at_the_end() {
        let edit = replace_section("# Notes\nintro", "Prefs", "tea", true).unwrap();
        assert!(edit.created);
        assert_eq!(edit.notes, "# Notes\nintro\n\n## Prefs\ntea\n");
        assert_eq!(edit.heading, "## Prefs");
        let edit = replace_section("a\r\n", "### Deep", "d", true).unwrap();
        assert_eq!(edit.notes, "a\r\n\r\n### Deep\r\nd\r\n");
        let edit = replace_section("", "x", "# Own heading\nbody", true).unwrap();
        assert_eq!(edit.notes, "# Own heading\nbody\n");
        assert_eq!(edit.heading, "# Own heading");
        // Without upsert, a missing section stays an error; an existing one is replaced.
        assert!(matches!(
            replace_section("a\n", "x", "y", false),
            Err(SectionError::NotFound { .. })
        ));
        let edit = replace_section("## X\nold\n", "x", "y", true).unwrap();
        assert!(!edit.created);
        assert_eq!(edit.notes, "## X\ny\n");
        // An unclosed fence at the end would swallow the new heading.
        assert_eq!(
            replace_section("```\ncode\n", "x", "y", true),
            Err(SectionError::BreaksStructure)
        );
    }

    #[test]
    fn edits_that_would_change_other_sections_are_refused_or_repaired() {
        let doc = "## A\na\n## B\nb\n";
        assert_eq!(
            replace_section(doc, "A", "```\nopen fence", false),
            Err(SectionError::BreaksStructure)
        );
        // A paragraph right before a setext heading would merge into it; a blank line keeps it.
        let doc = "## A\npara\n# Del\nx\n\nB\n===\nb\n";
        assert_eq!(
            delete_section(doc, "del").unwrap().notes,
            "## A\npara\n\nB\n===\nb\n"
        );
        let doc = "## A\na\n\nB\n===\n";
        assert_eq!(replaced(doc, "A", "text"), "## A\ntext\n\nB\n===\n");
    }

    #[test]
    fn append_and_prepend_start_on_a_new_line() {
        assert_eq!(append("", "a"), "a\n");
        assert_eq!(append("x", "a"), "x\na\n");
        assert_eq!(append("x\n", "a\n"), "x\na\n");
        assert_eq!(append("x\r\ny", "a"), "x\r\ny\r\na\r\n");
        assert_eq!(append("x", ""), "x");
        assert_eq!(prepend("x\n", "a"), "a\nx\n");
        assert_eq!(prepend("", "a"), "a\n");
        assert_eq!(prepend("x\r\n", "a"), "a\r\nx\r\n");
        assert_eq!(prepend("🍵", "👍"), "👍\n🍵");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const WORDS: &[&str] = &[
        "tea",
        "Café",
        "🍵",
        "日本語",
        "x#y",
        "straße",
        "👍🏽",
        "a.b",
        "C#",
        "end##",
        "`#`",
    ];

    fn line() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(WORDS), 1..5).prop_map(|w| w.join(" "))
    }

    /// A body block: a paragraph, or a fence whose lines start with `#`.
    fn block() -> impl Strategy<Value = Vec<String>> {
        prop_oneof![
            prop::collection::vec(line(), 1..3),
            prop::collection::vec(line(), 0..3).prop_map(|lines| {
                let mut fence = vec!["```".to_owned()];
                fence.extend(lines.into_iter().map(|l| format!("# {l}")));
                fence.push("```".to_owned());
                fence
            }),
        ]
    }

    /// (level 1..=3, setext, body blocks) per section.
    fn outline() -> impl Strategy<Value = Vec<(u8, bool, Vec<Vec<String>>)>> {
        prop::collection::vec(
            (1u8..=3, any::<bool>(), prop::collection::vec(block(), 0..3)),
            1..7,
        )
    }

    fn build(outline: &[(u8, bool, Vec<Vec<String>>)], eol: &str, final_eol: bool) -> String {
        let mut doc = String::new();
        for (i, (level, setext, blocks)) in outline.iter().enumerate() {
            if *setext && *level <= 2 {
                let underline = if *level == 1 { "===" } else { "---" };
                doc.push_str(&format!("Sec{i}{eol}{underline}{eol}"));
            } else {
                doc.push_str(&format!("{} Sec{i}{eol}", "#".repeat(usize::from(*level))));
            }
            for block in blocks {
                for l in block {
                    doc.push_str(l);
                    doc.push_str(eol);
                }
                doc.push_str(eol);
            }
        }
        if !final_eol {
            while doc.ends_with(['\r', '\n']) {
                doc.pop();
            }
        }
        doc
    }

    /// Replacement text: lines, fences with `#` lines, and level-4 subheadings (deeper than any
    /// target), never starting with a heading.
    fn content() -> impl Strategy<Value = String> {
        (
            line(),
            prop::collection::vec(
                prop_oneof![
                    line(),
                    line().prop_map(|l| format!("#### {l}")),
                    block().prop_map(|b| b.join("\n")),
                    Just(String::new()),
                ],
                0..4,
            ),
            prop_oneof![Just(""), Just("\n"), Just("\r\n")],
        )
            .prop_map(|(first, rest, end)| {
                let mut text = first;
                for l in rest {
                    text.push('\n');
                    text.push_str(&l);
                }
                text.push_str(end);
                text
            })
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        #[test]
        fn replace_then_read_returns_the_body_and_keeps_other_sections(
            outline in outline(),
            crlf in any::<bool>(),
            final_eol in any::<bool>(),
            pick in any::<prop::sample::Index>(),
            content in content(),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let doc = build(&outline, eol, final_eol);
            let target = pick.index(outline.len());
            let header = format!("sec{target}");
            let old = find(&doc, &header).unwrap();
            let edit = replace_section(&doc, &header, &content, false).unwrap();
            let new = edit.notes.as_str();

            let body = read_section(new, &header).unwrap();
            let expected = terminated(&content, line_ending(&doc)).into_owned();
            prop_assert!(
                body == expected || body == format!("{expected}{}", line_ending(&doc)),
                "body {body:?} expected {expected:?}\nold doc {doc:?}\nnew doc {new:?}"
            );
            prop_assert!(new.starts_with(&doc[..old.heading.body_start]));
            prop_assert!(new.ends_with(&doc[old.end..]));
            for other in sections(&doc) {
                let disjoint = other.end <= old.heading.start || other.heading.start >= old.end;
                if !disjoint {
                    continue;
                }
                let now = find(new, &other.heading.text).unwrap();
                prop_assert_eq!(&new[now.range()], &doc[other.range()]);
            }
        }

        #[test]
        fn delete_removes_the_section_and_keeps_the_others(
            outline in outline(),
            crlf in any::<bool>(),
            final_eol in any::<bool>(),
            pick in any::<prop::sample::Index>(),
        ) {
            let doc = build(&outline, if crlf { "\r\n" } else { "\n" }, final_eol);
            let target = pick.index(outline.len());
            let header = format!("SEC{target}");
            let old = find(&doc, &header).unwrap();
            let edit = delete_section(&doc, &header).unwrap();
            let new = edit.notes.as_str();
            let is_not_found = matches!(find(new, &header), Err(SectionError::NotFound { .. }));
            prop_assert!(is_not_found);
            prop_assert!(new.starts_with(&doc[..old.heading.start]));
            for other in sections(&doc) {
                if other.end <= old.heading.start || other.heading.start >= old.end {
                    let now = find(new, &other.heading.text).unwrap();
                    prop_assert_eq!(&new[now.range()], &doc[other.range()]);
                }
            }
        }
    }
}

/// Properties over arbitrary Markdown: generated from a pool of tricky lines (headings of every
/// form, fences, quotes, lists, HTML, setext underlines, CRLF, emoji) or plain arbitrary strings.
#[cfg(test)]
mod arbitrary_markdown {
    use super::*;
    use proptest::prelude::*;

    const LINES: &[&str] = &[
        "# A",
        "## A",
        "### a",
        "## B",
        "# B ##",
        "## Tea time",
        "### **Tea** time",
        "#### Deep",
        "####### seven",
        "#",
        "##",
        "#A",
        "## C#",
        "   ## indented A",
        "    # code",
        "\t# tab",
        "A",
        "B",
        "Tea",
        "===",
        "---",
        "***",
        "- - -",
        "```",
        "~~~",
        "```md",
        "> # quoted",
        "> A",
        "- # item",
        "1. ## B",
        "<div>",
        "</div>",
        "<!-- # x -->",
        "",
        "",
        "   ",
        "text 🍵 straße",
        "trailing  ",
        "[A]: /url",
        "| # | A |",
        "## A \\",
        "ü",
        "\u{a0}# nbsp",
    ];

    /// Markdown from the line pool, with `\n`, `\r\n` or mixed line breaks and an optional final
    /// one.
    fn markdown() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(prop::sample::select(LINES), 0..24),
            0u8..3,
            any::<bool>(),
            prop::collection::vec(prop::sample::select(&["\n", "\r\n", "\r"][..]), 24),
        )
            .prop_map(|(lines, style, final_eol, mixed)| {
                // All `\n`, all `\r\n`, or a mix with the odd `\r` alone.
                let eol = |i: usize| match style {
                    0 => "\n",
                    1 => "\r\n",
                    _ => mixed[i % mixed.len()],
                };
                let mut doc = String::new();
                for (i, line) in lines.iter().enumerate() {
                    if i > 0 {
                        doc.push_str(eol(i));
                    }
                    doc.push_str(line);
                }
                if final_eol && !doc.is_empty() {
                    doc.push_str(eol(0));
                }
                doc
            })
    }

    fn doc() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => markdown(),
            2 => any::<String>(),
            // Markdown with an arbitrary string spliced in somewhere.
            2 => (markdown(), any::<String>(), any::<prop::sample::Index>()).prop_map(
                |(doc, junk, at)| {
                    let cuts: Vec<usize> = doc
                        .char_indices()
                        .map(|(i, _)| i)
                        .chain([doc.len()])
                        .collect();
                    let at = cuts[at.index(cuts.len())];
                    format!("{}{junk}{}", &doc[..at], &doc[at..])
                }
            ),
        ]
    }

    fn header() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(&[
                "A", "a", "# A", "## A", "### A", "B", "## B", "tea time", "**Tea** time",
                "Deep", "c#", "## C#", "#", "", "  ", "A ##", "#A", "seven", "Tea",
            ][..]).prop_map(str::to_owned),
            1 => any::<String>(),
        ]
    }

    /// Notes and a header that, most of the time, names one of their headings (by its text, its
    /// source or its `##` form).
    fn doc_and_header() -> impl Strategy<Value = (String, String)> {
        doc().prop_flat_map(|doc| {
            let mut names: Vec<String> = Vec::new();
            for h in headings(&doc) {
                names.push(h.display());
                names.push(h.text.to_uppercase());
                names.push(h.source.clone());
            }
            let picked = if names.is_empty() {
                header().boxed()
            } else {
                prop_oneof![3 => prop::sample::select(names), 1 => header()].boxed()
            };
            (Just(doc), picked)
        })
    }

    fn content() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => markdown(),
            1 => any::<String>(),
            1 => Just(String::new()),
        ]
    }

    /// Whether `new` is `prefix`, then `eol` up to `lead` times, `middle`, `eol` up to `trail`
    /// times, then `suffix`.
    fn spliced(
        new: &str,
        prefix: &str,
        middle: &str,
        suffix: &str,
        eol: &str,
        lead: usize,
        trail: usize,
    ) -> bool {
        (0..=lead).any(|k| {
            (0..=trail).any(|m| {
                let expected =
                    format!("{prefix}{}{middle}{}{suffix}", eol.repeat(k), eol.repeat(m));
                new == expected
            })
        })
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        /// Headings and sections are well-formed ranges of the document on character boundaries.
        #[test]
        fn sections_are_ranges_of_the_document(doc in doc()) {
            let all = sections(&doc);
            let mut last_start = None;
            for section in &all {
                let h = &section.heading;
                prop_assert!((1..=6).contains(&h.level));
                prop_assert!(h.start <= h.body_start && h.body_start <= section.end);
                prop_assert!(section.end <= doc.len());
                prop_assert!(doc.is_char_boundary(h.start));
                prop_assert!(doc.is_char_boundary(h.body_start));
                prop_assert!(doc.is_char_boundary(section.end));
                prop_assert!(h.start == 0 || matches!(doc.as_bytes()[h.start - 1], b'\n' | b'\r'));
                prop_assert!(last_start.is_none_or(|s| s < h.start), "headings in order");
                last_start = Some(h.start);
                let lines = doc[..h.start].replace("\r\n", "\n").replace('\r', "\n");
                prop_assert_eq!(h.line, lines.matches('\n').count() + 1);
            }
            // A section ends at a heading of the same or a higher level, or at the end.
            for section in &all {
                if section.end < doc.len() {
                    let next = all.iter().find(|s| s.heading.start == section.end);
                    prop_assert!(next.is_some_and(|n| n.heading.level <= section.heading.level));
                }
            }
        }

        /// No operation panics, whatever the notes, header and content.
        #[test]
        fn no_operation_panics(
            (doc, header) in doc_and_header(),
            content in content(),
            upsert in any::<bool>(),
        ) {
            let _ = headings(&doc);
            let _ = find(&doc, &header);
            let _ = read_section(&doc, &header);
            let _ = replace_section(&doc, &header, &content, upsert);
            let _ = delete_section(&doc, &header);
            let _ = append(&doc, &content);
            let _ = prepend(&doc, &content);
            let _ = HeaderQuery::parse(&header);
        }

        /// Reading returns exactly the section's body; the lookup errors are consistent.
        #[test]
        fn read_returns_the_body_of_the_one_match((doc, header) in doc_and_header()) {
            match (read_section(&doc, &header), find(&doc, &header)) {
                (Ok(body), Ok(section)) => prop_assert_eq!(body, &doc[section.body_range()]),
                (Err(a), Err(b)) => {
                    prop_assert_eq!(&a, &b);
                    if let SectionError::NotFound { headings: listed } = &a {
                        prop_assert_eq!(listed.len(), headings(&doc).len());
                    }
                    if let SectionError::Ambiguous { matches } = &a {
                        prop_assert!(matches.len() >= 2);
                    }
                }
                (a, b) => prop_assert!(false, "read {a:?} but find {b:?}"),
            }
        }

        /// Replacing keeps every byte before the section's heading and after its end; the new
        /// body is the content (with a final line break) and at most a line break at each seam;
        /// when the content brings no heading, reading the section gives that body back.
        #[test]
        fn replace_touches_only_the_section(
            (doc, header) in doc_and_header(),
            content in content(),
            upsert in any::<bool>(),
        ) {
            let eol = line_ending(&doc);
            let found = find(&doc, &header);
            let Ok(edit) = replace_section(&doc, &header, &content, upsert) else {
                return Ok(());
            };
            let new = edit.notes.as_str();
            if edit.created {
                prop_assert!(upsert);
                let is_not_found = matches!(found, Err(SectionError::NotFound { .. }));
                prop_assert!(is_not_found);
                prop_assert!(new.starts_with(&doc));
                prop_assert_eq!(edit.removed_chars, 0);
                prop_assert_eq!(edit.inserted_chars, new[doc.len()..].chars().count());
                let body = match leading_heading(&content) {
                    Some((offset, _)) => terminated(&content[offset..], eol),
                    None => terminated(&content, eol),
                };
                prop_assert!(new.ends_with(&*body));
                return Ok(());
            }
            let section = found.expect("an edit that created nothing found its section");
            let suffix = &doc[section.end..];
            prop_assert!(new.ends_with(suffix), "suffix lost: {doc:?} -> {new:?}");
            match leading_heading(&content) {
                Some((offset, _)) => {
                    let middle = terminated(&content[offset..], eol);
                    prop_assert!(
                        spliced(new, &doc[..section.heading.start], &middle, suffix, eol, 1, 1),
                        "{doc:?} -> {new:?}"
                    );
                    prop_assert_eq!(edit.removed_chars, doc[section.range()].chars().count());
                }
                None => {
                    let middle = terminated(&content, eol);
                    let prefix = &doc[..section.heading.body_start];
                    prop_assert!(
                        spliced(new, prefix, &middle, suffix, eol, 2, 1)
                            || spliced(new, prefix, &format!("\n{middle}"), suffix, eol, 1, 1),
                        "{doc:?} -> {new:?}"
                    );
                    prop_assert_eq!(edit.removed_chars, doc[section.body_range()].chars().count());
                    let inserted = &new[prefix.len()..new.len() - suffix.len()];
                    let brings_heading = headings(new)
                        .iter()
                        .any(|h| h.start >= prefix.len() && h.start < new.len() - suffix.len());
                    if !brings_heading {
                        // The body read back is the content, give or take a blank line at a seam;
                        // only a line break ending the heading's line may precede it.
                        let body = read_section(new, &header);
                        prop_assert!(body.is_ok(), "{body:?}: {doc:?} -> {new:?}");
                        let body = body.unwrap_or_default();
                        prop_assert!(
                            spliced(body, "", &middle, "", eol, 1, 1),
                            "read {body:?} after writing {middle:?}: {doc:?} -> {new:?}"
                        );
                        prop_assert!(inserted.ends_with(body));
                        let before = &inserted[..inserted.len() - body.len()];
                        prop_assert!(matches!(before, "" | "\n" | "\r\n"), "{before:?}");
                    }
                }
            }
        }

        /// Deleting removes the section and nothing else: the bytes before and after stay, the
        /// header no longer matches, and every section outside it is byte-identical (the one just
        /// before may gain the blank line that keeps the next heading a heading).
        #[test]
        fn delete_touches_only_the_section((doc, header) in doc_and_header()) {
            let eol = line_ending(&doc);
            let Ok(edit) = delete_section(&doc, &header) else {
                return Ok(());
            };
            let new = edit.notes.as_str();
            let old = find(&doc, &header).expect("a deleted section was found");
            let (prefix, suffix) = (&doc[..old.heading.start], &doc[old.end..]);
            prop_assert!(spliced(new, prefix, "", suffix, eol, 1, 1), "{doc:?} -> {new:?}");
            prop_assert_eq!(edit.removed_chars, doc[old.range()].chars().count());
            let is_not_found = matches!(find(new, &header), Err(SectionError::NotFound { .. }));
            prop_assert!(is_not_found, "{doc:?} -> {new:?}");
            let seam = &new[prefix.len()..new.len() - suffix.len()];
            let removed = old.end - old.heading.start;
            let after = sections(new);
            for other in sections(&doc) {
                let inside = other.heading.start >= old.heading.start && other.heading.start < old.end;
                if inside {
                    continue; // deleted with it
                }
                let at = if other.heading.start >= old.end {
                    other.heading.start - removed + seam.len()
                } else {
                    other.heading.start
                };
                let now = after.iter().find(|s| s.heading.start == at);
                prop_assert!(now.is_some(), "section at {} lost: {doc:?} -> {new:?}", other.heading.start);
                let now = &new[now.map_or(0..0, Section::range)];
                let was = &doc[other.range()];
                let expected = if other.end <= old.heading.start {
                    // Before it: the same, or with the seam's blank line when it ended there.
                    if other.end == old.heading.start { format!("{was}{seam}") } else { was.to_owned() }
                } else if other.heading.start >= old.end {
                    was.to_owned()
                } else {
                    // An enclosing section loses exactly the deleted bytes.
                    let cut = old.heading.start - other.heading.start;
                    format!("{}{seam}{}", &was[..cut], &was[cut + removed..])
                };
                prop_assert_eq!(now, expected, "{:?} -> {:?}", doc, new);
            }
        }

        /// Append and prepend keep the notes whole and add the content on its own line.
        #[test]
        fn append_and_prepend_keep_the_notes(doc in doc(), content in content()) {
            let eol = line_ending(&doc);
            let added = append(&doc, &content);
            prop_assert!(added.starts_with(&doc));
            if content.is_empty() {
                prop_assert_eq!(&added, &doc);
            } else {
                let body = terminated(&content, eol);
                prop_assert!(spliced(&added, &doc, &body, "", eol, 1, 0));
                let joined = &added[..added.len() - body.len()];
                prop_assert!(joined.is_empty() || joined.ends_with('\n'));
            }
            let front = prepend(&doc, &content);
            prop_assert!(front.ends_with(&doc));
            let body = &front[..front.len() - doc.len()];
            prop_assert!(body.starts_with(&content));
            prop_assert!(body.is_empty() || body.ends_with('\n'));
            prop_assert!(body.len() <= content.len() + 2);
        }
    }
}

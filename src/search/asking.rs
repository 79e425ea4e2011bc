//! Whether a text asks, as a search's lifts read it (see
//! [`crate::search::fusion::lift_by_neighbours`]): the same answers as the SQL functions
//! `mnemo_ends_asking` and `mnemo_only_asks`, computed by the server where it writes a memory,
//! so that the write stores them with it. Only a text's end is read, and all of it only when it
//! ends with a question.

/// The blanks trimmed from a text's end before its last character is read.
const TRAILING: [char; 4] = [' ', '\t', '\r', '\n'];

/// Whether `c` is white space to PostgreSQL's regular expressions (`\s`) in the database's C
/// locale: space, tab, line feed, vertical tab, form feed, carriage return.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

/// Whether a text ends with a question ("How often do you play?", and "I quit. Did you hear?"
/// too), trailing blanks aside: `mnemo_ends_asking`.
pub fn ends_asking(text: &str) -> bool {
    text.trim_end_matches(TRAILING).ends_with('?')
}

/// Whether a text only asks: it ends with a question and no sentence in it ends otherwise (no
/// `.` or `!` before white space or the end): `mnemo_only_asks`.
pub fn only_asks(text: &str) -> bool {
    ends_asking(text) && !ends_a_sentence(text)
}

/// Whether a `.` or `!` in `text` stands before white space or the end. The trailing blanks are
/// white space, so the text need not be trimmed first.
fn ends_a_sentence(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '.' | '!') && chars.peek().is_none_or(|next| is_space(*next)) {
            return true;
        }
    }
    false
}

/// Whether a memory whose content is `chunks` (its chunks' texts, in order) only asks and
/// whether it ends with a question: a memory of one chunk whose text does; a longer one neither.
pub fn memory_asks(chunks: &[&str]) -> (bool, bool) {
    match chunks {
        [only] => {
            let ends = ends_asking(only);
            (ends && !ends_a_sentence(only), ends)
        }
        _ => (false, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of the SQL functions' own test, with the same answers.
    const CASES: [(&str, bool, bool); 16] = [
        ("How often do you play?", true, true),
        ("How often do you play?  \r\n\t", true, true),
        ("I quit. Did you hear?", false, true),
        ("Wow! Really?", false, true),
        ("Really?!", false, false),
        ("Is 3.5 enough?", true, true),
        ("e.g. what?", false, true),
        ("Who? Me?", true, true),
        ("?", true, true),
        ("", false, false),
        ("   ", false, false),
        ("A statement.", false, false),
        ("Ends with a question mark? No, it does not", false, false),
        ("Done.\x0Bwhat now?", false, true),
        ("¿Qué tal? ¡Bien!\u{a0}¿Y tú?", true, true),
        ("Wait…\u{3000}why?", true, true),
    ];

    #[test]
    fn answers_as_the_sql_functions_do() {
        for (text, only, ends) in CASES {
            assert_eq!(only_asks(text), only, "{text:?}");
            assert_eq!(ends_asking(text), ends, "{text:?}");
        }
    }

    #[test]
    fn a_memory_of_more_than_one_chunk_neither_asks_nor_ends_asking() {
        assert_eq!(memory_asks(&["Who looked after the dog?"]), (true, true));
        assert_eq!(memory_asks(&["I quit. Did you hear?"]), (false, true));
        assert_eq!(
            memory_asks(&["A line.\n", "Who looked after it?"]),
            (false, false)
        );
        assert_eq!(memory_asks(&[]), (false, false));
    }
}

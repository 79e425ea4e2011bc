//! Questions that ask when, and texts that say when.
//!
//! A question asking for a time ("When did Nadia run the Riverside Half Marathon?") matches, by
//! its words and its meaning, every text about the event; the one that answers it places the
//! event in time ("the race is on the 15th of October"). So a search that asks when lifts the
//! hits that say when (see [`crate::search::fusion::TIME_WEIGHT`]). Both tests are plain
//! English patterns, run in the server on the candidates a lift can reach, only for a search
//! that asks when.

use std::sync::LazyLock;

use regex::Regex;

/// Whether `query` asks for a time: it opens with "when", or asks "what date", "which year",
/// "since when", "how long" (ago, or for how long) and the like (English, any case). Excluded
/// words (`-when`) do not count.
pub fn asks_when(query: &str) -> bool {
    let words: Vec<String> = query
        .split_whitespace()
        .filter(|token| !token.starts_with('-'))
        .flat_map(|token| token.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    if words.first().is_some_and(|w| w == "when") {
        return true;
    }
    words.windows(2).any(|pair| {
        matches!(
            (pair[0].as_str(), pair[1].as_str()),
            (
                "what" | "which",
                "date" | "day" | "time" | "week" | "month" | "year"
            ) | ("since", "when")
                | ("how", "long")
        )
    })
}

/// A date or clock stamp opening a text: `2024-03-02`, `2024-03-02T10:00:00Z`, `8 May 2023`,
/// `Oct 3, 2023`, `1:56 pm on 8 May, 2023`, optionally in brackets.
static STAMP: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"(?i)^\s*[\[(]?\s*(?:",
        r"\d{4}-\d{2}-\d{2}(?:[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?",
        // A clock before the date ("1:56 pm on"), a weekday ("Monday,"), the date with its
        // month named, and a clock after it (", 1:56 pm").
        r"|(?:\d{1,2}:\d{2}(?::\d{2})?\s*(?:[ap]\.?m\.?)?\s*(?:on\s+)?)?",
        r"(?:(?:mon|tue|wed|thu|fri|sat|sun)[[:alpha:]]{0,6}\.?,?\s+)?",
        r"(?:\d{1,2}(?:st|nd|rd|th)?\s+[[:alpha:]]{3,9}\.?,?\s+\d{4}",
        r"|[[:alpha:]]{3,9}\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4})",
        r"(?:,?\s+(?:at\s+)?\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?)?",
        r")\s*[\])]?",
    ))
});

/// Words and forms that place something in time; "may" and "march" only after a word that makes
/// them months ("in May", "early March").
static TIME: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"(?i)\b(?:yesterday|today|tonight|tomorrow|ago|fortnight|weekends?|mornings?",
        r"|afternoons?|evenings?|nights?|(?:mon|tues|wednes|thurs|fri|satur|sun)days?",
        r"|minutes?|hours?|days?|weeks?|months?|years?",
        r"|january|february|april|june|july|august|september|october|november|december",
        r"|(?:in|of|early|late|mid|last|next|this|since|until|by)\s+(?:may|march)",
        r"|\d{1,2}(?:st|nd|rd|th)|(?:19|20)\d{2})\b",
    ))
});

/// Whether `text` says when or how long: a relative or named time ("yesterday", "last Sunday",
/// "two weeks ago", "in October"), an ordinal day ("the 15th"), a year, or a span of minutes to
/// years, once a date or clock stamp opening it is left out. Such a stamp (a header such as
/// `2024-03-02 Maya:` or `1:56 pm on 8 May, 2023 Caroline:`) says when the text was written, and
/// every text of a log carries one alike.
pub fn tells_time(text: &str) -> bool {
    TIME.is_match(without_stamp(text))
}

/// `text` without the date or clock stamp that opens it, if one does (`2024-03-02 Maya: hi` is
/// `Maya: hi`), and the whitespace after it.
pub fn without_stamp(text: &str) -> &str {
    STAMP
        .find(text)
        .map_or(text, |stamp| text[stamp.end()..].trim_start())
}

/// Compiles a literal pattern; both are compiled by the unit tests, so this cannot fail at run
/// time.
#[expect(
    clippy::expect_used,
    reason = "literal patterns, compiled by the unit tests"
)]
fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("literal regex compiles")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_asking_for_a_time_are_told_from_the_others() {
        for asks in [
            "When did Nadia run the Riverside Half Marathon?",
            "when was the niece born",
            "WHEN?",
            "In which year did Maya move?",
            "What date is the party?",
            "Since when has Tom played bass?",
            "How long ago did Oscar buy the bass?",
            "How long did the renovation take?",
            "On what day of the week is the class?",
        ] {
            assert!(asks_when(asks), "{asks}");
        }
        for other in [
            "What did Oscar build for Rosa?",
            "Whenever I run, which shoes?",
            "how is the long race",
            "Who came when Tom called?",
            "what dates",
            "-when deploy",
            "",
        ] {
            assert!(!asks_when(other), "{other}");
        }
    }

    #[test]
    fn a_stamp_opening_a_text_is_left_out() {
        for (text, rest) in [
            ("2024-03-02 Maya: hi", "Maya: hi"),
            (
                "1:56 pm on 8 May, 2023 Caroline: sounds fun",
                "Caroline: sounds fun",
            ),
            ("[8 May 2023] Caroline: hi", "Caroline: hi"),
            ("Monday, 8 May 2023 Caroline: hi", "Caroline: hi"),
            ("(Mon 8 May, 2023) Caroline: hi", "Caroline: hi"),
            (
                "1:56 pm on Monday, 8 May, 2023 Caroline: hi",
                "Caroline: hi",
            ),
            ("8 May 2023, 1:56 pm Caroline: hi", "Caroline: hi"),
            ("[May 8, 2023 at 13:56] Caroline: hi", "Caroline: hi"),
            ("Sunday was fun", "Sunday was fun"),
            ("2024-03-02T10:00:00Z bob: deploy", "bob: deploy"),
            ("Maya on 2024-03-02: hi", "Maya on 2024-03-02: hi"),
            ("2024 was a year", "2024 was a year"),
            ("2024-03-02", ""),
            ("", ""),
        ] {
            assert_eq!(without_stamp(text), rest, "{text:?}");
        }
    }

    #[test]
    fn a_text_says_when_past_its_stamp() {
        let cases = [
            ("2024-03-02 Maya: I went there yesterday", true),
            ("2024-03-02 Maya: I like it there", false),
            ("2024-03-02T10:00:00Z bob: nothing new", false),
            ("1:56 pm on 8 May, 2023 Caroline: sounds fun", false),
            (
                "1:56 pm on 8 May, 2023 Caroline: the race is on the 15th",
                true,
            ),
            ("[8 May 2023] Caroline: hi", false),
            ("Monday, 8 May 2023, 1:56 pm Caroline: hi", false),
            ("Monday, 8 May 2023 Caroline: see you on Friday", true),
            ("Oct 3, 2023 Bob: last Sunday was fun", true),
            ("we may go, or march on", false),
            ("in May we went", true),
            ("back in 2019 I lived there", true),
            ("two weeks ago", true),
            ("the flood kept me out for nine days", true),
            ("I'm useless without eight hours", true),
            ("Mondays are hard", true),
            ("2024-03-02 Maya: it was 2023", true),
            ("the 2023rd try", false),
            ("", false),
        ];
        for (text, expected) in cases {
            assert_eq!(tells_time(text), expected, "{text:?}");
        }
    }
}

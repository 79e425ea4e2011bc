//! The texts the scenarios send: deterministic, from a seed.

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 1 KB text payload, varied per request so nothing is deduplicated.
pub(crate) fn kilobyte(seed: usize) -> String {
    let mut text = format!("bench output {seed}\n");
    while text.len() < 1024 {
        text.push_str("line of tool output with some words to index: build ok, tests passed\n");
    }
    text.truncate(1024);
    text
}

/// A chat message of about 200 characters, varied by `seed`.
pub(crate) fn chat_text(seed: usize) -> String {
    format!(
        "message {seed}: could you check why the nightly build failed again? The log says the \
         integration tests timed out after the database migration step, and I would like to know \
         whether we should retry it."
    )
}

/// A short chat question naming two of [`WORDS`] and a step, varied by `seed` (the context turn
/// recalls by it: a question every earlier message matches would measure the ranking of them all).
pub(crate) fn question_text(seed: u64) -> String {
    let w = |shift: u32| WORDS[((seed >> shift) % 8) as usize];
    format!(
        "what did we decide about the {} and the {} in step {}?",
        w(0),
        w(3),
        (seed >> 6) % 1000
    )
}

/// About 100 KB of text, varied per client and request so nothing is deduplicated.
pub(crate) fn hundred_kilobytes(client: usize, seed: usize) -> String {
    let mut text = String::with_capacity(100 * 1024 + 128);
    let mut line = 0usize;
    while text.len() < 100 * 1024 {
        text.push_str(&format!(
            "flood {client}-{seed} line {line}: compiling crate, warning unused variable, test ok\n"
        ));
        line += 1;
    }
    text
}

/// Words of the flooding searcher's corpus and questions: each memory holds three of them.
pub(crate) const WORDS: [&str; 8] = [
    "deploy",
    "timeout",
    "cache",
    "migration",
    "index",
    "rollback",
    "latency",
    "quota",
];

/// The `i`th memory of the flooding searcher's corpus: about 1 KB, a few varied words in each.
pub(crate) fn corpus_text(i: usize) -> String {
    let mut text = format!(
        "bench output {i}: {} {} {}\n",
        WORDS[i % 8],
        WORDS[(i / 8) % 8],
        WORDS[(i / 64) % 8]
    );
    while text.len() < 1024 {
        text.push_str("line of tool output with some words to index: build ok, tests passed\n");
    }
    text.truncate(1024);
    text
}

/// What the `chat-context` users talk about: each message names two or three of these.
const TOPICS: [&str; 48] = [
    "meeting",
    "design",
    "hotfix",
    "refund",
    "outage",
    "metrics",
    "partner",
    "training",
    "invoice",
    "backup",
    "billing",
    "login",
    "webhook",
    "cluster",
    "certificate",
    "dashboard",
    "replica",
    "schema",
    "pipeline",
    "budget",
    "vendor",
    "contract",
    "release",
    "roadmap",
    "onboarding",
    "payroll",
    "firewall",
    "bucket",
    "region",
    "alert",
    "ticket",
    "sprint",
    "kernel",
    "upgrade",
    "license",
    "audit",
    "storage",
    "network",
    "report",
    "survey",
    "campaign",
    "newsletter",
    "hiring",
    "interview",
    "laptop",
    "printer",
    "vacation",
    "offsite",
];

const PEOPLE: [&str; 8] = ["Ann", "Bo", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana"];

const MONTHS: [&str; 6] = ["January", "February", "March", "April", "May", "June"];

/// A chat message of the `chat-context` users' history and questions, varied by `seed`: a user's
/// question (20 to 90 characters) or an assistant's reply (about 250), each naming two or three
/// of [`TOPICS`], a person and a month, so that a question matches a few earlier messages rather
/// than every one of them.
pub(crate) fn conversation_text(seed: u64, from_user: bool) -> String {
    let r = splitmix64(seed);
    let pick =
        |words: &[&'static str], shift: u32| words[((r >> shift) % words.len() as u64) as usize];
    let (a, b, c) = (pick(&TOPICS, 0), pick(&TOPICS, 8), pick(&TOPICS, 16));
    let person = pick(&PEOPLE, 24);
    let month = pick(&MONTHS, 32);
    let day = 1 + (r >> 40) % 28;
    if !from_user {
        return format!(
            "Earlier we agreed to move the {a} behind the {b}. {person} owns it and the deadline \
             is {month} {day}. The open question is whether the {c} needs a review first; if it \
             does, the {a} slips by a week and we tell the team on Monday. I noted the numbers \
             in the shared sheet."
        );
    }
    match (r >> 48) % 5 {
        0 => format!("could you remind me what we said about the {a} and the {b}?"),
        1 => format!("the {a} broke again after the {b} change, any idea why?"),
        2 => format!("let's plan the {a} for {month}; the {b} can wait"),
        3 => format!("I talked to {person} about the {a}: they want the {b} done first"),
        _ => format!("what did we decide about the {a} and the {c}?"),
    }
}

//! Prompts for the optional model (two tiers): the running summary, and the answer to a
//! question grounded on that summary plus the messages since it. Pure text building, no I/O.

use super::digest::{self, Digest, Message};

/// The plan as numbered lines with each item's explicit status.
fn plan_lines(digest: &Digest, items: &[digest::Item]) -> String {
    if items.is_empty() {
        return "(no plan recorded)".into();
    }
    items
        .iter()
        .map(|i| {
            let inferred = digest.inferred.contains(&i.ordinal);
            format!(
                "{}. {} [{}{}]",
                i.ordinal,
                i.title,
                i.status.as_str(),
                if inferred {
                    "; an update reports it done"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn message_lines(messages: &[Message]) -> String {
    if messages.is_empty() {
        return "None.".into();
    }
    messages
        .iter()
        .map(|m| {
            format!(
                "#{} [{} {}] {}",
                m.seq,
                m.role,
                m.msg_type,
                m.content.trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// System and user prompt asking for a refreshed running summary: the previous summary plus the
/// messages it does not cover yet.
pub fn summary(
    digest: &Digest,
    items: &[digest::Item],
    previous: Option<&str>,
    since: &[Message],
) -> (String, String) {
    let system = "You maintain the running summary of an AI agent's long-running task. Be exact; \
                  never invent steps, versions or hosts."
        .to_owned();
    let user = format!(
        "Task: {}\nStatus: {} ({})\nPlan:\n{}\n\nPrevious summary:\n{}\n\nNew messages:\n{}\n\n\
         Write a concise summary of:\n1. Which plan steps are completed\n2. What step is currently \
         in progress\n3. Any blockers or issues noted\n4. Key details (versions, URLs, file paths) \
         worth remembering\n\nBe concise — 3-5 sentences max.",
        digest.task,
        digest.status,
        digest.phase,
        plan_lines(digest, items),
        previous.unwrap_or("No summary yet."),
        message_lines(since),
    );
    (system, user)
}

/// System and user prompt answering `query`, grounded on the running summary (covering the first
/// `covered` messages), the messages since, and the exact digest.
pub fn query(
    digest: &Digest,
    items: &[digest::Item],
    running_summary: Option<&str>,
    covered: i32,
    since: &[Message],
    query: &str,
) -> (String, String) {
    let system =
        "You answer an AI agent's questions about its own long-running task, which it may \
                  have lost track of after context compaction. Ground every statement on the \
                  task record below; the tracked state is exact."
            .to_owned();
    let user = format!(
        "Task: {}\nStatus: {} ({})\nPlan:\n{}\n\nTracked state: {}\n\nSummary (as of message #{}):\n{}\n\n\
         Recent updates since summary:\n{}\n\nQuestion: {}\n\nAnswer concisely.",
        digest.task,
        digest.status,
        digest.phase,
        plan_lines(digest, items),
        digest::summary(digest),
        covered,
        running_summary.unwrap_or("No summary yet."),
        message_lines(since),
        query.trim(),
    );
    (system, user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::digest::{Item, TaskFacts, build};
    use crate::tasks::model::ItemStatus;
    use chrono::{DateTime, Utc};

    fn fixture() -> (Digest, Vec<Item>, Vec<Message>) {
        let items: Vec<Item> = ["Build image", "Push image"]
            .iter()
            .enumerate()
            .map(|(i, t)| Item {
                ordinal: i as i32 + 1,
                title: (*t).into(),
                stage: None,
                status: ItemStatus::Pending,
            })
            .collect();
        let messages = vec![Message {
            seq: 1,
            role: "agent".into(),
            msg_type: "progress".into(),
            content: "Step 1 done — v1.2.3".into(),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
        }];
        let facts = TaskFacts {
            name: "Deploy".into(),
            status: "active".into(),
            phase: "EXECUTING_PLAN".into(),
            plan_version: 1,
        };
        (build(&facts, &items, &messages, 5), items, messages)
    }

    #[test]
    fn query_prompt_carries_summary_updates_and_question() {
        let (digest, items, messages) = fixture();
        let (_, user) = query(
            &digest,
            &items,
            Some("Built the image."),
            0,
            &messages,
            "where was I?",
        );
        assert!(
            user.contains("1. Build image [pending; an update reports it done]"),
            "{user}"
        );
        assert!(
            user.contains("Summary (as of message #0):\nBuilt the image."),
            "{user}"
        );
        assert!(
            user.contains("#1 [agent progress] Step 1 done — v1.2.3"),
            "{user}"
        );
        assert!(user.contains("Question: where was I?"), "{user}");
        assert!(user.contains("Next: step 2 — Push image"), "{user}");
    }

    #[test]
    fn summary_prompt_without_previous() {
        let (digest, items, messages) = fixture();
        let (_, user) = summary(&digest, &items, None, &messages);
        assert!(
            user.contains("Previous summary:\nNo summary yet."),
            "{user}"
        );
        assert!(user.contains("3-5 sentences"), "{user}");
    }
}

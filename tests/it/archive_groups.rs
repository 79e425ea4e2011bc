//! A group of archives written in one call (`mnemo_write_archives`) against the same archives
//! written one call each: the answers and the rows they leave must be the same. A group with
//! no deletion and no message twice is written by one statement; any other group one archive at
//! a time, like an archive alone.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// One archive: its session, agent, messages (`id`, sender, text, minute) and deleted ids.
struct Archive {
    session: &'static str,
    agent: &'static str,
    messages: Vec<(&'static str, &'static str, &'static str, i64)>,
    deletions: Vec<&'static str>,
}

fn archive(
    session: &'static str,
    messages: Vec<(&'static str, &'static str, &'static str, i64)>,
) -> Archive {
    Archive {
        session,
        agent: "assistant",
        messages,
        deletions: Vec::new(),
    }
}

/// Each archive's answer: version, new, updated and deleted ids, whether it has an archive time,
/// the session's message count and what its summary covers.
type Answer = (i64, Vec<String>, Vec<String>, Vec<String>, bool, i32, i32);

/// Writes `group` for `user` in one call of `mnemo_write_archives` (with the embedding queue
/// on), in a transaction of its own that allows no temporary file, its batch ids numbered from
/// `batch`; answers each archive's row and how many statements wrote the group.
async fn write(pool: &PgPool, user: &str, batch: u128, group: &[Archive]) -> (Vec<Answer>, i64) {
    let ends = |count: fn(&Archive) -> usize| -> Vec<i32> {
        group
            .iter()
            .scan(0, |end, a| {
                *end += i32::try_from(count(a)).unwrap();
                Some(*end)
            })
            .collect()
    };
    let messages = || group.iter().flat_map(|a| &a.messages);
    let at = |minute: i64| {
        "2026-11-21T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::Duration::minutes(minute)
    };
    let times: Vec<_> = messages().map(|m| at(m.3)).collect();
    let spans: Vec<_> = group
        .iter()
        .map(|a| a.messages.first().map(|m| at(m.3)))
        .collect();
    let none_json: Vec<Option<serde_json::Value>> = messages().map(|_| None).collect();
    let none_text: Vec<Option<String>> = messages().map(|_| None).collect();
    let none_time: Vec<Option<DateTime<Utc>>> = messages().map(|_| None).collect();
    let gone: Vec<&str> = group.iter().flat_map(|a| a.deletions.clone()).collect();
    let gone_time: Vec<Option<DateTime<Utc>>> = gone.iter().map(|_| None).collect();
    let batches: Vec<Uuid> = (batch..).take(group.len()).map(Uuid::from_u128).collect();
    let mut tx = pool.begin().await.unwrap();
    // A group is a few rows, and no plan of it may write a temporary file: a hash join sized
    // for the thousands of rows a set-returning function is counted at without its arguments
    // spills to one. On a database with statistics of many messages PostgreSQL picks a hash
    // join for the group's messages; on this fresh one it would pick a merge join, so merge
    // joins are off here.
    sqlx::raw_sql("SET LOCAL temp_file_limit = 0; SET LOCAL enable_mergejoin = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rows: Vec<Answer> = sqlx::query_as(
        "SELECT version, new_ids, updated_ids, deleted_ids, archived_at IS NOT NULL,
                message_count, summary_covers
         FROM mnemo_write_archives($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                                   $15, $16, $17, true, 't1', $18)",
    )
    .bind(group.iter().map(|a| a.session).collect::<Vec<_>>())
    .bind(group.iter().map(|a| a.agent).collect::<Vec<_>>())
    .bind(&batches)
    .bind(&spans)
    .bind(&spans)
    .bind(
        group
            .iter()
            .map(|a| i32::try_from(a.messages.len() + a.deletions.len()).unwrap())
            .collect::<Vec<_>>(),
    )
    .bind(ends(|a| a.messages.len()))
    .bind(messages().map(|m| m.0).collect::<Vec<_>>())
    .bind(messages().map(|m| m.1).collect::<Vec<_>>())
    .bind(messages().map(|m| m.2).collect::<Vec<_>>())
    .bind(&times)
    .bind(&none_json)
    .bind(&none_text)
    .bind(&none_time)
    .bind(ends(|a| a.deletions.len()))
    .bind(&gone)
    .bind(&gone_time)
    .bind(user)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    // The statements that wrote the batch records: one per archive, or one for the group.
    let statements: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT cmin::text) FROM recent_conversation_history WHERE id = ANY($1)",
    )
    .bind(&batches)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    (rows, statements)
}

/// What `user`'s archives left: sessions, messages in `seq` order, batch records in the group's
/// order, and the distinct messages queued for the embedder.
async fn stored(pool: &PgPool, user: &str) -> Vec<String> {
    let queries = [
        "SELECT session_id || ' ' || agent_name || ' v' || version || ' n' || message_count
         FROM agent_sessions WHERE user_id = $1 ORDER BY session_id",
        "SELECT session_id || ' ' || message_id || ' ' || sender || ' ' || text
         FROM conversation_messages WHERE user_id = $1 ORDER BY seq",
        "SELECT id::text || ' ' || session_id || ' ' || message_count || ' ' || new_count || ' '
                || duplicate_count || ' ' || updated_count || ' ' || deleted_count
         FROM recent_conversation_history WHERE user_id = $1 ORDER BY id",
        "SELECT DISTINCT session_id || ' ' || message_id FROM embedding_outbox
         WHERE user_id = $1 ORDER BY 1",
    ];
    let mut lines = Vec::new();
    for sql in queries {
        let rows: Vec<String> = sqlx::query_scalar(sql)
            .bind(user)
            .fetch_all(pool)
            .await
            .unwrap();
        lines.extend(rows);
    }
    lines
}

/// Writes the same history for two users, `group` as one call for the first and one call per
/// archive for the second (batch ids from `batch` on); asserts the answers and rows are the
/// same, and answers how many statements wrote the group, in the group's call and in the calls
/// one by one.
async fn same_as_one_by_one(
    pool: &PgPool,
    batch: u128,
    history: &[Archive],
    group: &[Archive],
) -> (i64, i64) {
    for user in ["grouped", "alone"] {
        write(pool, user, batch, history).await;
    }
    let first = batch + 100;
    let (grouped, statements) = write(pool, "grouped", first, group).await;
    let (mut alone, mut alone_statements) = (Vec::new(), 0);
    for (one, batch) in group.iter().zip(first..) {
        let (answer, statements) = write(pool, "alone", batch, std::slice::from_ref(one)).await;
        alone.extend(answer);
        alone_statements += statements;
    }
    assert_eq!(grouped, alone, "the group's answers");
    assert_eq!(
        stored(pool, "grouped").await,
        stored(pool, "alone").await,
        "the rows the group left"
    );
    (statements, alone_statements)
}

#[sqlx::test]
async fn a_group_of_archives_writes_what_each_would_write_alone(pool: PgPool) {
    let history = [archive(
        "s1",
        vec![
            ("m0", "user", "first", 0),
            ("m1", "ai", "second", 1),
            ("m2", "tool", "tool output", 2),
        ],
    )];
    // Two archives to s1, a new session between them, a duplicate and an update of stored
    // messages, an archive with no message, and a new session of another agent.
    let group = [
        archive(
            "s1",
            vec![("m3", "user", "third", 3), ("m4", "ai", "fourth", 4)],
        ),
        archive("s2", vec![("x1", "user", "other session", 5)]),
        archive(
            "s1",
            vec![
                ("m1", "ai", "second", 1),
                ("m0", "user", "first, edited", 0),
                ("m5", "user", "", 6),
            ],
        ),
        archive("s1", vec![]),
        Archive {
            agent: "planner",
            ..archive("s3", vec![("y1", "tool", "result", 7)])
        },
        archive("s2", vec![("x2", "ai", "reply", 8)]),
    ];
    let statements = same_as_one_by_one(&pool, 1, &history, &group).await;
    assert_eq!(statements, (1, 6), "one statement for the group");
}

#[sqlx::test]
async fn a_group_finds_each_message_its_archive_at_either_end_and_across_sessions(pool: PgPool) {
    // Archives with no message first, last and between, and one message id in two sessions
    // (two messages, not one twice): each message is written by its own archive, in one
    // statement.
    let group = [
        archive("s1", vec![]),
        archive("s1", vec![("m1", "user", "first", 0)]),
        archive("s2", vec![]),
        archive(
            "s2",
            vec![("m1", "user", "same id", 1), ("m2", "ai", "reply", 2)],
        ),
        archive("s1", vec![("m2", "ai", "answer", 3)]),
        archive("s3", vec![]),
    ];
    let statements = same_as_one_by_one(&pool, 1, &[], &group).await;
    assert_eq!(statements, (1, 6), "one statement for the group");
}

#[sqlx::test]
async fn a_group_with_a_message_twice_or_a_deletion_is_written_one_by_one(pool: PgPool) {
    let history = [archive(
        "s1",
        vec![("m0", "user", "first", 0), ("m1", "ai", "second", 1)],
    )];
    let twice = [
        archive("s1", vec![("z1", "user", "draft", 2)]),
        archive("s1", vec![("z1", "user", "final", 2)]),
    ];
    let (grouped, alone) = same_as_one_by_one(&pool, 1, &history, &twice).await;
    assert_eq!(grouped, alone, "one archive at a time");

    let deleting = [
        archive("s1", vec![("z2", "user", "more", 3)]),
        Archive {
            deletions: vec!["m1"],
            ..archive("s1", vec![])
        },
    ];
    let (grouped, alone) = same_as_one_by_one(&pool, 1000, &[], &deleting).await;
    assert_eq!(grouped, alone, "one archive at a time");
}

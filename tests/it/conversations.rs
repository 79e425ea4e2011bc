//! Conversation memory over HTTP.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::IntoResponse;
use mnemo::conversations::sweeper::{SweepOutcome, sweep_once};
use mnemo::db::Job;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, one_waits_on_a_lock};

const ARCHIVE: &str = "/api/chat/session/archive_messages";
const BEACON: &str = "/api/chat/session/archive_messages/beacon";

fn msg(id: &str, text: &str, sender: &str, minute: u32) -> Value {
    json!({"id": id, "text": text, "sender": sender,
           "timestamp": format!("2026-11-21T10:{minute:02}:00.000Z")})
}

fn batch(session: &str, messages: Vec<Value>) -> Value {
    json!({"session_id": session, "messages_batch": messages})
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Waits until `n` archives wait for the group before them (fails after 4 s).
async fn until_waiting(app: &TestApp, n: usize) {
    for _ in 0..200 {
        if app.state.session_appends.waiting() == n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(app.state.session_appends.waiting(), n);
}

/// Holds session `s1`'s row, so that the next archive to it waits in its transaction.
async fn hold_session(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM agent_sessions WHERE session_id = 's1' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

#[sqlx::test]
async fn archive_stores_each_message_once_and_counts_duplicates(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let first = vec![msg("m1", "hi", "user", 1), msg("m2", "hello", "ai", 2)];
    let body = expect(
        app.post(ARCHIVE, &token).json(&batch("s1", first.clone())),
        200,
    )
    .await;
    assert_eq!(
        (body["new"].as_i64(), body["duplicates"].as_i64()),
        (Some(2), Some(0))
    );
    assert_eq!(body["session_id"], "s1");

    // The client re-sends the whole conversation plus new messages (and one repeat in the batch).
    let mut again = first.clone();
    again.push(msg("m3", "how are you", "user", 3));
    again.push(msg("m3", "how are you", "user", 3));
    let body = expect(app.post(ARCHIVE, &token).json(&batch("s1", again)), 200).await;
    assert_eq!(
        (body["new"].as_i64(), body["duplicates"].as_i64()),
        (Some(1), Some(3))
    );

    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        3
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM agent_sessions").await, 1);
    let batches: Vec<(i32, i32, i32)> = sqlx::query_as(
        "SELECT message_count, new_count, duplicate_count FROM recent_conversation_history ORDER BY archived_at, id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(batches, vec![(2, 2, 0), (4, 1, 3)]);
    let (agent, user, tenant): (String, String, String) =
        sqlx::query_as("SELECT agent_name, user_id, tenant_id FROM agent_sessions")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (agent.as_str(), user.as_str(), tenant.as_str()),
        ("assistant", "alice", "t1")
    );

    let page = expect(app.get("/api/chat/sessions/s1/messages", &token), 200).await;
    let texts: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["hi", "hello", "how are you"]);
    assert_eq!(page["items"][1]["sender"], "ai");
    assert_eq!(page["items"][0]["timestamp"], "2026-11-21T10:01:00Z");
}

/// A user's archives to other sessions wait for the busy session's too and are written together,
/// each into its own session; another user's archive to a session of the same name is written at
/// once.
#[sqlx::test]
async fn a_users_archives_to_other_sessions_commit_together(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let (alice, bob) = (app.token("t1", "alice"), app.token("t1", "bob"));
    for (token, session) in [(&alice, "s1"), (&bob, "s1")] {
        let first = batch(session, vec![msg("m0", "first", "user", 0)]);
        expect(app.post(ARCHIVE, token).json(&first), 200).await;
    }

    let mut holder = pool.begin().await.unwrap();
    sqlx::query(
        "SELECT 1 FROM agent_sessions WHERE user_id = 'alice' AND session_id = 's1' FOR UPDATE",
    )
    .execute(&mut *holder)
    .await
    .unwrap();
    let post = |token: &str, session: &str, id: &str| {
        let body = batch(session, vec![msg(id, &format!("text of {id}"), "user", 1)]);
        let request = app.post(ARCHIVE, token).json(&body);
        tokio::spawn(async move { expect(request, 200).await })
    };
    let blocked = post(&alice, "s1", "a1");
    one_waits_on_a_lock(&pool).await;
    let queued: Vec<_> = ["s2", "s3", "s4"]
        .iter()
        .map(|s| post(&alice, s, "q1"))
        .collect();
    // Written while alice's archives wait: another user's.
    let answer = post(&bob, "s1", "b1").await.unwrap();
    assert_eq!(answer["new"].as_i64(), Some(1), "{answer}");
    until_waiting(&app, 3).await;
    holder.commit().await.unwrap();

    assert_eq!(blocked.await.unwrap()["new"].as_i64(), Some(1));
    for answer in queued {
        let answer = answer.await.unwrap();
        assert_eq!(answer["new"].as_i64(), Some(1), "{answer}");
    }
    // Each queued message is in its own session, and the three were written in one transaction.
    for session in ["s2", "s3", "s4"] {
        let page = expect(
            app.get(&format!("/api/chat/sessions/{session}/messages"), &alice),
            200,
        )
        .await;
        assert_eq!(page["items"][0]["id"], "q1", "{page}");
        assert_eq!(page["items"].as_array().unwrap().len(), 1);
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(DISTINCT xmin::text) FROM conversation_messages \
             WHERE user_id = 'alice' AND session_id IN ('s2', 's3', 's4')"
        )
        .await,
        1
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        7
    );
}

/// Archives to one session that arrive while another is being written wait for it and are then
/// written in one transaction (their rows share one `xmin`), each answered with its own counts;
/// the window and the history hold every message once.
#[sqlx::test]
async fn archives_to_a_busy_session_commit_together_with_their_own_answers(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    expect(
        app.post(ARCHIVE, &token)
            .json(&batch("s1", vec![msg("m0", "first", "user", 0)])),
        200,
    )
    .await;

    let holder = hold_session(&pool).await;
    let post = |messages: Vec<Value>| {
        let request = app.post(ARCHIVE, &token).json(&batch("s1", messages));
        tokio::spawn(async move { expect(request, 200).await })
    };
    let blocked = post(vec![msg("a1", "blocked one", "user", 1)]);
    one_waits_on_a_lock(&pool).await;
    let mut queued: Vec<_> = (1..=8)
        .map(|i| {
            post(vec![msg(
                &format!("b{i}"),
                &format!("queued {i}"),
                "ai",
                1 + i,
            )])
        })
        .collect();
    // One of the queued batches re-sends the blocked message: a duplicate, not a new row.
    queued.push(post(vec![msg("a1", "blocked one", "user", 1)]));
    until_waiting(&app, 9).await;
    holder.commit().await.unwrap();

    let first = blocked.await.unwrap();
    assert_eq!(
        (first["new"].as_i64(), first["duplicates"].as_i64()),
        (Some(1), Some(0))
    );
    let mut batch_ids = vec![first["batch_id"].as_str().unwrap().to_owned()];
    for (i, answer) in queued.into_iter().enumerate() {
        let answer = answer.await.unwrap();
        let expected = if i == 8 {
            (Some(0), Some(1))
        } else {
            (Some(1), Some(0))
        };
        assert_eq!(
            (answer["new"].as_i64(), answer["duplicates"].as_i64()),
            expected,
            "{answer}"
        );
        batch_ids.push(answer["batch_id"].as_str().unwrap().to_owned());
    }
    batch_ids.sort();
    batch_ids.dedup();
    assert_eq!(batch_ids.len(), 10);
    assert_eq!(app.state.session_appends.waiting(), 0);

    // The first message, the blocked archive, and the queued ones written together.
    assert_eq!(
        count(
            &pool,
            "SELECT count(DISTINCT xmin::text) FROM conversation_messages"
        )
        .await,
        3
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        10
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM recent_conversation_history").await,
        11
    );
    assert_eq!(count(&pool, "SELECT version FROM agent_sessions").await, 11);
    // Each archive of the group counted its new messages into the session, the duplicate none.
    assert_eq!(
        count(&pool, "SELECT message_count::int8 FROM agent_sessions").await,
        10
    );
    let page = expect(app.get("/api/chat/sessions/s1/messages", &token), 200).await;
    let ids: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["m0", "a1", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"]
    );
}

/// When one archive of a group fails, the group's call writes nothing and each of its archives is
/// then written alone: the others are stored and answered, only the failing one gets its error.
#[sqlx::test]
async fn one_failing_archive_of_a_group_fails_alone(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    expect(
        app.post(ARCHIVE, &token)
            .json(&batch("s1", vec![msg("m0", "first", "user", 0)])),
        200,
    )
    .await;
    // A fault that one message of the group meets, injected for the test.
    sqlx::raw_sql(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.text = 'boom' THEN RAISE EXCEPTION 'refused for the test'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER test_refuse BEFORE INSERT ON conversation_messages
             FOR EACH ROW EXECUTE FUNCTION test_refuse();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let holder = hold_session(&pool).await;
    let post = |id: &str, text: &str| {
        let request = app
            .post(ARCHIVE, &token)
            .json(&batch("s1", vec![msg(id, text, "user", 1)]));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    let blocked = post("a1", "blocked one");
    one_waits_on_a_lock(&pool).await;
    let queued: Vec<_> = [("b1", "fine"), ("b2", "boom"), ("b3", "fine too")]
        .into_iter()
        .map(|(id, text)| post(id, text))
        .collect();
    until_waiting(&app, 3).await;
    holder.commit().await.unwrap();

    assert_eq!(blocked.await.unwrap().0, 200);
    let mut statuses = Vec::new();
    for answer in queued {
        statuses.push(answer.await.unwrap().0);
    }
    assert_eq!(statuses, [200, 500, 200]);
    let page = expect(app.get("/api/chat/sessions/s1/messages", &token), 200).await;
    let ids: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m0", "a1", "b1", "b3"]);
    // b1 and b3 each in a transaction of its own, after the group's rolled back.
    assert_eq!(
        count(
            &pool,
            "SELECT count(DISTINCT xmin::text) FROM conversation_messages"
        )
        .await,
        4
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM recent_conversation_history").await,
        4
    );
}

#[sqlx::test]
async fn bad_batches_are_refused_whole_naming_the_message(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| {
        c.conversations.archive_max_messages = 5;
        c.conversations.archive_max_bytes = 4096;
    })
    .await;
    let token = app.token("t1", "alice");
    let good = |i: u32| msg(&format!("m{i}"), "text", "user", i);

    let cases = [
        (
            json!({"session_id": "  ", "messages_batch": [good(0)]}),
            "session_id",
        ),
        (json!({"session_id": "s"}), "messages_batch"),
        (
            batch(
                "s",
                vec![good(0), good(1), good(2), msg("m3", "x", "robot", 3)],
            ),
            "messages_batch[3].sender",
        ),
        (
            batch(
                "s",
                vec![
                    good(0),
                    json!({"id": "m1", "text": "x", "sender": "user", "timestamp": "yesterday"}),
                ],
            ),
            "messages_batch[1].timestamp",
        ),
        (
            batch(
                "s",
                vec![good(0), good(1), msg("m0", "other text", "user", 0)],
            ),
            "messages_batch[2].id",
        ),
        (
            batch(
                "s",
                vec![
                    good(0),
                    json!({"id": "", "text": "x", "sender": "ai", "timestamp": "2026-11-21T10:00:00Z"}),
                ],
            ),
            "messages_batch[1].id",
        ),
    ];
    for (body, field) in cases {
        let problem = expect_problem(app.post(ARCHIVE, &token).json(&body), 422).await;
        assert_eq!(problem["field"], field, "{problem}");
    }
    // Too many messages, too many bytes.
    let many: Vec<Value> = (0..6).map(good).collect();
    let problem = expect_problem(app.post(ARCHIVE, &token).json(&batch("s", many)), 413).await;
    assert_eq!(problem["limit_messages"], 5);
    let big = vec![msg("big", &"x".repeat(5000), "user", 1)];
    let problem = expect_problem(app.post(ARCHIVE, &token).json(&batch("s", big)), 413).await;
    assert_eq!(problem["limit_bytes"], 4096);

    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        0
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM agent_sessions").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM recent_conversation_history").await,
        0
    );

    // Scopes: a read-only token cannot archive.
    let reader = crate::common::hs256(&json!({"sub": "alice", "tenant_id": "t1",
        "scope": "memory:read", "exp": crate::common::now() + 600}));
    expect_problem(
        app.post(ARCHIVE, &reader).json(&batch("s", vec![good(0)])),
        403,
    )
    .await;
}

#[sqlx::test]
async fn beacon_takes_the_token_from_a_text_plain_body(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let mut body = batch(
        "s1",
        vec![msg("m1", "bye", "user", 1), msg("m2", "see you", "ai", 2)],
    );
    body["access_token"] = json!(token);
    let beacon = || {
        app.client
            .post(app.url(BEACON))
            .header("content-type", "text/plain;charset=UTF-8")
    };

    let answer = expect(beacon().body(body.to_string()), 200).await;
    assert_eq!(
        (answer["session_id"].as_str(), answer["new"].as_i64()),
        (Some("s1"), Some(2))
    );
    // A repeated beacon stores nothing twice.
    let answer = expect(beacon().body(body.to_string()), 200).await;
    assert_eq!(
        (answer["new"].as_i64(), answer["duplicates"].as_i64()),
        (Some(0), Some(2))
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        2
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM recent_conversation_history").await,
        2
    );
    let page = expect(app.get("/api/chat/sessions/s1/messages", &token), 200).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);

    // application/json works too.
    let mut other = batch("s2", vec![msg("x", "y", "user", 1)]);
    other["access_token"] = json!(token);
    expect(app.client.post(app.url(BEACON)).json(&other), 200).await;

    // The token is verified like the bearer path.
    let mut forged = body.clone();
    forged["access_token"] = json!(crate::common::sign(
        jsonwebtoken::Algorithm::HS256,
        &jsonwebtoken::EncodingKey::from_secret(b"another-secret-that-is-long-enough!!"),
        &json!({"sub": "alice", "tenant_id": "t1", "exp": crate::common::now() + 60}),
    ));
    let problem = expect_problem(beacon().body(forged.to_string()), 401).await;
    assert!(
        problem["detail"].as_str().unwrap().contains("signature"),
        "{problem}"
    );
    let expired = crate::common::hs256(
        &json!({"sub": "alice", "tenant_id": "t1", "exp": crate::common::now() - 3600}),
    );
    let mut old = body.clone();
    old["access_token"] = json!(expired);
    expect_problem(beacon().body(old.to_string()), 401).await;
    let mut none = body.clone();
    none.as_object_mut().unwrap().remove("access_token");
    expect_problem(beacon().body(none.to_string()), 401).await;

    // Bad batch through the beacon: same 422.
    let mut bad = batch("s1", vec![msg("m9", "x", "martian", 1)]);
    bad["access_token"] = json!(token);
    let problem = expect_problem(beacon().body(bad.to_string()), 422).await;
    assert_eq!(problem["field"], "messages_batch[0].sender");

    // Over 64 KiB: 413.
    let mut big = batch("s1", vec![msg("big", &"x".repeat(70 * 1024), "user", 1)]);
    big["access_token"] = json!(token);
    let problem = expect_problem(beacon().body(big.to_string()), 413).await;
    assert_eq!(problem["limit_bytes"], 65536);
    expect_problem(
        app.client
            .post(app.url(BEACON))
            .header("content-type", "application/xml")
            .body("<x/>"),
        415,
    )
    .await;
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        3
    );
}

#[sqlx::test]
async fn sessions_list_page_and_delete_with_isolation(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    for i in 0..5u32 {
        let mut body = batch(
            &format!("s{i}"),
            vec![msg(&format!("m{i}"), "x", "user", i)],
        );
        body["agent_id"] = json!(if i % 2 == 0 { "coach" } else { "assistant" });
        expect(app.post(ARCHIVE, &alice).json(&body), 200).await;
    }
    // Pages of 2, most recently active first, no repeats, no gaps.
    let mut seen = Vec::new();
    let mut path = "/api/chat/sessions?limit=2".to_owned();
    loop {
        let page = expect(app.get(&path, &alice), 200).await;
        for s in page["items"].as_array().unwrap() {
            seen.push(s["session_id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/api/chat/sessions?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, ["s4", "s3", "s2", "s1", "s0"]);
    let coach = expect(app.get("/api/chat/sessions?agent_id=coach", &alice), 200).await;
    let ids: Vec<&str> = coach["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s4", "s2", "s0"]);
    assert_eq!(coach["items"][0]["agent_id"], "coach");
    let problem = expect_problem(app.get("/api/chat/sessions?cursor=nope!", &alice), 422).await;
    assert_eq!(problem["field"], "cursor");
    expect_problem(app.get("/api/chat/sessions?limit=0", &alice), 422).await;

    // Another user or tenant sees nothing and gets 404 for alice's session.
    for other in [app.token("t1", "bob"), app.token("t2", "alice")] {
        let page = expect(app.get("/api/chat/sessions", &other), 200).await;
        assert_eq!(page["items"].as_array().unwrap().len(), 0);
        expect_problem(app.get("/api/chat/sessions/s1/messages", &other), 404).await;
        expect_problem(app.delete("/api/chat/sessions/s1", &other), 404).await;
        // The same session id for another user is another session.
        expect(
            app.post(ARCHIVE, &other)
                .json(&batch("s1", vec![msg("m1", "mine", "user", 1)])),
            200,
        )
        .await;
    }
    let page = expect(app.get("/api/chat/sessions/s1/messages", &alice), 200).await;
    assert_eq!(page["items"][0]["text"], "x");

    // Delete cascades to messages and batch records, only alice's.
    expect(app.delete("/api/chat/sessions/s1", &alice), 204).await;
    expect_problem(app.get("/api/chat/sessions/s1/messages", &alice), 404).await;
    expect_problem(app.delete("/api/chat/sessions/s1", &alice), 404).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM conversation_messages WHERE session_id = 's1'"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM recent_conversation_history WHERE session_id = 's1'"
        )
        .await,
        2
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM agent_sessions WHERE session_id = 's1' AND user_id = 'alice' AND tenant_id = 't1'").await, 0);
}

#[sqlx::test]
async fn messages_page_in_both_orders(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    // Two share a timestamp: they keep the order they were archived in.
    let messages: Vec<Value> = (0..7u32)
        .map(|i| msg(&format!("m{i}"), &format!("t{i}"), "user", i.min(5)))
        .collect();
    expect(app.post(ARCHIVE, &token).json(&batch("s", messages)), 200).await;
    for (order, expected) in [
        ("asc", vec!["t0", "t1", "t2", "t3", "t4", "t5", "t6"]),
        ("desc", vec!["t6", "t5", "t4", "t3", "t2", "t1", "t0"]),
    ] {
        let mut texts = Vec::new();
        let mut path = format!("/api/chat/sessions/s/messages?order={order}&limit=3");
        loop {
            let page = expect(app.get(&path, &token), 200).await;
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= 3);
            texts.extend(items.iter().map(|m| m["text"].as_str().unwrap().to_owned()));
            match page["next_cursor"].as_str() {
                Some(c) => {
                    path = format!("/api/chat/sessions/s/messages?order={order}&limit=3&cursor={c}")
                }
                None => break,
            }
        }
        assert_eq!(texts, expected, "order {order}");
    }
    let problem = expect_problem(
        app.get("/api/chat/sessions/s/messages?order=sideways", &token),
        422,
    )
    .await;
    assert_eq!(problem["field"], "order");
}

#[sqlx::test]
async fn retention_hides_at_once_and_the_sweeper_deletes_under_a_lock(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| {
        c.conversations.history_retention_days = Some(30)
    })
    .await;
    let token = app.token("t1", "alice");
    let other = app.token("t2", "bob");
    let messages: Vec<Value> = (0..5u32)
        .map(|i| msg(&format!("m{i}"), &format!("t{i}"), "user", i))
        .collect();
    expect(
        app.post(ARCHIVE, &token)
            .json(&batch("s", messages.clone())),
        200,
    )
    .await;
    expect(app.post(ARCHIVE, &other).json(&batch("old", messages)), 200).await;
    // Age three of alice's messages and all of bob's session.
    sqlx::query("UPDATE conversation_messages SET archived_at = now() - interval '40 days' WHERE message_id IN ('m0','m1','m2') OR user_id = 'bob'")
        .execute(&pool).await.unwrap();
    sqlx::query("UPDATE recent_conversation_history SET archived_at = now() - interval '40 days' WHERE user_id = 'bob'")
        .execute(&pool).await.unwrap();
    sqlx::query("UPDATE agent_sessions SET last_activity_at = now() - interval '40 days' WHERE user_id = 'bob'")
        .execute(&pool).await.unwrap();

    // Reads hide expired rows immediately, the cached window included.
    let page = expect(app.get("/api/chat/sessions/s/messages", &token), 200).await;
    let texts: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["t3", "t4"]);
    for _ in 0..2 {
        // The second read is served from the window cache (same version): still only live rows.
        let context = expect(
            app.post("/api/chat/context", &token)
                .json(&json!({"session_id": "s"})),
            200,
        )
        .await;
        assert_eq!(context["window_messages"], 2);
    }
    let sessions = expect(app.get("/api/chat/sessions", &other), 200).await;
    assert_eq!(sessions["items"].as_array().unwrap().len(), 0);
    expect_problem(app.get("/api/chat/sessions/old/messages", &other), 404).await;

    // Another replica holds the lock: this one skips.
    let mut holder = pool.acquire().await.unwrap();
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(Job::HistoryRetention.lock_key())
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    assert!(got);
    assert_eq!(
        sweep_once(&mnemo::db::Db::new(pool.clone()), 30, 2)
            .await
            .unwrap(),
        SweepOutcome::Skipped
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        10
    );
    let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(Job::HistoryRetention.lock_key())
        .fetch_one(&mut *holder)
        .await
        .unwrap();

    // Bounded batches of 2 still remove everything expired, across tenants, and nothing else.
    // 8 messages + 1 batch record + 1 session expired.
    assert_eq!(
        sweep_once(&mnemo::db::Db::new(pool.clone()), 30, 2)
            .await
            .unwrap(),
        SweepOutcome::Deleted(10)
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        2
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM agent_sessions").await, 1);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM recent_conversation_history").await,
        1
    );
    assert_eq!(
        sweep_once(&mnemo::db::Db::new(pool.clone()), 30, 2)
            .await
            .unwrap(),
        SweepOutcome::Deleted(0)
    );
}

#[sqlx::test]
async fn context_compiles_prompt_notes_window_and_new_messages(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 3).await;
    let token = app.token("t1", "alice");
    let history: Vec<Value> = (0..5u32)
        .map(|i| {
            msg(
                &format!("h{i}"),
                &format!("old {i}"),
                if i % 2 == 0 { "user" } else { "ai" },
                i,
            )
        })
        .collect();
    expect(app.post(ARCHIVE, &token).json(&batch("s", history)), 200).await;
    // Notes of another agent must not leak into this agent's context.
    expect(
        app.put("/api/agents/assistant/notes", &token)
            .json(&json!({"notes": "## Preferences\n- tea, no sugar\n"})),
        200,
    )
    .await;
    expect(
        app.put("/api/agents/coach/notes", &token)
            .json(&json!({"notes": "- runs on Sundays\n"})),
        200,
    )
    .await;

    let body = json!({"session_id": "s", "agent_id": "assistant", "new_messages": [msg("n1", "what now?", "user", 30)]});
    let context = expect(app.post("/api/chat/context", &token).json(&body), 200).await;
    assert_eq!(
        (context["new"].as_i64(), context["duplicates"].as_i64()),
        (Some(1), Some(0))
    );
    let messages = context["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "system", "user", "assistant", "user", "user"]
    );
    let notes = messages[1]["content"].as_str().unwrap();
    assert!(notes.starts_with("## Long-term notes"), "{notes}");
    assert!(
        notes.ends_with("## Preferences\n- tea, no sugar"),
        "{notes}"
    );
    assert!(!notes.contains("Sundays"), "{notes}");
    let texts: Vec<&str> = messages[2..]
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["old 2", "old 3", "old 4", "what now?"]);
    assert_eq!(context["window_messages"], 3);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        6
    );

    // Sent again (a retry): stored once, and not repeated between window and new messages.
    let context = expect(app.post("/api/chat/context", &token).json(&body), 200).await;
    assert_eq!(
        (context["new"].as_i64(), context["duplicates"].as_i64()),
        (Some(0), Some(1))
    );
    let texts: Vec<&str> = context["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["old 3", "old 4", "what now?"]);

    let problem = expect_problem(
        app.post("/api/chat/context", &token)
            .json(&json!({"session_id": "", "new_messages": []})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "session_id");
    let problem = expect_problem(
        app.post("/api/chat/context", &token).json(&json!({"session_id": "s", "new_messages": [{"id": "x", "text": "t", "sender": "user", "timestamp": "2026-13-45T99:00:00Z"}]})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "new_messages[0].timestamp");
    // The agent's notes go into the context: its id must be a notes agent name, and the problem
    // names the request's own field.
    let problem = expect_problem(
        app.post("/api/chat/context", &token)
            .json(&json!({"session_id": "s", "agent_id": "not a name", "new_messages": []})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "agent_id");
}

/// Two replicas (two app states on one database): each one's cached window stays correct when the
/// other writes the session.
#[sqlx::test]
async fn window_cache_stays_correct_across_replicas(pool: PgPool) {
    let a = TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 2).await;
    let b = TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 2).await;
    let token = a.token("t1", "alice");
    let window = |context: &Value| -> Vec<String> {
        context["messages"].as_array().unwrap()[2..]
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    let ctx = json!({"session_id": "s"});
    expect(
        a.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![msg("1", "one", "user", 1), msg("2", "two", "ai", 2)],
        )),
        200,
    )
    .await;
    assert_eq!(
        window(&expect(a.post("/api/chat/context", &token).json(&ctx), 200).await),
        ["one", "two"]
    );
    // A's own archive extends its cache; B's write must be seen by A.
    expect(
        a.post(ARCHIVE, &token)
            .json(&batch("s", vec![msg("3", "three", "user", 3)])),
        200,
    )
    .await;
    assert_eq!(
        window(&expect(a.post("/api/chat/context", &token).json(&ctx), 200).await),
        ["two", "three"]
    );
    assert_eq!(
        window(&expect(b.post("/api/chat/context", &token).json(&ctx), 200).await),
        ["two", "three"]
    );
    expect(
        b.post(ARCHIVE, &token)
            .json(&batch("s", vec![msg("4", "four", "ai", 4)])),
        200,
    )
    .await;
    assert_eq!(
        window(&expect(a.post("/api/chat/context", &token).json(&ctx), 200).await),
        ["three", "four"]
    );
    // A deletes the session; B's cache must not resurrect it.
    expect(a.delete("/api/chat/sessions/s", &token), 204).await;
    assert!(window(&expect(b.post("/api/chat/context", &token).json(&ctx), 200).await).is_empty());
}

#[sqlx::test]
async fn chat_without_a_model_is_503_pointing_at_context(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let body = json!({"session_id": "s", "new_messages": [msg("n1", "hi", "user", 1)]});
    let problem = expect_problem(app.post("/api/chat", &token).json(&body), 503).await;
    assert_eq!(problem["fallback"], "/api/chat/context");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("/api/chat/context")
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        0
    );
}

/// A scripted OpenAI-compatible server: the first call of a turn answers a tool call, the next one
/// (which carries the tool result) a final answer. Records every request body.
#[derive(Clone, Default)]
struct FakeModel {
    requests: Arc<Mutex<Vec<Value>>>,
    /// Misbehave: ask for a tool whenever tools are offered.
    always_tools: bool,
    /// Misbehave: fail every call.
    broken: bool,
}

async fn fake_completions(
    State(fake): State<FakeModel>,
    axum::Json(body): axum::Json<Value>,
) -> axum::response::Response {
    fake.requests.lock().unwrap().push(body.clone());
    let messages = body["messages"].as_array().unwrap();
    if fake.broken {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "model overloaded",
        )
            .into_response();
    }
    let has_tool_result = messages.last().is_some_and(|m| m["role"] == "tool");
    if fake.always_tools && body.get("tools").is_some() {
        let n = fake.requests.lock().unwrap().len();
        // First store a memory, then search for it, then retrieve it, then keep searching.
        let (name, arguments) = match n {
            1 => (
                "store_memory",
                json!({"key": "tea", "content": "green tea\nno sugar\n",
                "description": "tea preferences"}),
            ),
            2 => ("search_memory", json!({"query": "green tea"})),
            3 => (
                "retrieve_memory",
                json!({"key": "tea", "line_start": 2, "line_count": 1}),
            ),
            4 => (
                "recall",
                json!({"query": "what about sugar?", "kinds": ["memory"]}),
            ),
            _ => ("search_memory", json!({"query": "tea"})),
        };
        let call = json!({"id": format!("loop_{n}"), "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()}});
        return axum::Json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]}))
        .into_response();
    }
    if fake.always_tools {
        return axum::Json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": "I will stop searching."}}]}))
        .into_response();
    }
    let stream = body["stream"] == true;
    if !has_tool_result {
        let call = json!({"id": "call_1", "type": "function",
            "function": {"name": "manage_long_term_memory",
                "arguments": "{\"operation\":\"append\",\"content\":\"- likes green tea\"}"}});
        if stream {
            let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
                "function": {"name": "manage_long_term_memory", "arguments": "{\"operation\":"}}]}}]});
            let rest = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "\"read\"}"}}]}}]});
            return sse(&[chunk, rest]);
        }
        return axum::Json(
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]}),
        )
        .into_response();
    }
    if stream {
        let parts = ["You like ", "green tea."]
            .map(|p| json!({"choices": [{"index": 0, "delta": {"content": p}}]}));
        return sse(&parts);
    }
    axum::Json(json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "You like green tea."}}]}))
    .into_response()
}

fn sse(chunks: &[Value]) -> axum::response::Response {
    let mut text = String::new();
    for chunk in chunks {
        text.push_str(&format!("data: {chunk}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    ([("content-type", "text/event-stream")], text).into_response()
}

async fn start_fake_model() -> (String, FakeModel) {
    start_fake(FakeModel::default()).await
}

async fn start_fake(fake: FakeModel) -> (String, FakeModel) {
    let router = axum::Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(fake_completions),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, fake)
}

#[sqlx::test]
async fn chat_runs_tool_calls_and_stores_the_reply(pool: PgPool) {
    let (url, fake) = start_fake_model().await;
    let app = TestApp::with_config(pool.clone(), |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("fake-model".into());
        c.llm.api_key = Some("sk-test".into());
    })
    .await;
    let token = app.token("t1", "alice");
    let body = json!({"session_id": "s", "agent_id": "assistant", "new_messages": [msg("n1", "what do I like?", "user", 1)]});
    let response = expect(app.post("/api/chat", &token).json(&body), 200).await;
    assert_eq!(response["reply"]["text"], "You like green tea.");
    assert_eq!(response["reply"]["sender"], "ai");
    let tools = response["tool_messages"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(
        tools[0]["tool_calls"][0]["function"]["name"],
        "manage_long_term_memory"
    );
    assert_eq!(tools[1]["sender"], "tool");
    assert_eq!(tools[1]["tool_call_id"], "call_1");
    assert!(
        tools[1]["text"].as_str().unwrap().contains("appended"),
        "{}",
        tools[1]
    );

    let requests = fake.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "fake-model");
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        [
            "store_memory",
            "retrieve_memory",
            "grep_memory",
            "search_memory",
            "manage_long_term_memory",
            "recall",
        ]
    );
    let notes_tool = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "manage_long_term_memory")
        .unwrap();
    let schema = &notes_tool["function"]["parameters"];
    // The session names the agent whose notes these are; the model does not.
    assert!(schema["properties"].get("agent_name").is_none(), "{schema}");
    assert_eq!(
        schema["properties"]["operation"]["enum"]
            .as_array()
            .unwrap()
            .len(),
        7
    );
    assert_eq!(schema["properties"]["operation"]["default"], "read");
    assert!(schema["properties"]["section_header"].is_object());
    let second = requests[1]["messages"].as_array().unwrap();
    assert_eq!(second[second.len() - 2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(second[second.len() - 1]["tool_call_id"], "call_1");
    assert_eq!(second[second.len() - 3]["content"], "what do I like?");

    // Stored in order: the user's message, the tool call, its result, the reply.
    let page = expect(app.get("/api/chat/sessions/s/messages", &token), 200).await;
    let senders: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["sender"].as_str().unwrap())
        .collect();
    assert_eq!(senders, ["user", "ai", "tool", "ai"]);
    assert_eq!(page["items"][3]["id"], response["reply"]["id"]);

    // The next turn's context carries the whole exchange, tool call and result included.
    let context = expect(
        app.post("/api/chat/context", &token)
            .json(&json!({"session_id": "s"})),
        200,
    )
    .await;
    let roles: Vec<&str> = context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "system", "user", "assistant", "tool", "assistant"]
    );
    // The tool call really wrote the notes, and the next context shows them in their section.
    let notes = context["messages"][1]["content"].as_str().unwrap();
    assert!(
        notes.starts_with("## Long-term notes") && notes.contains("- likes green tea"),
        "{notes}"
    );
}

#[sqlx::test]
async fn chat_streams_server_sent_events(pool: PgPool) {
    let (url, fake) = start_fake_model().await;
    let app = TestApp::with_config(pool.clone(), |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("fake-model".into());
    })
    .await;
    let token = app.token("t1", "alice");
    let body =
        json!({"session_id": "s", "new_messages": [msg("n1", "what do I like?", "user", 1)]});
    let response = app
        .post("/api/chat", &token)
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = response.text().await.unwrap();
    let mut events: Vec<(String, String)> = Vec::new();
    for block in text.split("\n\n") {
        let mut name = String::new();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if !name.is_empty() {
            events.push((name, data));
        }
    }
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        ["tool_call", "tool_result", "delta", "delta", "done"],
        "{text}"
    );
    let deltas: String = events
        .iter()
        .filter(|e| e.0 == "delta")
        .map(|e| {
            serde_json::from_str::<Value>(&e.1).unwrap()["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(deltas, "You like green tea.");
    let call: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(call["function"]["arguments"], "{\"operation\":\"read\"}");
    let done: Value = serde_json::from_str(&events[4].1).unwrap();
    assert_eq!(done["reply"]["text"], "You like green tea.");
    assert!(
        fake.requests
            .lock()
            .unwrap()
            .iter()
            .all(|r| r["stream"] == true)
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM conversation_messages").await,
        4
    );
}

#[sqlx::test]
async fn demo_page_and_client_are_served_without_a_token(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let page = app.client.get(app.url("/demo")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("/demo/chat-archiver.js")
    );
    let script = app
        .client
        .get(app.url("/demo/chat-archiver.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert!(
        script
            .text()
            .await
            .unwrap()
            .contains("export class ChatArchiver")
    );
    // The API next to them still needs a token.
    expect_problem(app.client.get(app.url("/api/chat/sessions")), 401).await;
}

#[sqlx::test]
async fn chat_tool_loop_is_bounded_and_model_failures_are_502(pool: PgPool) {
    let looping = FakeModel {
        always_tools: true,
        ..FakeModel::default()
    };
    let (url, fake) = start_fake(looping).await;
    let app = TestApp::with_config(pool.clone(), |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("m".into());
        c.conversations.chat_max_tool_rounds = 4;
    })
    .await;
    let token = app.token("t1", "alice");
    let body = json!({"session_id": "s", "new_messages": [msg("n1", "find tea", "user", 1)]});
    let response = expect(app.post("/api/chat", &token).json(&body), 200).await;
    assert_eq!(response["reply"]["text"], "I will stop searching.");
    // Four rounds of (call + result), then one last call without tools.
    assert_eq!(response["tool_messages"].as_array().unwrap().len(), 8);
    let requests = fake.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    assert!(requests[4].get("tools").is_none());
    // The tools ran against detail memory as the caller.
    let results: Vec<Value> = response["tool_messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"] == "tool")
        .map(|m| serde_json::from_str(m["text"].as_str().unwrap()).unwrap())
        .collect();
    assert!(
        results[0]["placeholder"]
            .as_str()
            .unwrap()
            .starts_with("[MemoryRef: tea - "),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["hits"][0]["memory_key"], "tea", "{}", results[1]);
    assert_eq!(results[2]["content"], "no sugar\n", "{}", results[2]);
    assert_eq!(results[3]["hits"][0]["kind"], "memory", "{}", results[3]);
    assert_eq!(results[3]["hits"][0]["memory_key"], "tea", "{}", results[3]);
    let last = requests[4]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "loop_4");
    let stored = expect(app.get("/api/memories/tea", &token), 200).await;
    assert_eq!(stored["content"], "green tea\nno sugar\n");
    expect_problem(app.get("/api/memories/tea", &app.token("t1", "bob")), 404).await;

    let broken = FakeModel {
        broken: true,
        ..FakeModel::default()
    };
    let (url, _) = start_fake(broken).await;
    let app = TestApp::with_config(pool.clone(), |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("m".into());
    })
    .await;
    let problem = expect_problem(app.post("/api/chat", &token).json(&body), 502).await;
    assert!(
        problem["detail"].as_str().unwrap().contains("500"),
        "{problem}"
    );
}

async fn session_detail(app: &TestApp, token: &str, session: &str) -> Value {
    expect(
        app.get(&format!("/api/chat/sessions/{session}"), token),
        200,
    )
    .await
}

/// Polls the session until its summary covers `covers` messages (the refresh runs after the
/// response, in the background).
async fn summary_covering(app: &TestApp, token: &str, session: &str, covers: i64) -> Value {
    app.state.settle().await;
    let detail = session_detail(app, token, session).await;
    assert_eq!(
        detail["summary_message_count"].as_i64(),
        Some(covers),
        "the summary covers {covers} messages: {detail}"
    );
    detail
}

fn principal(tenant: &str, user: &str) -> mnemo::auth::Principal {
    mnemo::auth::Principal {
        tenant_id: tenant.into(),
        user_id: user.into(),
        scopes: vec![mnemo::auth::Scope::Read, mnemo::auth::Scope::Write],
    }
}

/// Every `MNEMO_CHAT_SUMMARY_EVERY` messages the session's summary is refreshed in the background;
/// without a model it lists topics, names and the open questions. It shows in the sessions list
/// and the session, and the compiled context carries it for sessions longer than the window.
#[sqlx::test]
async fn session_summary_refreshes_without_a_model(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.conversations.chat_summary_every = 6;
        c.conversations.window_messages = 4;
        c.conversations.chat_recall_k = 0;
    })
    .await;
    let token = app.token("t1", "alice");
    let first = vec![
        msg(
            "m1",
            "We are moving the Postgres cluster to Frankfurt.",
            "user",
            1,
        ),
        msg(
            "m2",
            "Then the cluster needs a fresh backup first.",
            "ai",
            2,
        ),
        msg("m3", "Is the replica in Frankfurt ready?", "user", 3),
        msg(
            "m4",
            "The replica is ready; the backup runs tonight.",
            "ai",
            4,
        ),
        msg("m5", "Good, Marta will watch the backup.", "user", 5),
    ];
    expect(
        app.post(ARCHIVE, &token)
            .json(&batch("plain", first.clone())),
        200,
    )
    .await;
    // Five messages are not enough: the refresh finds nothing due.
    let due = mnemo::conversations::summary::refresh(
        &app.state,
        &mnemo::access::Writer::new(app.state.db.clone(), principal("t1", "alice")).unwrap(),
        "plain",
    )
    .await
    .unwrap();
    assert!(!due, "five of six");
    let detail = session_detail(&app, &token, "plain").await;
    assert!(detail["summary"].is_null(), "{detail}");
    assert_eq!(detail["message_count"], 5);
    assert_eq!(detail["summary_message_count"], 0);

    // Re-sent messages do not count; the sixth new one does.
    let mut again = first.clone();
    again.push(msg("m6", "Noted. I will check it after midnight.", "ai", 6));
    again.push(msg(
        "m7",
        "Who pays the egress bill for the transfer?",
        "user",
        7,
    ));
    expect(app.post(ARCHIVE, &token).json(&batch("plain", again)), 200).await;
    let detail = summary_covering(&app, &token, "plain", 7).await;
    assert_eq!(detail["message_count"], 7);
    assert!(detail["summary_updated_at"].is_string());
    let summary = detail["summary"].as_str().unwrap().to_owned();
    assert!(
        summary.starts_with("7 messages (4 from the user, 3 from the assistant)."),
        "{summary}"
    );
    assert!(
        summary.contains("\nTopics: backup, cluster, replica"),
        "{summary}"
    );
    assert!(
        summary.contains("\nNames: Frankfurt, Postgres, Marta."),
        "{summary}"
    );
    // The replica question was answered; the egress one is still open.
    assert!(
        summary.ends_with("\nOpen questions:\n- Who pays the egress bill for the transfer?"),
        "{summary}"
    );

    // The list shows it; another user sees neither the session nor its summary.
    let list = expect(app.get("/api/chat/sessions", &token), 200).await;
    assert_eq!(list["items"][0]["summary"], summary.as_str());
    assert_eq!(list["items"][0]["summary_message_count"], 7);
    expect_problem(
        app.get("/api/chat/sessions/plain", &app.token("t1", "bob")),
        404,
    )
    .await;
    expect_problem(app.get("/api/chat/sessions/nope", &token), 404).await;

    // The session is longer than the window of 4: the context carries the summary before it.
    let turn = json!({"session_id": "plain",
        "new_messages": [msg("m8", "And what about the DNS switch?", "user", 8)]});
    let context = expect(app.post("/api/chat/context", &token).json(&turn), 200).await;
    assert_eq!(context["window_messages"], 4);
    let messages = context["messages"].as_array().unwrap();
    let at = messages
        .iter()
        .position(|m| {
            m["role"] == "system"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("## Earlier in this conversation"))
        })
        .expect("the summary is in the context");
    assert!(
        messages[at]["content"]
            .as_str()
            .unwrap()
            .ends_with(&summary),
        "{}",
        messages[at]
    );
    assert_eq!(
        messages[at + 1]["content"],
        "The replica is ready; the backup runs tonight."
    );
    assert_eq!(
        messages.last().unwrap()["content"],
        "And what about the DNS switch?"
    );

    // A session within the window has no such section, even with a summary.
    expect(
        app.post(ARCHIVE, &token)
            .json(&batch("short", vec![msg("a1", "hi there", "user", 1)])),
        200,
    )
    .await;
    let turn = json!({"session_id": "short",
        "new_messages": [msg("a2", "what is new?", "user", 2)]});
    let context = expect(app.post("/api/chat/context", &token).json(&turn), 200).await;
    assert!(
        !context
            .to_string()
            .contains("## Earlier in this conversation"),
        "{context}"
    );
}

/// A refresh folds the messages archived since the last one into the stored digest state and
/// reads no older one: its cost follows the new messages, not the session's length. A session
/// whose summary has no stored state (one written before the state was kept) starts it again
/// from its last messages; the state goes with its session.
#[sqlx::test]
async fn the_summary_folds_in_only_the_messages_since(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| {
        c.conversations.chat_summary_every = 3;
        c.conversations.chat_recall_k = 0;
    })
    .await;
    let token = app.token("t1", "alice");
    let archive = |messages: Vec<Value>| {
        let request = app.post(ARCHIVE, &token).json(&batch("long", messages));
        async { expect(request, 200).await }
    };
    archive(vec![
        msg("m1", "The kafka brokers lag behind.", "user", 1),
        msg("m2", "The kafka consumers need more partitions.", "ai", 2),
        msg("m3", "Which partitions lag most?", "user", 3),
    ])
    .await;
    let detail = summary_covering(&app, &token, "long", 3).await;
    let summary = detail["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("3 messages (2 from the user, 1 from the assistant)."),
        "{summary}"
    );
    assert!(summary.contains("Topics: kafka, partitions"), "{summary}");
    let last_seq: i64 =
        sqlx::query_scalar("SELECT max(seq) FROM conversation_messages WHERE session_id = 'long'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let through: i64 = sqlx::query_scalar("SELECT through_seq FROM session_digests")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(through, last_seq);

    // Old messages changed behind the server's back are not read again: the next summary
    // counts the three new messages on top of the state, and only their words.
    sqlx::query("UPDATE conversation_messages SET text = 'The zeppelin waits.' WHERE message_id IN ('m1', 'm2')")
        .execute(&pool)
        .await
        .unwrap();
    archive(vec![
        msg(
            "m4",
            "The partitions of the orders topic lag most.",
            "ai",
            4,
        ),
        msg("m5", "Then rebalance the orders topic tonight.", "user", 5),
        msg(
            "m6",
            "I will rebalance the orders topic at midnight.",
            "ai",
            6,
        ),
    ])
    .await;
    let detail = summary_covering(&app, &token, "long", 6).await;
    let summary = detail["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("6 messages (3 from the user, 3 from the assistant)."),
        "{summary}"
    );
    assert!(
        summary.ends_with("Topics: partitions, orders, topic, kafka, rebalance."),
        "{summary}"
    );
    assert!(!summary.contains("zeppelin"), "{summary}");
    assert!(
        !summary.contains("Open questions"),
        "the question was taken up: {summary}"
    );

    // Without a stored state the refresh reads the session's last messages, all six here.
    sqlx::query("DELETE FROM session_digests")
        .execute(&pool)
        .await
        .unwrap();
    archive(vec![
        msg("m7", "Is the rebalance done?", "user", 7),
        msg("m8", "Not yet.", "ai", 8),
        msg("m9", "Who watches the consumers tonight?", "user", 9),
    ])
    .await;
    let detail = summary_covering(&app, &token, "long", 9).await;
    let summary = detail["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("9 messages (5 from the user, 4 from the assistant)."),
        "{summary}"
    );
    assert!(
        summary.contains("zeppelin"),
        "read again from the start: {summary}"
    );
    assert!(
        summary.ends_with(
            "Open questions:\n- Is the rebalance done?\n- Who watches the consumers tonight?"
        ),
        "{summary}"
    );

    // Deleting the session deletes its digest state.
    expect(app.delete("/api/chat/sessions/long", &token), 204).await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM session_digests")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// The refresh reads and writes as the session's own user: three users (two tenants, the same
/// user id in both) with a session of the same id each get a summary of their own messages
/// only, and a refresh of one leaves the others' summaries and digest states as they were.
#[sqlx::test]
async fn a_summary_refresh_reads_and_writes_only_its_users_session(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| {
        c.conversations.chat_summary_every = 2;
        c.conversations.chat_recall_k = 0;
    })
    .await;
    let users = [
        ("t1", "alice", "kafka"),
        ("t2", "alice", "zeppelin"),
        ("t1", "bob", "glacier"),
    ];
    for (tenant, user, word) in users {
        let token = app.token(tenant, user);
        let request = app.post(ARCHIVE, &token).json(&batch(
            "same",
            vec![
                msg("m1", &format!("The {word} schedule slipped."), "user", 1),
                msg(
                    "m2",
                    &format!("The {word} schedule needs a review."),
                    "ai",
                    2,
                ),
            ],
        ));
        expect(request, 200).await;
        let summary = summary_covering(&app, &token, "same", 2).await["summary"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            summary.contains(&format!("Topics: {word}, schedule")),
            "{summary}"
        );
        for (_, _, other) in users.iter().filter(|u| u.2 != word) {
            assert!(
                !summary.contains(other),
                "{user}@{tenant} read {other}: {summary}"
            );
        }
    }
    let digests: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT d.tenant_id, d.user_id, d.through_seq FROM session_digests d ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let before: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT tenant_id || '/' || user_id, summary FROM agent_sessions ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(digests.len(), 3, "{digests:?}");
    // Each digest went through its own user's last message.
    for (tenant, user, through) in &digests {
        let last: i64 = sqlx::query_scalar(
            "SELECT max(seq) FROM conversation_messages WHERE tenant_id = $1 AND user_id = $2",
        )
        .bind(tenant)
        .bind(user)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(*through, last, "{tenant}/{user}");
    }

    // Two more messages for alice of t1 only: her summary moves on, the others stay.
    let token = app.token("t1", "alice");
    let request = app.post(ARCHIVE, &token).json(&batch(
        "same",
        vec![
            msg("m3", "Is the kafka rollout still on?", "user", 3),
            msg("m4", "The kafka rollout waits for the review.", "ai", 4),
        ],
    ));
    expect(request, 200).await;
    let summary = summary_covering(&app, &token, "same", 4).await["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(summary.starts_with("4 messages"), "{summary}");
    let after: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT tenant_id || '/' || user_id, summary FROM agent_sessions ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (was, now) in before.iter().zip(&after) {
        if was.0 == "t1/alice" {
            assert_ne!(was.1, now.1);
        } else {
            assert_eq!(was, now);
        }
    }
}

/// The summary write answers how many messages its summary leaves uncovered, so the refresher
/// knows whether another is due without reading again; a write older than the stored summary
/// stores nothing and answers nothing.
#[sqlx::test]
async fn the_summary_write_answers_what_it_leaves_uncovered(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| {
        c.conversations.chat_summary_every = 0;
        c.conversations.chat_recall_k = 0;
    })
    .await;
    let token = app.token("t1", "alice");
    let messages = (1..=5)
        .map(|i| msg(&format!("m{i}"), &format!("note {i}"), "user", i))
        .collect();
    expect(app.post(ARCHIVE, &token).json(&batch("s", messages)), 200).await;
    let write = |covers: i32| {
        sqlx::query_as::<_, (bool, Option<i32>)>(
            "SELECT stored, uncovered FROM mnemo_write_summary('s', 'a summary', $1, 0, '{}', 't1', 'alice')",
        )
        .bind(covers)
        .fetch_one(&pool)
    };
    assert_eq!(write(2).await.unwrap(), (true, Some(3)));
    assert_eq!(write(5).await.unwrap(), (true, Some(0)));
    assert_eq!(
        write(4).await.unwrap(),
        (false, None),
        "older than the stored one"
    );
    // Another user's call never reaches alice's session.
    let other: (bool, Option<i32>) = sqlx::query_as(
        "SELECT stored, uncovered FROM mnemo_write_summary('s', 'x', 9, 0, '{}', 't1', 'bob')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(other, (false, None));
    let detail = session_detail(&app, &token, "s").await;
    assert_eq!(detail["summary"], "a summary");
    assert_eq!(detail["summary_message_count"], 5);
}

/// A stand-in model answering the running-summary prompt (and failing on request).
#[derive(Clone, Default)]
struct SummaryModel {
    requests: Arc<Mutex<Vec<Value>>>,
    broken: Arc<std::sync::atomic::AtomicBool>,
}

impl SummaryModel {
    fn prompts(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| {
                r["messages"][1]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }
}

async fn summary_completions(
    State(model): State<SummaryModel>,
    axum::Json(body): axum::Json<Value>,
) -> axum::response::Response {
    model.requests.lock().unwrap().push(body.clone());
    if model.broken.load(std::sync::atomic::Ordering::SeqCst) {
        return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "model down").into_response();
    }
    let n = model.requests.lock().unwrap().len();
    let content = format!("MODEL SUMMARY {n}: moving Postgres to Frankfurt; egress bill open.");
    axum::Json(json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": content}}]}))
    .into_response()
}

/// With a model the summary is the model's, asked off the write path with the previous summary
/// and only the messages since; when the model fails, the digest stands in.
#[sqlx::test]
async fn session_summary_uses_the_model_when_there_is_one(pool: PgPool) {
    let model = SummaryModel::default();
    let router = axum::Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(summary_completions),
        )
        .with_state(model.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let app = TestApp::with_config(pool, |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("fake-model".into());
        c.conversations.chat_summary_every = 3;
        c.conversations.window_messages = 2;
        c.conversations.chat_recall_k = 0;
    })
    .await;
    let token = app.token("t1", "alice");
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "modelled",
            vec![
                msg("m1", "We move Postgres to Frankfurt.", "user", 1),
                msg("m2", "Fine, after the backup.", "ai", 2),
            ],
        )),
        200,
    )
    .await;
    // Not due, and an archive never waits for the model.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(model.prompts().is_empty(), "no model call yet");
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "modelled",
            vec![msg("m3", "Who pays the egress bill?", "user", 3)],
        )),
        200,
    )
    .await;
    let detail = summary_covering(&app, &token, "modelled", 3).await;
    assert_eq!(
        detail["summary"],
        "MODEL SUMMARY 1: moving Postgres to Frankfurt; egress bill open."
    );
    let prompts = model.prompts();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(
        prompts[0].starts_with("Previous summary:\nNo summary yet.\n\nMessages since"),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[0].contains("[user] We move Postgres to Frankfurt.\n[assistant] Fine, after the backup.\n[user] Who pays the egress bill?"),
        "{}",
        prompts[0]
    );
    assert_eq!(model.requests.lock().unwrap()[0]["model"], "fake-model");

    // The next refresh builds on the stored summary and sees only the messages since.
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "modelled",
            vec![
                msg("m4", "The backup finished at 02:10.", "ai", 4),
                msg("m5", "Start the transfer then.", "user", 5),
                msg("m6", "Transfer started.", "ai", 6),
            ],
        )),
        200,
    )
    .await;
    let detail = summary_covering(&app, &token, "modelled", 6).await;
    assert_eq!(
        detail["summary"],
        "MODEL SUMMARY 2: moving Postgres to Frankfurt; egress bill open."
    );
    let second = model.prompts()[1].clone();
    assert!(
        second.starts_with("Previous summary:\nMODEL SUMMARY 1: moving Postgres"),
        "{second}"
    );
    assert!(
        second.contains("[assistant] The backup finished at 02:10."),
        "{second}"
    );
    assert!(
        !second.contains("We move Postgres"),
        "covered messages are not resent: {second}"
    );
    let list = expect(app.get("/api/chat/sessions", &token), 200).await;
    assert_eq!(list["items"][0]["summary"], detail["summary"]);
    let turn = json!({"session_id": "modelled",
        "new_messages": [msg("m7", "Status?", "user", 7)]});
    let context = expect(app.post("/api/chat/context", &token).json(&turn), 200).await;
    assert!(
        context["messages"][2]["content"]
            .as_str()
            .unwrap()
            .ends_with("MODEL SUMMARY 2: moving Postgres to Frankfurt; egress bill open."),
        "{context}"
    );

    // A failing model: the digest stands in.
    model
        .broken
        .store(true, std::sync::atomic::Ordering::SeqCst);
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "modelled",
            vec![
                msg("m8", "Is Frankfurt done?", "user", 8),
                msg("m9", "Almost.", "ai", 9),
            ],
        )),
        200,
    )
    .await;
    let detail = summary_covering(&app, &token, "modelled", 9).await;
    let summary = detail["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("9 messages (5 from the user, 4 from the assistant)."),
        "{summary}"
    );
    assert!(summary.contains("Names: Frankfurt"), "{summary}");
    assert_eq!(model.prompts().len(), 3);
}

//! `Idempotency-Key`: a retry replays the first response and writes nothing; another request
//! under the same key is 422, the same key in flight 409; keys are per tenant and user, expire,
//! and stay free when the request failed.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem};

const KEY: &str = "idempotency-key";
const REPLAYED: &str = "idempotent-replayed";

/// A response as the client saw it.
struct Seen {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn replayed(&self) -> bool {
        self.headers.get(REPLAYED).is_some_and(|v| v == "true")
    }
}

async fn send(request: reqwest::RequestBuilder) -> Seen {
    let response = request.send().await.expect("request sent");
    Seen {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.expect("body").to_vec(),
    }
}

/// Rows in every table but the idempotency records: any write shows here.
async fn total_rows(pool: &PgPool) -> i64 {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'
           AND tablename NOT IN ('_sqlx_migrations', 'idempotency_keys')",
    )
    .fetch_all(pool)
    .await
    .expect("tables");
    let mut total = 0;
    for table in tables {
        total += count(pool, &format!("SELECT count(*) FROM public.\"{table}\"")).await;
    }
    total
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

async fn new_task(app: &TestApp, token: &str) -> String {
    let body = expect(
        app.post("/api/tasks", token)
            .json(&json!({"name": "probe", "plan": ["one", "two"]})),
        201,
    )
    .await;
    body["id"].as_str().expect("task id").to_owned()
}

fn multipart(request: reqwest::RequestBuilder, bytes: &[u8]) -> reqwest::RequestBuilder {
    let boundary = "idem-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"out.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    request
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
}

/// Every creating or appending route: the retry answers the same status, headers that matter and
/// body, marked replayed, and no table gains a row.
#[sqlx::test]
async fn retries_replay_without_writing_again_on_every_route(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let id = new_task(&app, &token).await;
    let action = expect(
        app.post(&format!("/api/tasks/{id}/items/1/actions"), &token)
            .json(&json!({"action_type": "cli", "summary": "ls"})),
        201,
    )
    .await;
    let action_id = action["id"].as_str().unwrap().to_owned();
    let archive = app
        .get(&format!("/api/tasks/{id}/export"), &token)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let big_output = "error: something failed badly\n".repeat(400);
    let t = |path: &str| format!("/api/tasks/{id}{path}");
    let notes = "/api/agents/assistant/notes";

    // (name, request, whether the first answer writes rows)
    let cases: Vec<(&str, reqwest::RequestBuilder, bool)> = vec![
        (
            "task",
            app.post("/api/tasks", &token)
                .json(&json!({"name": "retry me", "plan": ["a"]})),
            true,
        ),
        (
            "events",
            app.post(&t("/events"), &token).json(&json!({"events": [
                {"step_narrative": "ran tests", "status": "COMPLETED"},
                {"step_narrative": "built", "status": "COMPLETED"}
            ]})),
            true,
        ),
        (
            "message",
            app.post(&t("/messages"), &token)
                .json(&json!({"content": "halfway"})),
            true,
        ),
        (
            "snapshot",
            app.post(&t("/snapshots"), &token)
                .json(&json!({"label": "ctx", "content": "state"})),
            true,
        ),
        (
            "step",
            app.post(&t("/steps"), &token).json(&json!({
                "agent_name": "coder", "parts": [{"type": "text", "text": "listing"}]
            })),
            true,
        ),
        (
            "artifact",
            app.post(&t("/artifacts?name=log.txt"), &token)
                .header("content-type", "text/plain")
                .body("artifact bytes"),
            true,
        ),
        (
            "artifact multipart",
            multipart(app.post(&t("/artifacts"), &token), b"form bytes"),
            true,
        ),
        (
            "wait",
            app.post(&t("/waits"), &token).json(&json!({
                "target_type": "process", "target_id": "42", "criteria": "done",
                "timeout_seconds": 60, "poll_interval": 1
            })),
            true,
        ),
        (
            "action",
            app.post(&t("/items/2/actions"), &token)
                .json(&json!({"action_type": "cli", "summary": "make"})),
            true,
        ),
        (
            "action log",
            app.post(&t(&format!("/actions/{action_id}/logs")), &token)
                .json(&json!({"log_type": "stdout", "content": "ok"})),
            true,
        ),
        (
            "plan",
            app.put(&t("/plan"), &token)
                .json(&json!({"plan": ["one", "two", "three"], "reason": "more"})),
            true,
        ),
        (
            "update with query",
            app.post(&t("/update"), &token)
                .json(&json!({"message": "step one done", "query": "where was I?"})),
            true,
        ),
        (
            "import",
            app.post("/api/tasks/import", &token)
                .header("content-type", "application/gzip")
                .body(archive),
            true,
        ),
        (
            "memory",
            app.post("/api/memories", &token)
                .json(&json!({"content": "remember this"})),
            true,
        ),
        (
            "capture stored",
            app.post("/api/memories/capture", &token)
                .json(&json!({"content": big_output, "command": "make"})),
            true,
        ),
        (
            "capture inline",
            app.post("/api/memories/capture", &token)
                .json(&json!({"content": "ok\n", "command": "true"})),
            false,
        ),
        (
            "notes append",
            app.post(&format!("{notes}/operations"), &token)
                .json(&json!({"operation": "append", "content": "- likes tea"})),
            true,
        ),
        (
            "notes restore",
            app.post(&format!("{notes}/revisions/1/restore"), &token),
            true,
        ),
        (
            "chat archive",
            app.post("/api/chat/session/archive_messages", &token).json(
                &json!({"session_id": "s1", "messages_batch": [
                    {"id": "m1", "text": "hi", "sender": "user",
                     "timestamp": "2026-11-21T10:00:00.000Z"}
                ]}),
            ),
            true,
        ),
    ];
    for (name, request, writes) in cases {
        let key = format!("retry-{name}");
        let request = request.header(KEY, &key);
        let before = total_rows(&pool).await;
        let first = send(request.try_clone().expect("clonable")).await;
        assert!(
            (200..300).contains(&first.status),
            "{name}: {} {}",
            first.status,
            String::from_utf8_lossy(&first.body)
        );
        assert!(!first.replayed(), "{name}: the first answer is no replay");
        let after_first = total_rows(&pool).await;
        if writes {
            assert!(after_first > before, "{name}: the first request wrote");
        }
        let retry = send(request).await;
        assert_eq!(retry.status, first.status, "{name}: status");
        assert_eq!(
            retry.body,
            first.body,
            "{name}: body\n{}\n{}",
            String::from_utf8_lossy(&first.body),
            String::from_utf8_lossy(&retry.body)
        );
        assert!(retry.replayed(), "{name}: marked replayed");
        for header in ["content-type", "etag", "location"] {
            assert_eq!(
                retry.headers.get(header),
                first.headers.get(header),
                "{name}: {header}"
            );
        }
        assert_eq!(
            total_rows(&pool).await,
            after_first,
            "{name}: the retry wrote nothing"
        );
    }
    let stored = count(&pool, "SELECT count(*) FROM idempotency_keys").await;
    assert_eq!(stored, 19, "one record per key");
}

/// The replay answers the first request's data even after it changed, and via the API the
/// appended rows exist once.
#[sqlx::test]
async fn replays_answer_the_first_response_and_rows_exist_once(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let id = new_task(&app, &token).await;
    let events = format!("/api/tasks/{id}/events");
    let append = || {
        app.post(&events, &token)
            .header(KEY, "batch-7")
            .json(&json!({"events": [{"step_narrative": "a", "status": "COMPLETED"}]}))
    };
    let first = expect(append(), 201).await;
    // Another batch lands in between; the retry still answers where the first one landed.
    expect(
        app.post(&events, &token)
            .json(&json!({"events": [{"step_narrative": "b", "status": "COMPLETED"}]})),
        201,
    )
    .await;
    let retry = send(append()).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.json(), first);
    let page = expect(app.get(&events, &token), 200).await;
    let narratives: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["step_narrative"].as_str().unwrap())
        .collect();
    assert_eq!(narratives, ["a", "b"]);

    // Notes: appended once, and the replay carries the first answer's ETag.
    let ops = "/api/agents/assistant/notes/operations";
    let append_note = || {
        app.post(ops, &token)
            .header(KEY, "note-1")
            .json(&json!({"operation": "append", "content": "- likes tea"}))
    };
    let first = send(append_note()).await;
    assert_eq!(first.status, 200);
    let retry = send(append_note()).await;
    assert!(retry.replayed());
    assert_eq!(retry.headers.get("etag"), first.headers.get("etag"));
    assert_eq!(retry.headers["etag"], "\"1\"");
    let notes = expect(app.get("/api/agents/assistant/notes", &token), 200).await;
    assert_eq!(notes["version"], 1);
    assert_eq!(
        notes["notes"]
            .as_str()
            .unwrap()
            .matches("likes tea")
            .count(),
        1
    );

    // Task creation: one task.
    let create = || {
        app.post("/api/tasks", &token)
            .header(KEY, "create-1")
            .json(&json!({"name": "once"}))
    };
    let created = expect(create(), 201).await;
    let again = send(create()).await;
    assert_eq!(again.json()["id"], created["id"]);
    let tasks = expect(app.get("/api/tasks", &token), 200).await;
    let named_once = tasks["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "once")
        .count();
    assert_eq!(named_once, 1);
}

/// The same key for a different body, path or method is 422 naming the header; nothing runs.
#[sqlx::test]
async fn the_same_key_for_another_request_is_422(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let id = new_task(&app, &token).await;
    expect(
        app.post(&format!("/api/tasks/{id}/messages"), &token)
            .header(KEY, "k1")
            .json(&json!({"content": "first"})),
        201,
    )
    .await;
    let before = total_rows(&pool).await;
    let other_body = app
        .post(&format!("/api/tasks/{id}/messages"), &token)
        .header(KEY, "k1")
        .json(&json!({"content": "second"}));
    let other_path = app
        .post(&format!("/api/tasks/{id}/snapshots"), &token)
        .header(KEY, "k1")
        .json(&json!({"label": "x", "content": "y"}));
    let other_route = app
        .post("/api/tasks", &token)
        .header(KEY, "k1")
        .json(&json!({"name": "first"}));
    for request in [other_body, other_path, other_route] {
        let problem = expect_problem(request, 422).await;
        assert_eq!(problem["field"], "Idempotency-Key");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("different request"), "{detail}");
        assert!(
            detail.contains(&format!("POST /api/tasks/{id}/messages")),
            "{detail}"
        );
    }
    assert_eq!(total_rows(&pool).await, before, "nothing was written");

    // Uploads are told apart by their bytes, multipart forms included.
    let upload = |bytes: &[u8]| {
        multipart(
            app.post(&format!("/api/tasks/{id}/artifacts"), &token)
                .header(KEY, "upload-1"),
            bytes,
        )
    };
    expect(upload(b"version one"), 201).await;
    let problem = expect_problem(upload(b"version two"), 422).await;
    assert_eq!(problem["field"], "Idempotency-Key");
    assert!(send(upload(b"version one")).await.replayed());
}

/// While the first request with a key is running, a second one with that key is 409 and does
/// nothing; once the first has finished, the key replays.
#[sqlx::test]
async fn a_key_in_flight_is_409(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let id = new_task(&app, &token).await;
    let events = format!("/api/tasks/{id}/events");
    let request = || {
        app.post(&events, &token)
            .header(KEY, "slow-1")
            .json(&json!({"events": [{"step_narrative": "a", "status": "COMPLETED"}]}))
    };

    // Hold the task row so the first append waits inside its transaction, key lock taken.
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1::uuid FOR UPDATE")
        .bind(&id)
        .execute(&mut *blocker)
        .await
        .unwrap();
    let first = tokio::spawn(send(request()));
    let mut waited = Duration::ZERO;
    loop {
        let held = count(
            &pool,
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
             WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()",
        )
        .await;
        if held > 0 {
            break;
        }
        assert!(
            waited < Duration::from_secs(10),
            "the first request never took its key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    let problem = expect_problem(request(), 409).await;
    assert_eq!(problem["field"], "Idempotency-Key");
    assert!(
        problem["detail"].as_str().unwrap().contains("in progress"),
        "{problem}"
    );
    blocker.rollback().await.unwrap();

    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    let retry = send(request()).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM task_events").await,
        1,
        "only the first request appended"
    );
}

/// Concurrent retries: exactly one runs; the others are replays or 409.
#[sqlx::test]
async fn concurrent_retries_never_both_run(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let id = new_task(&app, &token).await;
    let path = format!("/api/tasks/{id}/messages");
    let mut handles = Vec::new();
    for _ in 0..8 {
        let request = app
            .post(&path, &token)
            .header(KEY, "race")
            .json(&json!({"content": "once only"}));
        handles.push(tokio::spawn(send(request)));
    }
    let mut fresh = 0;
    for handle in handles {
        let seen = handle.await.unwrap();
        match seen.status {
            201 if !seen.replayed() => fresh += 1,
            201 | 409 => {}
            other => panic!(
                "unexpected {other}: {}",
                String::from_utf8_lossy(&seen.body)
            ),
        }
    }
    assert_eq!(fresh, 1);
    let stored = count(
        &pool,
        "SELECT count(*) FROM task_messages WHERE content = 'once only'",
    )
    .await;
    assert_eq!(stored, 1);
}

/// Keys belong to one tenant and user: the same key elsewhere is a new request.
#[sqlx::test]
async fn keys_are_per_tenant_and_user(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let mut ids = Vec::new();
    for (tenant, user) in [("t1", "alice"), ("t1", "bob"), ("t2", "alice")] {
        let token = app.token(tenant, user);
        let seen = send(
            app.post("/api/tasks", &token)
                .header(KEY, "shared-key")
                .json(&json!({"name": "same body"})),
        )
        .await;
        assert_eq!(seen.status, 201, "{tenant}/{user}");
        assert!(!seen.replayed(), "{tenant}/{user} runs its own request");
        ids.push(seen.json()["id"].as_str().unwrap().to_owned());
        // And each replays its own.
        let retry = send(
            app.post("/api/tasks", &token)
                .header(KEY, "shared-key")
                .json(&json!({"name": "same body"})),
        )
        .await;
        assert!(retry.replayed());
        assert_eq!(retry.json()["id"], ids.last().unwrap().as_str());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_eq!(count(&pool, "SELECT count(*) FROM tasks").await, 3);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM idempotency_keys").await,
        3
    );
}

/// A key must be 1 to 255 printable ASCII characters, sent once; else 422 naming the header,
/// before anything is written.
#[sqlx::test]
async fn invalid_keys_are_422(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let long = "k".repeat(256);
    let values: Vec<reqwest::header::HeaderValue> = vec![
        reqwest::header::HeaderValue::from_static(""),
        reqwest::header::HeaderValue::from_str(&long).unwrap(),
        reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        reqwest::header::HeaderValue::from_bytes(b"tab\there").unwrap(),
    ];
    for value in values {
        let problem = expect_problem(
            app.post("/api/tasks", &token)
                .header(KEY, value.clone())
                .json(&json!({"name": "x"})),
            422,
        )
        .await;
        assert_eq!(problem["field"], "Idempotency-Key", "{value:?}");
    }
    let twice = expect_problem(
        app.post("/api/tasks", &token)
            .header(KEY, "a")
            .header(KEY, "b")
            .json(&json!({"name": "x"})),
        422,
    )
    .await;
    assert_eq!(twice["field"], "Idempotency-Key");
    assert_eq!(count(&pool, "SELECT count(*) FROM tasks").await, 0);
    // The longest key and printable punctuation are fine.
    let longest = "k".repeat(255);
    for key in [longest.as_str(), "a b~!{}"] {
        expect(
            app.post("/api/tasks", &token)
                .header(KEY, key)
                .json(&json!({"name": "x"})),
            201,
        )
        .await;
    }
}

/// An expired key runs the request again (even another request), and the sweep purges expired
/// records only.
#[sqlx::test]
async fn expired_keys_run_again_and_are_swept(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let create = |name: &str| {
        app.post("/api/tasks", &token)
            .header(KEY, "old")
            .json(&json!({"name": name}))
    };
    let first = expect(create("first"), 201).await;
    let ttl: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - created_at)::float8 FROM idempotency_keys",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        (ttl - 24.0 * 3600.0).abs() < 5.0,
        "default TTL is 24 hours: {ttl}"
    );
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let again = send(create("first")).await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed(), "an expired key is new");
    assert_ne!(again.json()["id"], first["id"]);
    assert!(send(create("first")).await.replayed(), "and is kept anew");
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    expect(create("something else"), 201).await;
    assert_eq!(count(&pool, "SELECT count(*) FROM tasks").await, 3);

    // The sweep: two expired records of two users, one live one.
    for (user, key) in [("bob", "x1"), ("carol", "x2"), ("dave", "live")] {
        expect(
            app.post("/api/tasks", &app.token("t2", user))
                .header(KEY, key)
                .json(&json!({"name": "n"})),
            201,
        )
        .await;
    }
    sqlx::query(
        "UPDATE idempotency_keys SET expires_at = now() - interval '1 hour'
         WHERE key IN ('x1', 'x2')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let deleted = mnemo::idempotency::sweep_once(&mnemo::db::Db::new(pool.clone()), 1)
        .await
        .unwrap();
    assert_eq!(deleted, 2, "in batches of one until none is left");
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys ORDER BY key")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, ["live", "old"]);
}

/// A failed request leaves its key free: nothing is recorded, and the retry runs.
#[sqlx::test]
async fn errors_do_not_consume_the_key(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");

    // Refused before the transaction (422), then sent right: runs, no 422 for another request.
    expect_problem(
        app.post("/api/tasks", &token)
            .header(KEY, "k")
            .json(&json!({"name": "  "})),
        422,
    )
    .await;
    let created = send(
        app.post("/api/tasks", &token)
            .header(KEY, "k")
            .json(&json!({"name": "fixed"})),
    )
    .await;
    assert_eq!(created.status, 201);
    assert!(!created.replayed());

    // Failing inside the transaction (404: no such section), then the same request once the
    // section exists: runs for real.
    let ops = "/api/agents/assistant/notes/operations";
    let delete = || {
        app.post(ops, &token)
            .header(KEY, "del-1")
            .json(&json!({"operation": "delete_section_by_header", "section_header": "Todo"}))
    };
    expect_problem(delete(), 404).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM idempotency_keys WHERE key = 'del-1'"
        )
        .await,
        0
    );
    expect(
        app.post(ops, &token)
            .json(&json!({"operation": "append", "content": "## Todo\n- buy milk"})),
        200,
    )
    .await;
    let deleted = send(delete()).await;
    assert_eq!(deleted.status, 200);
    assert!(!deleted.replayed());
    let notes = expect(app.get("/api/agents/assistant/notes", &token), 200).await;
    assert!(!notes["notes"].as_str().unwrap().contains("Todo"));
    assert!(send(delete()).await.replayed());
}

/// Without the header nothing changes: each request runs, nothing is recorded; routes that do
/// not honour the header ignore it.
#[sqlx::test]
async fn without_a_key_requests_run_each_time(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    for _ in 0..2 {
        let seen = send(app.post("/api/tasks", &token).json(&json!({"name": "n"}))).await;
        assert_eq!(seen.status, 201);
        assert!(seen.headers.get(REPLAYED).is_none());
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM tasks").await, 2);
    for _ in 0..2 {
        expect(
            app.post("/api/memories/search", &token)
                .header(KEY, "")
                .json(&json!({"query": "anything"})),
            200,
        )
        .await;
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM idempotency_keys").await,
        0
    );
}

/// The spec documents the header, the replay header and the key's 409/422 on the routes that
/// honour it, and on no other.
#[test]
fn the_spec_documents_the_header_where_it_is_honoured() {
    let spec: Value = serde_json::from_str(&mnemo::openapi::json()).unwrap();
    let honours = |method: &str, path: &str| {
        let operation = &spec["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} exists");
        let has = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header");
        if has {
            let responses = operation["responses"].as_object().unwrap();
            for status in ["409", "422"] {
                let text = responses[status]["description"].as_str().unwrap();
                assert!(text.contains("Idempotency-Key"), "{method} {path} {status}");
            }
            assert!(
                responses
                    .iter()
                    .filter(|(s, _)| s.starts_with('2'))
                    .all(|(_, r)| r["headers"]["Idempotent-Replayed"].is_object()),
                "{method} {path} documents the replay header"
            );
        }
        has
    };
    for (method, path) in [
        ("post", "/api/tasks"),
        ("post", "/api/tasks/{id}/events"),
        ("post", "/api/tasks/{id}/messages"),
        ("post", "/api/tasks/{id}/snapshots"),
        ("post", "/api/tasks/{id}/steps"),
        ("post", "/api/tasks/{id}/artifacts"),
        ("post", "/api/tasks/{id}/waits"),
        ("post", "/api/tasks/{id}/update"),
        ("post", "/api/tasks/{id}/items/{ordinal}/actions"),
        ("post", "/api/tasks/{id}/actions/{action_id}/logs"),
        ("put", "/api/tasks/{id}/plan"),
        ("post", "/api/tasks/import"),
        ("post", "/api/memories"),
        ("post", "/api/memories/capture"),
        ("post", "/api/agents/{agent_name}/notes/operations"),
        (
            "post",
            "/api/agents/{agent_name}/notes/revisions/{version}/restore",
        ),
        ("post", "/api/chat/session/archive_messages"),
    ] {
        assert!(honours(method, path), "{method} {path} honours the header");
    }
    for (method, path) in [
        ("post", "/api/memories/search"),
        ("post", "/api/recall"),
        ("get", "/api/tasks"),
    ] {
        assert!(!honours(method, path), "{method} {path} does not");
    }
}

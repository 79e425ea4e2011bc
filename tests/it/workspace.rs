//! Task workspace: steps with parts, the configuration snapshot, artifacts with Range
//! reads, search, waits, the lifecycle sweeper with an injected clock, export and import.

use std::collections::BTreeMap;
use std::io::Write;

use chrono::{Duration, SubsecRound, Utc};
use mnemo::db::Job;
use mnemo::tasks::workspace::import::{Limits, unpack};
use mnemo::tasks::workspace::sweep_job::sweep_once;
use mnemo::tasks::workspace::sweeper::{FixedClock, SystemClock, Thresholds};
use mnemo::tasks::workspace::timeouts::timeout_waits_once;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, one_connection, rows_read};

async fn task(app: &TestApp, token: &str, name: &str) -> String {
    let body = expect(
        app.post("/api/tasks", token)
            .json(&json!({"name": name, "plan": ["build image", "push image", "deploy"]})),
        201,
    )
    .await;
    body["id"].as_str().unwrap().to_string()
}

async fn step(app: &TestApp, token: &str, id: &str, body: Value, status: u16) -> Value {
    expect(
        app.post(&format!("/api/tasks/{id}/steps"), token)
            .json(&body),
        status,
    )
    .await
}

async fn upload(app: &TestApp, token: &str, id: &str, mime: &str, bytes: &[u8]) -> Value {
    expect(
        app.post(&format!("/api/tasks/{id}/artifacts"), token)
            .header("content-type", mime)
            .body(bytes.to_vec()),
        201,
    )
    .await
}

#[sqlx::test]
async fn tool_results_must_answer_a_call_of_the_task(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "steps").await;

    let orphan = expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token)
            .json(&json!({
                "agent_name": "coder",
                "parts": [{"type": "tool_result", "tool_call_id": "call_9", "output": "done"}]
            })),
        422,
    )
    .await;
    assert_eq!(orphan["field"], "parts[0].tool_call_id");

    let first = step(
        &app,
        &token,
        &id,
        json!({"step_id": "step_1", "agent_name": "coder", "parts": [
            {"type": "text", "text": "listing the repository"},
            {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "ls", "arguments": {"path": "/srv"}}
        ]}),
        201,
    )
    .await;
    assert_eq!(first["seq"], 1);
    assert_eq!(first["parts"][1]["arguments"]["path"], "/srv");

    // A later step answers the call made in the earlier one.
    let second = step(
        &app,
        &token,
        &id,
        json!({"agent_name": "tool", "parts": [
            {"type": "tool_result", "tool_call_id": "call_1", "output": "app\nconfig", "is_error": false}
        ]}),
        201,
    )
    .await;
    assert_eq!(second["seq"], 2);
    assert!(second["step_id"].as_str().unwrap().starts_with("step_"));

    // A call id can be used once per task.
    let reused = expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token)
            .json(&json!({
                "agent_name": "coder",
                "parts": [{"type": "tool_call", "tool_call_id": "call_1", "tool_name": "ls"}]
            })),
        422,
    )
    .await;
    assert_eq!(reused["field"], "parts[0].tool_call_id");

    // Artifacts must exist in the task.
    let missing = expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token).json(&json!({
            "agent_name": "coder",
            "parts": [{"type": "artifact", "artifact_id": uuid::Uuid::now_v7(), "mime_type": "text/plain"}]
        })),
        422,
    )
    .await;
    assert_eq!(missing["field"], "parts[0].artifact_id");

    // Unknown part types and empty steps are refused with the path.
    let unknown = expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token)
            .json(&json!({
                "agent_name": "coder", "parts": [{"type": "image", "url": "x"}]
            })),
        422,
    )
    .await;
    assert!(unknown["field"].as_str().unwrap().starts_with("parts"));
    let empty = expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token)
            .json(&json!({"agent_name": "coder", "parts": []})),
        422,
    )
    .await;
    assert_eq!(empty["field"], "parts");

    // A retry of the same step is a no-op; other content under its id is 409.
    let again = step(
        &app,
        &token,
        &id,
        json!({"step_id": "step_1", "agent_name": "coder", "parts": [
            {"type": "text", "text": "listing the repository"},
            {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "ls", "arguments": {"path": "/srv"}}
        ]}),
        200,
    )
    .await;
    assert_eq!(again["seq"], 1);
    expect_problem(
        app.post(&format!("/api/tasks/{id}/steps"), &token).json(&json!({
            "step_id": "step_1", "agent_name": "coder", "parts": [{"type": "text", "text": "other"}]
        })),
        409,
    )
    .await;

    // Nothing refused was stored.
    let all = expect(app.get(&format!("/api/tasks/{id}/steps"), &token), 200).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 2);

    // Another user, and another tenant, see no such task.
    for other in [app.token("t1", "bob"), app.token("t2", "alice")] {
        expect_problem(app.get(&format!("/api/tasks/{id}/steps"), &other), 404).await;
        expect_problem(
            app.post(&format!("/api/tasks/{id}/steps"), &other)
                .json(&json!({"agent_name": "x", "parts": [{"type": "text", "text": "x"}]})),
            404,
        )
        .await;
    }
}

#[sqlx::test]
async fn steps_page_in_order_and_recent_n(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "paging").await;
    for n in 1..=5 {
        step(
            &app,
            &token,
            &id,
            json!({"agent_name": "a", "parts": [{"type": "text", "text": format!("turn {n}")}]}),
            201,
        )
        .await;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/tasks/{id}/steps?limit=2");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = expect(app.get(&path, &token), 200).await;
        for item in page["items"].as_array().unwrap() {
            seen.push(item["parts"][0]["text"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["turn 1", "turn 2", "turn 3", "turn 4", "turn 5"]);

    let recent = expect(
        app.get(&format!("/api/tasks/{id}/steps?recent=2"), &token),
        200,
    )
    .await;
    let texts: Vec<&str> = recent["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["turn 4", "turn 5"]);
    assert!(recent["next_cursor"].is_null());

    let bad = expect_problem(
        app.get(&format!("/api/tasks/{id}/steps?recent=0"), &token),
        422,
    )
    .await;
    assert_eq!(bad["field"], "recent");
    let bad = expect_problem(
        app.get(&format!("/api/tasks/{id}/steps?limit=501"), &token),
        422,
    )
    .await;
    assert_eq!(bad["field"], "limit");
    // `recent` leaves `limit` unused, but a bad one is still refused rather than ignored.
    let bad = expect_problem(
        app.get(&format!("/api/tasks/{id}/steps?limit=-3&recent=2"), &token),
        422,
    )
    .await;
    assert_eq!(bad["field"], "limit");
    let bad = expect_problem(
        app.get(&format!("/api/tasks/{id}/steps?cursor=zz!"), &token),
        422,
    )
    .await;
    assert_eq!(bad["field"], "cursor");
}

#[sqlx::test]
async fn config_snapshot_is_stored_once(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "config").await;
    let path = format!("/api/tasks/{id}/config");
    expect_problem(app.get(&path, &token), 404).await;
    let team = json!({"agents": [{"name": "planner", "model": "m1"}], "tools": ["ls"]});
    let stored = expect(app.put(&path, &token).json(&team), 201).await;
    assert_eq!(stored["config"], team);
    expect(app.put(&path, &token).json(&team), 200).await;
    let changed = expect_problem(app.put(&path, &token).json(&json!({"agents": []})), 409).await;
    assert!(
        changed["detail"]
            .as_str()
            .unwrap()
            .contains("cannot change")
    );
    assert_eq!(expect(app.get(&path, &token), 200).await["config"], team);
    expect_problem(app.put(&path, &token).json(&json!([1, 2])), 422).await;
    expect_problem(app.get(&path, &app.token("t1", "bob")), 404).await;
}

/// A `multipart/form-data` body with one `file` field (and another field before it).
fn multipart(
    request: reqwest::RequestBuilder,
    file_name: &str,
    mime: &str,
    bytes: &[u8],
) -> reqwest::RequestBuilder {
    let boundary = "mnemo-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nignored\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\n\
         Content-Type: {mime}\r\n\r\n"
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

#[sqlx::test]
async fn artifacts_honour_range_etag_and_caps(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.tasks.artifact_max_bytes = 1000).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "artifacts").await;
    let body = b"0123456789abcdefghij";
    let artifact = upload(&app, &token, &id, "text/plain; charset=utf-8", body).await;
    let aid = artifact["artifact_id"].as_str().unwrap().to_string();
    assert_eq!(
        artifact["uri"],
        format!("mnemo://tasks/{id}/artifacts/{aid}")
    );
    assert_eq!(artifact["size"], 20);
    assert_eq!(artifact["mime_type"], "text/plain; charset=utf-8");
    let sha = artifact["sha256"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 64);
    let path = format!("/api/tasks/{id}/artifacts/{aid}");

    let full = app.get(&path, &token).send().await.unwrap();
    assert_eq!(full.status(), 200);
    assert_eq!(full.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(full.headers()["etag"], format!("\"{sha}\"").as_str());
    assert_eq!(full.headers()["accept-ranges"], "bytes");
    assert_eq!(full.bytes().await.unwrap().as_ref(), body);

    for (range, status, expected, content_range) in [
        ("bytes=0-4", 206, &b"01234"[..], "bytes 0-4/20"),
        ("bytes=15-", 206, &b"fghij"[..], "bytes 15-19/20"),
        ("bytes=-3", 206, &b"hij"[..], "bytes 17-19/20"),
        ("bytes=18-100", 206, &b"ij"[..], "bytes 18-19/20"),
        ("bytes=0-1,4-5", 200, &body[..], ""),
    ] {
        let response = app
            .get(&path, &token)
            .header("range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{range}");
        if status == 206 {
            assert_eq!(
                response.headers()["content-range"],
                content_range,
                "{range}"
            );
        }
        assert_eq!(
            response.bytes().await.unwrap().as_ref(),
            expected,
            "{range}"
        );
    }
    let response = app
        .get(&path, &token)
        .header("range", "bytes=20-")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 416);
    assert_eq!(response.headers()["content-range"], "bytes */20");

    // Conditional requests.
    let response = app
        .get(&path, &token)
        .header("if-none-match", format!("\"{sha}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    let response = app
        .get(&path, &token)
        .header("range", "bytes=0-1")
        .header("if-range", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "a stale If-Range serves everything");

    // Multipart upload keeps the file name and type.
    let posted = expect(
        multipart(
            app.post(&format!("/api/tasks/{id}/artifacts"), &token),
            "result.json",
            "application/json",
            b"{\"ok\":true}",
        ),
        201,
    )
    .await;
    assert_eq!(posted["name"], "result.json");
    assert_eq!(posted["mime_type"], "application/json");

    // The cap: 413 naming it, raw and multipart.
    let too_big = expect_problem(
        app.post(&format!("/api/tasks/{id}/artifacts"), &token)
            .header("content-type", "application/octet-stream")
            .body(vec![0u8; 1001]),
        413,
    )
    .await;
    assert_eq!(too_big["limit_bytes"], 1000);
    expect_problem(
        multipart(
            app.post(&format!("/api/tasks/{id}/artifacts"), &token),
            "x.bin",
            "application/octet-stream",
            &[1u8; 1001],
        ),
        413,
    )
    .await;
    expect_problem(
        app.post(&format!("/api/tasks/{id}/artifacts"), &token)
            .header("content-type", "not a type")
            .body("x"),
        422,
    )
    .await;

    // Listing pages through them.
    let page = expect(
        app.get(&format!("/api/tasks/{id}/artifacts?limit=1"), &token),
        200,
    )
    .await;
    assert_eq!(page["items"][0]["artifact_id"], aid.as_str());
    let cursor = page["next_cursor"].as_str().unwrap();
    let page = expect(
        app.get(
            &format!("/api/tasks/{id}/artifacts?limit=1&cursor={cursor}"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(page["items"][0]["name"], "result.json");
    assert!(page["next_cursor"].is_null());

    // Another user cannot read it; a referenced artifact cannot be deleted; others can.
    expect_problem(app.get(&path, &app.token("t1", "bob")), 404).await;
    step(
        &app,
        &token,
        &id,
        json!({"agent_name": "coder", "parts": [{"type": "artifact", "artifact_id": aid}]}),
        201,
    )
    .await;
    let steps = expect(app.get(&format!("/api/tasks/{id}/steps"), &token), 200).await;
    assert_eq!(
        steps["items"][0]["parts"][0]["mime_type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(
        steps["items"][0]["parts"][0]["uri"],
        format!("mnemo://tasks/{id}/artifacts/{aid}")
    );
    expect_problem(app.delete(&path, &token), 409).await;
    let other = posted["artifact_id"].as_str().unwrap();
    expect(
        app.delete(&format!("/api/tasks/{id}/artifacts/{other}"), &token),
        204,
    )
    .await;
    expect_problem(
        app.get(&format!("/api/tasks/{id}/artifacts/{other}"), &token),
        404,
    )
    .await;
}

#[sqlx::test]
async fn search_finds_a_tool_output(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "search").await;
    let other = task(&app, &token, "other").await;
    step(
        &app,
        &token,
        &id,
        json!({"step_id": "step_run", "agent_name": "coder", "parts": [
            {"type": "text", "text": "starting the container"},
            {"type": "tool_call", "tool_call_id": "call_run", "tool_name": "docker"},
            {"type": "tool_result", "tool_call_id": "call_run", "output": "container exited: OOMKilled (exit 137)", "is_error": true}
        ]}),
        201,
    )
    .await;
    expect(
        app.post(&format!("/api/tasks/{id}/update"), &token)
            .json(&json!({"message": "the database migration finished"})),
        200,
    )
    .await;
    expect(
        app.post(&format!("/api/tasks/{id}/events"), &token)
            .json(&json!({"events": [
                {"step_narrative": "ran the linter", "tool_name": "clippy", "status": "COMPLETED",
                 "result_data": {"warnings": "unused variable zebrafish"}}
            ]})),
        201,
    )
    .await;
    expect(
        app.post(&format!("/api/tasks/{id}/snapshots"), &token)
            .json(&json!({"label": "before stage 2", "content": "context mentions kubernetes ingress"})),
        201,
    )
    .await;
    step(
        &app,
        &token,
        &other,
        json!({"agent_name": "coder", "parts": [{"type": "text", "text": "another OOMKilled pod"}]}),
        201,
    )
    .await;

    let found = expect(
        app.post(&format!("/api/tasks/{id}/search"), &token)
            .json(&json!({"query": "OOMKilled"})),
        200,
    )
    .await;
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["source"], "tool_result");
    assert_eq!(hits[0]["step_id"], "step_run");
    assert_eq!(hits[0]["part_index"], 2);
    assert_eq!(hits[0]["tool_call_id"], "call_run");
    assert!(hits[0]["snippet"].as_str().unwrap().contains("«OOMKilled»"));

    for (query, source) in [
        ("migration", "message"),
        ("zebrafish", "event"),
        ("kubernetes", "snapshot"),
        ("container", "step_text"),
    ] {
        let found = expect(
            app.post(&format!("/api/tasks/{id}/search"), &token)
                .json(&json!({"query": query})),
            200,
        )
        .await;
        assert_eq!(found["hits"][0]["source"], source, "{query}: {found}");
    }

    // All tasks: both hits, paged.
    let all = expect(
        app.post("/api/tasks/search", &token)
            .json(&json!({"query": "OOMKilled", "limit": 1})),
        200,
    )
    .await;
    assert_eq!(all["hits"].as_array().unwrap().len(), 1);
    let cursor = all["next_cursor"].as_str().unwrap();
    let rest = expect(
        app.post("/api/tasks/search", &token)
            .json(&json!({"query": "OOMKilled", "limit": 1, "cursor": cursor})),
        200,
    )
    .await;
    assert_eq!(rest["hits"].as_array().unwrap().len(), 1);
    assert!(rest["next_cursor"].is_null());
    assert_ne!(all["hits"][0]["task_id"], rest["hits"][0]["task_id"]);

    // Other users find nothing of it.
    let bob = app.token("t1", "bob");
    let none = expect(
        app.post("/api/tasks/search", &bob)
            .json(&json!({"query": "OOMKilled"})),
        200,
    )
    .await;
    assert!(none["hits"].as_array().unwrap().is_empty());
    expect_problem(
        app.post(&format!("/api/tasks/{id}/search"), &bob)
            .json(&json!({"query": "OOMKilled"})),
        404,
    )
    .await;
    let empty = expect_problem(
        app.post(&format!("/api/tasks/{id}/search"), &token)
            .json(&json!({"query": "  "})),
        422,
    )
    .await;
    assert_eq!(empty["field"], "query");
}

/// A word in thousands of log events is found at once: each hit is read once for its page, not
/// once per other hit (which took a handful of seconds at a few thousand hits).
#[sqlx::test]
async fn search_over_many_hits_stays_fast(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "busy").await;
    for batch in 0..3 {
        let events: Vec<Value> = (0..1000)
            .map(|i| json!({"step_narrative": format!("checked widget {batch}-{i}"), "status": "COMPLETED"}))
            .collect();
        expect(
            app.post(&format!("/api/tasks/{id}/events"), &token)
                .json(&json!({ "events": events })),
            201,
        )
        .await;
    }
    let started = std::time::Instant::now();
    let found = expect(
        app.post("/api/tasks/search", &token)
            .json(&json!({"query": "widget", "limit": 5})),
        200,
    )
    .await;
    let took = started.elapsed();
    assert_eq!(found["hits"].as_array().unwrap().len(), 5);
    assert!(found["next_cursor"].is_string());
    assert!(
        took < std::time::Duration::from_secs(5),
        "searching 3000 hits took {took:?}"
    );
}

#[sqlx::test]
async fn a_wait_resolution_appears_in_history_and_metadata(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "waits").await;
    let wait = expect(
        app.post(&format!("/api/tasks/{id}/waits"), &token)
            .json(&json!({
                "target_type": "process", "target_id": "4242", "criteria": "build finished",
                "timeout_seconds": 600, "poll_interval": 2.5
            })),
        201,
    )
    .await;
    assert_eq!(wait["status"], "watching");
    let wait_id = wait["wait_id"].as_str().unwrap().to_string();
    let detail = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(detail["metadata"]["active_wait_ids"], json!([wait_id]));
    assert_eq!(detail["metadata"]["last_wait_state"], "watching");

    let path = format!("/api/tasks/{id}/waits/{wait_id}");
    let bad = expect_problem(
        app.patch(&path, &token)
            .json(&json!({"status": "watching"})),
        422,
    )
    .await;
    assert_eq!(bad["field"], "status");
    let ended = expect(
        app.patch(&path, &token)
            .json(&json!({"status": "resolved", "result_message": "exit 0"})),
        200,
    )
    .await;
    assert_eq!(ended["status"], "resolved");
    assert!(ended["resolved_at"].is_string());
    let seq = ended["message_seq"].as_i64().unwrap();

    let messages = expect(app.get(&format!("/api/tasks/{id}/messages"), &token), 200).await;
    let posted = messages["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["seq"].as_i64() == Some(seq))
        .unwrap();
    assert_eq!(posted["content"], "[Wait resolved] build finished → exit 0");
    assert_eq!(posted["role"], "system");
    assert_eq!(posted["msg_type"], "wait");

    let detail = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(detail["metadata"]["active_wait_ids"], json!([]));
    assert_eq!(detail["metadata"]["last_wait_state"], "resolved");
    let at = detail["metadata"]["last_wait_event_at"].as_f64().unwrap();
    assert!((at - Utc::now().timestamp() as f64).abs() < 600.0);

    // Once ended, a wait stays ended.
    expect_problem(
        app.patch(&path, &token).json(&json!({"status": "timeout"})),
        409,
    )
    .await;
    // The search finds the resolution too.
    let found = expect(
        app.post(&format!("/api/tasks/{id}/search"), &token)
            .json(&json!({"query": "wait resolved build"})),
        200,
    )
    .await;
    assert_eq!(found["hits"][0]["source"], "message");

    let listed = expect(app.get(&format!("/api/tasks/{id}/waits"), &token), 200).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    expect_problem(app.get(&path, &app.token("t1", "bob")), 404).await;
    let bad = expect_problem(
        app.post(&format!("/api/tasks/{id}/waits"), &token)
            .json(&json!({
                "target_type": "process", "target_id": "1", "criteria": "", "timeout_seconds": 5
            })),
        422,
    )
    .await;
    assert_eq!(bad["field"], "criteria");
}

async fn new_wait(app: &TestApp, token: &str, id: &str, criteria: &str, timeout: Value) -> String {
    let wait = expect(
        app.post(&format!("/api/tasks/{id}/waits"), token)
            .json(&json!({
                "target_type": "url", "target_id": "http://localhost", "criteria": criteria,
                "timeout_seconds": timeout
            })),
        201,
    )
    .await;
    wait["wait_id"].as_str().unwrap().to_string()
}

/// Moves a wait's creation `seconds` into the past (instead of sleeping through its timeout).
async fn age_wait(pool: &PgPool, wait_id: &str, seconds: i64) {
    sqlx::query(
        "UPDATE task_waits SET created_at = created_at - make_interval(secs => $2)
         WHERE id = $1::uuid",
    )
    .bind(wait_id)
    .bind(seconds as f64)
    .execute(pool)
    .await
    .unwrap();
}

/// A wait whose `timeout_seconds` ran out ends as `timeout` in one round of the wait-timeout job,
/// with its `[Wait timeout]` message and the task metadata a resolution would record; resolving it
/// afterwards is a clear 409; a paused task stays paused; a second replica skips the round.
#[sqlx::test]
async fn an_overdue_wait_times_out_in_one_round(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t2", "bob");
    let id = task(&app, &alice, "waits").await;
    let overdue = new_wait(&app, &alice, &id, "port 80 open", json!(1)).await;
    let patient = new_wait(&app, &alice, &id, "build finished", json!(3600)).await;
    let forever = new_wait(&app, &alice, &id, "user replies", Value::Null).await;
    // Another tenant's task, paused after its wait started.
    let other = task(&app, &bob, "other").await;
    let bobs = new_wait(&app, &bob, &other, "disk freed", json!(1)).await;
    expect(
        app.post(&format!("/api/tasks/{other}/update"), &bob)
            .json(&json!({"status": "paused"})),
        200,
    )
    .await;
    assert_eq!(status_of(&app, &bob, &other).await, "paused");

    // Not yet overdue: nothing happens.
    let report = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &SystemClock)
        .await
        .unwrap();
    assert!(report.ran);
    assert!(report.timed_out.is_empty(), "{report:?}");

    age_wait(&pool, &overdue, 5).await;
    age_wait(&pool, &bobs, 5).await;
    let report = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &SystemClock)
        .await
        .unwrap();
    let mut ended: Vec<String> = report.timed_out.iter().map(|w| w.to_string()).collect();
    ended.sort();
    let mut expected = vec![overdue.clone(), bobs.clone()];
    expected.sort();
    assert_eq!(ended, expected, "both tenants' overdue waits, nothing else");

    let path = format!("/api/tasks/{id}/waits/{overdue}");
    let wait = expect(app.get(&path, &alice), 200).await;
    assert_eq!(wait["status"], "timeout");
    assert_eq!(wait["result_message"], "no result within 1 s");
    assert!(wait["resolved_at"].is_string());
    let messages = expect(app.get(&format!("/api/tasks/{id}/messages"), &alice), 200).await;
    let last = messages["items"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"],
        "[Wait timeout] port 80 open → no result within 1 s"
    );
    assert_eq!(last["role"], "system");
    assert_eq!(last["msg_type"], "wait");
    let detail = expect(app.get(&format!("/api/tasks/{id}"), &alice), 200).await;
    assert_eq!(
        detail["metadata"]["active_wait_ids"],
        json!([patient, forever]),
        "the timed-out wait left the active ones"
    );
    assert_eq!(detail["metadata"]["last_wait_state"], "timeout");
    let at = detail["metadata"]["last_wait_event_at"].as_f64().unwrap();
    assert!((at - Utc::now().timestamp() as f64).abs() < 60.0, "{at}");

    // The other tenant's task got its message and stayed paused.
    let theirs = expect(app.get(&format!("/api/tasks/{other}/messages"), &bob), 200).await;
    let last = theirs["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["content"],
        "[Wait timeout] disk freed → no result within 1 s"
    );
    assert_eq!(status_of(&app, &bob, &other).await, "paused");

    // Ended once: the next round has nothing, and resolving it now is 409 saying it timed out.
    let again = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &SystemClock)
        .await
        .unwrap();
    assert!(again.ran && again.timed_out.is_empty(), "{again:?}");
    let late = expect_problem(
        app.patch(&path, &alice)
            .json(&json!({"status": "resolved", "result_message": "port open"})),
        409,
    )
    .await;
    assert_eq!(late["current_status"], "timeout");
    assert_eq!(late["timed_out_at"], wait["resolved_at"]);
    let detail = late["detail"].as_str().unwrap();
    assert!(
        detail.contains("timed out") && detail.contains("no result within 1 s"),
        "{detail}"
    );
    let count = expect(app.get(&format!("/api/tasks/{id}/messages"), &alice), 200).await["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        count,
        messages["items"].as_array().unwrap().len(),
        "no message added"
    );

    // Two hours on, the hour-long wait times out too; the wait without a timeout never does.
    let later = FixedClock(Utc::now() + Duration::hours(2));
    let report = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &later)
        .await
        .unwrap();
    assert_eq!(
        report
            .timed_out
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>(),
        vec![patient.clone()]
    );
    let wait = expect(
        app.get(&format!("/api/tasks/{id}/waits/{forever}"), &alice),
        200,
    )
    .await;
    assert_eq!(wait["status"], "watching");
    let detail = expect(app.get(&format!("/api/tasks/{id}"), &alice), 200).await;
    assert_eq!(detail["metadata"]["active_wait_ids"], json!([forever]));

    // A second replica holding the lock makes this one skip its round.
    let last_one = new_wait(&app, &alice, &id, "cache warm", json!(1)).await;
    age_wait(&pool, &last_one, 5).await;
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(Job::WaitTimeouts.lock_key())
        .execute(&mut *holder)
        .await
        .unwrap();
    let skipped = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &SystemClock)
        .await
        .unwrap();
    assert!(!skipped.ran && skipped.timed_out.is_empty());
    holder.rollback().await.unwrap();
    let report = timeout_waits_once(&mnemo::db::Db::new(pool.clone()), &SystemClock)
        .await
        .unwrap();
    assert_eq!(report.timed_out.len(), 1);
}

async fn status_of(app: &TestApp, token: &str, id: &str) -> String {
    expect(app.get(&format!("/api/tasks/{id}"), token), 200).await["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[sqlx::test]
async fn the_sweeper_pauses_and_archives_as_time_moves(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t2", "bob");
    let idle = task(&app, &alice, "idle").await;
    let done = task(&app, &bob, "done").await;
    expect(
        app.post(&format!("/api/tasks/{done}/update"), &bob)
            .json(&json!({"status": "completed"})),
        200,
    )
    .await;
    let thresholds = Thresholds::from_secs(24 * 3600, 7 * 24 * 3600);
    // PostgreSQL keeps microseconds.
    let now = Utc::now().trunc_subsecs(6);

    let report = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(now + Duration::hours(23)),
        &thresholds,
    )
    .await
    .unwrap();
    assert!(report.ran);
    assert!(report.paused.is_empty() && report.archived.is_empty());
    assert_eq!(status_of(&app, &alice, &idle).await, "active");

    // A day later the idle task (in one tenant) is paused; the completed one is kept.
    let report = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(now + Duration::hours(25)),
        &thresholds,
    )
    .await
    .unwrap();
    assert_eq!(report.paused.len(), 1);
    assert_eq!(report.paused[0].to_string(), idle);
    assert!(report.archived.is_empty());
    assert_eq!(status_of(&app, &alice, &idle).await, "paused");
    let messages = expect(app.get(&format!("/api/tasks/{idle}/messages"), &alice), 200).await;
    let last = messages["items"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"],
        "status: active → paused (no update for 24 h)"
    );

    // A week after completion the other tenant's task is archived, and stays readable.
    let report = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(now + Duration::days(8)),
        &thresholds,
    )
    .await
    .unwrap();
    assert_eq!(report.archived.len(), 1);
    assert_eq!(report.archived[0].to_string(), done);
    let archived_at: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("SELECT archived_at FROM tasks WHERE id = $1::uuid")
            .bind(&done)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(archived_at, Some(now + Duration::days(8)));
    assert_eq!(status_of(&app, &bob, &done).await, "completed");
    // Hidden from the default listing, listed on request, and readable with its archive time.
    let listed = expect(app.get("/api/tasks", &bob), 200).await;
    assert!(listed["items"].as_array().unwrap().is_empty(), "{listed}");
    let listed = expect(app.get("/api/tasks?include_archived=true", &bob), 200).await;
    assert_eq!(listed["items"][0]["id"], done.as_str());
    let read = expect(app.get(&format!("/api/tasks/{done}"), &bob), 200).await;
    assert!(
        read["timestamps"]["archived_at"].is_string(),
        "archived_at is shown: {read}"
    );
    let again = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(now + Duration::days(9)),
        &thresholds,
    )
    .await
    .unwrap();
    assert!(again.archived.is_empty() && again.paused.is_empty());

    // A paused task resumes on its next update.
    expect(
        app.post(&format!("/api/tasks/{idle}/update"), &alice)
            .json(&json!({"message": "back at it"})),
        200,
    )
    .await;
    assert_eq!(status_of(&app, &alice, &idle).await, "active");

    // Configurable thresholds: a one-minute pause.
    let quick = Thresholds::from_secs(60, 7 * 24 * 3600);
    let report = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(Utc::now() + Duration::minutes(2)),
        &quick,
    )
    .await
    .unwrap();
    assert_eq!(report.paused.len(), 1);

    // A second sweeper holding the lock makes this one skip its round.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(0x6d6e_656d_6f73_7770_i64)
        .execute(&mut *holder)
        .await
        .unwrap();
    let skipped = sweep_once(
        &mnemo::db::Db::new(pool.clone()),
        &FixedClock(now + Duration::days(30)),
        &thresholds,
    )
    .await
    .unwrap();
    assert!(!skipped.ran);
    holder.rollback().await.unwrap();
}

/// A task with something in every file of the layout.
pub(crate) async fn rich_task(app: &TestApp, token: &str) -> String {
    let id = task(app, token, "Deploy coursefolio").await;
    let p = |s: &str| format!("/api/tasks/{id}{s}");
    expect(
        app.put(&p("/plan"), token).json(&json!({
            "plan": [{"stage": 1, "steps": [
                {"stepDescription": "build image", "toolName": "docker", "sub_task_input": {"tag": "v1.2.3"}, "narrative_step": "Build it"},
                {"stepDescription": "push image", "toolName": "docker", "sub_task_input": {}, "narrative_step": "Push it"}
            ]}],
            "reason": "more detail"
        })),
        200,
    )
    .await;
    expect(
        app.patch(&p("/items/1"), token)
            .json(&json!({"status": "completed"})),
        200,
    )
    .await;
    expect(
        app.post(&p("/events"), token).json(&json!({"events": [
            {"stage": 1, "step_narrative": "built image", "tool_name": "docker", "status": "COMPLETED",
             "input_payload": {"tag": "v1.2.3"}, "result_data": "sha256:abc", "duration_ms": 1200},
            {"stage": "System", "step_narrative": "summarised context", "status": "SYSTEM_ACTION"}
        ]})),
        201,
    )
    .await;
    expect(
        app.post(&p("/update"), token)
            .json(&json!({"message": "Step 1 done — image built as v1.2.3"})),
        200,
    )
    .await;
    for (label, content) in [
        ("Initial context", "start here"),
        ("After: summarization", "short"),
    ] {
        expect(
            app.post(&p("/snapshots"), token)
                .json(&json!({"label": label, "content": content, "is_summarized": label != "Initial context"})),
            201,
        )
        .await;
    }
    expect(
        app.put(&p("/config"), token)
            .json(&json!({"agents": ["planner", "coder"], "model": "m"})),
        201,
    )
    .await;
    let artifact = upload(app, token, &id, "text/plain", b"build log line 1\nline 2\n").await;
    step(
        app,
        token,
        &id,
        json!({"step_id": "step_a", "agent_name": "coder", "parts": [
            {"type": "text", "text": "building"},
            {"type": "tool_call", "tool_call_id": "c1", "tool_name": "docker", "arguments": {"cmd": "build"}},
            {"type": "tool_result", "tool_call_id": "c1", "output": {"exit": 0}},
            {"type": "artifact", "artifact_id": artifact["artifact_id"]}
        ]}),
        201,
    )
    .await;
    let action = expect(
        app.post(&p("/items/2/actions"), token).json(&json!({
            "action_type": "cli", "summary": "docker push", "input_data": {"cmd": "docker push"}
        })),
        201,
    )
    .await;
    let action_id = action["id"].as_str().unwrap();
    expect(
        app.post(&p(&format!("/actions/{action_id}/logs")), token)
            .json(&json!({"log_type": "stdout", "content": "pushed ghcr.io/x:v1.2.3"})),
        201,
    )
    .await;
    let wait = expect(
        app.post(&p("/waits"), token).json(&json!({
            "target_type": "url", "target_id": "https://x", "criteria": "site answers 200"
        })),
        201,
    )
    .await;
    expect(
        app.patch(
            &p(&format!("/waits/{}", wait["wait_id"].as_str().unwrap())),
            token,
        )
        .json(&json!({"status": "resolved", "result_message": "200 OK"})),
        200,
    )
    .await;
    expect(
        app.post(&p("/waits"), token).json(&json!({
            "target_type": "process", "target_id": "7", "criteria": "exits"
        })),
        201,
    )
    .await;
    expect(
        app.patch(&format!("/api/tasks/{id}"), token)
            .json(&json!({"final_answer": "# Deployed\nAll good.\n"})),
        200,
    )
    .await;
    id
}

async fn export(app: &TestApp, token: &str, id: &str) -> Vec<u8> {
    let response = app
        .get(&format!("/api/tasks/{id}/export"), token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/gzip");
    response.bytes().await.unwrap().to_vec()
}

fn files_of(archive: &[u8]) -> (String, BTreeMap<String, Vec<u8>>) {
    let limits = Limits {
        max_member_bytes: 1 << 26,
        max_total_bytes: 1 << 28,
        max_members: 10_000,
    };
    unpack(archive, &limits).unwrap()
}

/// A task is looked up by its key among its user's tasks only: the rows the sweepers may read
/// across tenants are theirs alone, so a request's lookup is confined by the caller's tenant and
/// user, which the primary key answers, and reads none of the other users' tasks.
#[sqlx::test]
async fn a_task_lookup_reads_none_of_the_other_users_tasks(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let alice = app.token("t1", "alice");
    let id = task(&app, &alice, "Mine").await;
    sqlx::query(
        "INSERT INTO tasks (tenant_id, user_id, id, name)
         SELECT 't' || (i % 7), 'user-' || i, gen_random_uuid(), 'task ' || i
         FROM generate_series(1, 3000) i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = rows_read(&one, &pool, "tasks").await;
    let found = expect(app.get(&format!("/api/tasks/{id}"), &alice), 200).await;
    assert_eq!(found["name"], "Mine", "{found}");
    let read = rows_read(&one, &pool, "tasks").await - before;
    assert!(read <= 10, "the lookup read {read} tasks");
    // Another user's task is not found, and not by a scan either.
    let bob = app.token("t1", "bob");
    let before = rows_read(&one, &pool, "tasks").await;
    expect_problem(app.get(&format!("/api/tasks/{id}"), &bob), 404).await;
    let read = rows_read(&one, &pool, "tasks").await - before;
    assert!(read <= 10, "the lookup read {read} tasks");
}

/// A search of one task's history reads that task's texts: not those of the caller's other
/// tasks, however many they hold, for its matches or for its document frequencies.
#[sqlx::test]
async fn a_search_of_one_task_reads_that_tasks_texts(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let alice = app.token("t1", "alice");
    let id = task(&app, &alice, "Mine").await;
    let other = task(&app, &alice, "Other").await;
    expect(
        app.post(&format!("/api/tasks/{id}/update"), &alice)
            .json(&json!({"message": "rolled the build out to staging"})),
        200,
    )
    .await;
    sqlx::query(
        "INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
         SELECT 't1', 'alice', $1, 1000 + i, 'agent', 'rolled build ' || i || ' out to staging',
                'progress'
         FROM generate_series(1, 3000) i",
    )
    .bind(other.parse::<uuid::Uuid>().unwrap())
    .execute(&pool)
    .await
    .unwrap();
    for _ in 0..3 {
        let before = rows_read(&one, &pool, "task_messages").await;
        let found = expect(
            app.post(&format!("/api/tasks/{id}/search"), &alice)
                .json(&json!({"query": "staging rollout", "mode": "keyword"})),
            200,
        )
        .await;
        let read = rows_read(&one, &pool, "task_messages").await - before;
        let hits = found["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 1, "{found}");
        assert_eq!(hits[0]["task_id"], id.as_str(), "{found}");
        assert!(
            read <= 20,
            "the search read {read} messages for the task's 2"
        );
    }
    // Every task's history is still searched without a task.
    let found = expect(
        app.post("/api/tasks/search", &alice)
            .json(&json!({"query": "staging rollout", "mode": "keyword", "limit": 100})),
        200,
    )
    .await;
    assert_eq!(found["hits"].as_array().unwrap().len(), 100, "{found}");
}

/// Gives each of `users` of tenant `t1` `tasks` tasks, each with a plan of `items` items and
/// `actions` actions on each item, written straight into the tables.
async fn load_plans(pool: &PgPool, users: &[String], tasks: i32, items: i32, actions: i32) {
    sqlx::query(
        "WITH t AS (
             INSERT INTO tasks (tenant_id, user_id, id, name, plan_version)
             SELECT 't1', u, gen_random_uuid(), 'loaded ' || k, 1
             FROM unnest($1::text[]) u, generate_series(1, $2) k
             RETURNING tenant_id, user_id, id
         ), p AS (
             INSERT INTO task_plans (tenant_id, user_id, task_id, version, plan)
             SELECT tenant_id, user_id, id, 1, '[]' FROM t
             RETURNING tenant_id, user_id, task_id
         ), i AS (
             INSERT INTO task_plan_items (tenant_id, user_id, task_id, version, ordinal, id, title)
             SELECT p.tenant_id, p.user_id, p.task_id, 1, o, gen_random_uuid(), 'step ' || o
             FROM p, generate_series(1, $3) o
             RETURNING tenant_id, user_id, task_id, ordinal
         )
         INSERT INTO task_actions (tenant_id, user_id, id, task_id, version, ordinal, action_type,
                                   summary)
         SELECT i.tenant_id, i.user_id, gen_random_uuid(), i.task_id, 1, i.ordinal, 'cli', 'run'
         FROM i, generate_series(1, $4) a",
    )
    .bind(users)
    .bind(tasks)
    .bind(items)
    .bind(actions)
    .execute(pool)
    .await
    .unwrap();
}

/// A step's actions are read through the task's own items and actions, also for a user the
/// statistics do not know. Such a user is estimated to hold one row, so every index that leads
/// with the tenant and user costs the same; one that goes on with another column than the task
/// (an item's id, an action's id) would read every item or action of the user to find one
/// task's.
#[sqlx::test]
async fn a_steps_actions_are_read_by_task_for_a_user_the_statistics_do_not_know(pool: PgPool) {
    for table in ["tasks", "task_plans", "task_plan_items", "task_actions"] {
        sqlx::query(&format!(
            "ALTER TABLE {table} SET (autovacuum_enabled = off)"
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
    // Users the statistics know: 99 small ones and a large one.
    let small: Vec<String> = (1..100).map(|u| format!("user-{u}")).collect();
    load_plans(&pool, &small, 1, 5, 1).await;
    load_plans(&pool, &["alice".to_owned()], 20, 100, 2).await;
    sqlx::query("ANALYZE tasks, task_plans, task_plan_items, task_actions")
        .execute(&pool)
        .await
        .unwrap();
    // Carol arrives after: one task through the service, twenty more with 2,000 items.
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let carol = app.token("t1", "carol");
    let id = task(&app, &carol, "Mine").await;
    for summary in ["docker build .", "docker push"] {
        expect(
            app.post(&format!("/api/tasks/{id}/items/1/actions"), &carol)
                .json(&json!({"action_type": "cli", "summary": summary})),
            201,
        )
        .await;
    }
    load_plans(&pool, &["carol".to_owned()], 20, 100, 2).await;

    for _ in 0..8 {
        let items = rows_read(&one, &pool, "task_plan_items").await;
        let actions = rows_read(&one, &pool, "task_actions").await;
        let page = expect(
            app.get(&format!("/api/tasks/{id}/items/1/actions?limit=1"), &carol),
            200,
        )
        .await;
        assert_eq!(page["items"][0]["summary"], "docker build .", "{page}");
        assert!(page["next_cursor"].is_string(), "{page}");
        let items = rows_read(&one, &pool, "task_plan_items").await - items;
        let actions = rows_read(&one, &pool, "task_actions").await - actions;
        assert!(
            items <= 10,
            "the page read {items} plan items for the task's 3"
        );
        assert!(
            actions <= 10,
            "the page read {actions} actions for the step's 2"
        );
    }
}

/// A task's export reads its own action logs, in order, through an index by task: the logs of
/// the user's other tasks are not read, however many they are.
#[sqlx::test]
async fn a_task_export_reads_its_own_logs_only(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let alice = app.token("t1", "alice");
    let id = rich_task(&app, &alice).await;
    let other = task(&app, &alice, "Other").await;
    let action = expect(
        app.post(&format!("/api/tasks/{other}/items/1/actions"), &alice)
            .json(&json!({"action_type": "cli", "summary": "tail -f"})),
        201,
    )
    .await;
    sqlx::query(
        "INSERT INTO task_action_logs (tenant_id, user_id, id, task_id, action_id, log_type,
                                       content)
         SELECT 't1', 'alice', gen_random_uuid(), $1, $2, 'stdout', 'line ' || i
         FROM generate_series(1, 5000) i",
    )
    .bind(other.parse::<uuid::Uuid>().unwrap())
    .bind(
        action["id"]
            .as_str()
            .unwrap()
            .parse::<uuid::Uuid>()
            .unwrap(),
    )
    .execute(&pool)
    .await
    .unwrap();

    let before = rows_read(&one, &pool, "task_action_logs").await;
    let (_, files) = files_of(&export(&app, &alice, &id).await);
    let read = rows_read(&one, &pool, "task_action_logs").await - before;
    assert!(read <= 10, "the export read {read} logs for its one");
    let everything: String = files
        .values()
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .collect();
    assert!(
        everything.contains("pushed ghcr.io/x:v1.2.3"),
        "{everything}"
    );
    assert!(!everything.contains("line 4999"));
}

#[sqlx::test]
async fn export_import_export_gives_the_same_files(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("t1", "alice");
    let id = rich_task(&app, &alice).await;
    let first = export(&app, &alice, &id).await;
    assert_eq!(
        first,
        export(&app, &alice, &id).await,
        "exports are deterministic"
    );
    let (dir, files) = files_of(&first);
    assert_eq!(dir, id);
    for name in [
        "metadata.json",
        "plan.json",
        "plan_v2.json",
        "execution.log.jsonl",
        "messages.jsonl",
        "actions.jsonl",
        "waits.jsonl",
        "final_answer.md",
        "context_history/00_initial_context.txt",
        "context_history/01_after_summarization.txt",
        "team.json",
        "history.jsonl",
        "artifacts/index.json",
    ] {
        assert!(
            files.contains_key(name),
            "{name} missing: {:?}",
            files.keys()
        );
    }
    let metadata: Value = serde_json::from_slice(&files["metadata.json"]).unwrap();
    assert_eq!(metadata["version"], "1.0");
    assert_eq!(metadata["parentTaskId"], id.as_str());
    assert_eq!(metadata["finalAnswerFile"], "final_answer.md");
    let log = String::from_utf8(files["execution.log.jsonl"].clone()).unwrap();
    assert_eq!(log.lines().count(), 2);

    // Imported by another user, under a new id.
    let bob = app.token("t1", "bob");
    let imported = expect(
        app.post("/api/tasks/import", &bob)
            .header("content-type", "application/gzip")
            .body(first.clone()),
        201,
    )
    .await;
    let new_id = imported["task_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    assert_eq!(imported["source_task_id"], id.as_str());
    assert_eq!(imported["steps"], 1);
    assert_eq!(imported["artifacts"], 1);

    let second = export(&app, &bob, &new_id).await;
    let (dir2, files2) = files_of(&second);
    assert_eq!(dir2, new_id);
    let rebased: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(k, v)| {
            let text = String::from_utf8_lossy(v).replace(&id, &new_id);
            (k.clone(), text.into_bytes())
        })
        .collect();
    let files2_text: BTreeMap<String, Vec<u8>> = files2
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                String::from_utf8_lossy(v).into_owned().into_bytes(),
            )
        })
        .collect();
    assert_eq!(
        rebased.keys().collect::<Vec<_>>(),
        files2_text.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &rebased {
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&files2_text[name]),
            "{name} differs"
        );
    }

    // The imported task works like any other: its plan, steps and artifact read back.
    let detail = expect(app.get(&format!("/api/tasks/{new_id}"), &bob), 200).await;
    assert_eq!(detail["plan_version"], 2);
    assert_eq!(detail["plan"]["items"][0]["status"], "completed");
    let steps = expect(app.get(&format!("/api/tasks/{new_id}/steps"), &bob), 200).await;
    let uri = steps["items"][0]["parts"][3]["uri"].as_str().unwrap();
    assert!(uri.starts_with(&format!("mnemo://tasks/{new_id}/artifacts/")));
    let aid = steps["items"][0]["parts"][3]["artifact_id"]
        .as_str()
        .unwrap();
    let response = app
        .get(&format!("/api/tasks/{new_id}/artifacts/{aid}"), &bob)
        .header("range", "bytes=0-4")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.bytes().await.unwrap().as_ref(), b"build");

    // keep_id: the original id, once.
    expect_problem(
        app.post("/api/tasks/import?keep_id=true", &alice)
            .header("content-type", "application/gzip")
            .body(first.clone()),
        409,
    )
    .await;
    let kept = expect(
        app.post("/api/tasks/import?keep_id=true", &app.token("t9", "carol"))
            .header("content-type", "application/gzip")
            .body(first),
        201,
    )
    .await;
    assert_eq!(kept["task_id"], id.as_str());
}

/// A raw `.tar.gz` with hand-written headers (builders refuse hostile paths).
fn hostile(entries: &[(&str, u8, u64, &[u8])], truncated: bool) -> Vec<u8> {
    let mut raw = Vec::new();
    for (path, kind, size, data) in entries {
        let mut header = tar::Header::new_ustar();
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_entry_type(tar::EntryType::new(*kind));
        header.set_size(*size);
        header.set_mode(0o644);
        if *kind == b'2' {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_cksum();
        raw.extend_from_slice(header.as_bytes());
        raw.extend_from_slice(data);
        raw.extend(std::iter::repeat_n(0u8, (512 - data.len() % 512) % 512));
    }
    if !truncated {
        raw.extend(std::iter::repeat_n(0u8, 1024));
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap()
}

#[sqlx::test]
async fn hostile_archives_are_refused_and_write_nothing(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "mallory");
    let metadata = br#"{"parentTaskId": "t1", "taskStatus": "RECEIVED", "version": "1.0",
        "timestamps": {"createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"}}"#;
    let good = (
        "task_memory_bank/t1/metadata.json",
        b'0',
        metadata.len() as u64,
        &metadata[..],
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "task_memory_bank/t1/../../etc/cron.d/x",
            hostile(
                &[
                    good,
                    ("task_memory_bank/t1/../../etc/cron.d/x", b'0', 1, b"x"),
                ],
                false,
            ),
        ),
        (
            "/etc/passwd",
            hostile(&[good, ("/etc/passwd", b'0', 1, b"x")], false),
        ),
        (
            "task_memory_bank/t1/artifacts/link",
            hostile(
                &[good, ("task_memory_bank/t1/artifacts/link", b'2', 0, b"")],
                false,
            ),
        ),
        (
            "task_memory_bank/t1/artifacts/huge.bin",
            // The header claims 1 GiB; none of it follows.
            hostile(
                &[
                    good,
                    ("task_memory_bank/t1/artifacts/huge.bin", b'0', 1 << 30, b""),
                ],
                true,
            ),
        ),
        (
            "task_memory_bank/t2/metadata.json",
            hostile(
                &[
                    good,
                    (
                        "task_memory_bank/t2/metadata.json",
                        b'0',
                        metadata.len() as u64,
                        &metadata[..],
                    ),
                ],
                false,
            ),
        ),
    ];
    for (member, archive) in cases {
        let problem = expect_problem(
            app.post("/api/tasks/import", &token)
                .header("content-type", "application/gzip")
                .body(archive),
            422,
        )
        .await;
        assert_eq!(problem["member"], member, "{problem}");
        assert_eq!(problem["field"], "archive");
    }
    // Bad contents are refused after the archive was read, and still nothing is written.
    let bad_history = hostile(
        &[
            good,
            (
                "task_memory_bank/t1/history.jsonl",
                b'0',
                21,
                b"{\"not\": \"a step\"}\n\n\n\n",
            ),
        ],
        false,
    );
    let problem = expect_problem(
        app.post("/api/tasks/import", &token)
            .header("content-type", "application/gzip")
            .body(bad_history),
        422,
    )
    .await;
    assert_eq!(problem["member"], "task_memory_bank/t1/history.jsonl");
    let orphan_line = br#"{"step_id":"s1","agent_name":"a","parts":[{"type":"tool_result","tool_call_id":"c","output":"x"}],"created_at":"2026-01-01T00:00:00Z"}"#;
    let orphan = hostile(
        &[
            good,
            (
                "task_memory_bank/t1/history.jsonl",
                b'0',
                orphan_line.len() as u64,
                &orphan_line[..],
            ),
        ],
        false,
    );
    let problem = expect_problem(
        app.post("/api/tasks/import", &token)
            .header("content-type", "application/gzip")
            .body(orphan),
        422,
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("line 1"),
        "{problem}"
    );
    expect_problem(
        app.post("/api/tasks/import", &token)
            .header("content-type", "application/gzip")
            .body("not an archive"),
        422,
    )
    .await;

    let listed = expect(app.get("/api/tasks", &token), 200).await;
    assert!(listed["items"].as_array().unwrap().is_empty());
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM task_steps)
              + (SELECT count(*) FROM task_artifacts)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 0);

    // The bare layout of another tool (the metadata.json only) imports.
    let plain = expect(
        app.post("/api/tasks/import", &token)
            .header("content-type", "application/gzip")
            .body(hostile(&[good], false)),
        201,
    )
    .await;
    assert_eq!(plain["source_task_id"], "t1");
    let detail = expect(
        app.get(
            &format!("/api/tasks/{}", plain["task_id"].as_str().unwrap()),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(detail["phase"], "RECEIVED");
    assert_eq!(detail["status"], "active");

    // An archive past the import cap is 413 before it is read.
    let small = TestApp::with_config(pool, |c| {
        c.tasks.artifact_max_bytes = 100;
        c.tasks.import_max_bytes = 200;
    })
    .await;
    let problem = expect_problem(
        small
            .post("/api/tasks/import", &small.token("t1", "mallory"))
            .header("content-type", "application/gzip")
            .body(vec![0u8; 201]),
        413,
    )
    .await;
    assert_eq!(problem["limit_bytes"], 200);
}

#[sqlx::test]
async fn concurrent_step_appends_get_gap_free_seqs(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token, "concurrent").await;
    let sends = (0..12).map(|n| {
        app.post(&format!("/api/tasks/{id}/steps"), &token)
            .json(&json!({"agent_name": format!("agent{n}"), "parts": [
                {"type": "tool_call", "tool_call_id": format!("c{n}"), "tool_name": "sh"},
                {"type": "tool_result", "tool_call_id": format!("c{n}"), "output": format!("out {n}")}
            ]}))
            .send()
    });
    for response in futures::future::join_all(sends).await {
        assert_eq!(response.unwrap().status(), 201);
    }
    let page = expect(
        app.get(&format!("/api/tasks/{id}/steps?limit=100"), &token),
        200,
    )
    .await;
    let seqs: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
}

/// A value the import property writes somewhere into an exported file: the statuses, roles and
/// numbers the checks look at, wrong types, text PostgreSQL cannot store (NUL), times past its
/// range.
fn odd_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    prop_oneof![
        prop::sample::select(
            &[
                "",
                "x",
                "\u{0}",
                "a\u{0}b",
                "COMPLETED",
                "COMPLETED_SUCCESS",
                "completed",
                "failed",
                "active",
                "pending",
                "agent",
                "user",
                "progress",
                "watching",
                "cli",
                "c1",
                "step_a",
                "2026-01-01T00:00:00Z",
                "+262142-12-31T23:59:59Z",
                "-262143-01-01T00:00:00Z",
                "0000-01-01T00:00:00Z",
                "01900000-0000-7000-8000-000000000000",
                "mnemo://tasks/x/artifacts/y",
            ][..]
        )
        .prop_map(Value::from),
        prop::sample::select(vec![
            -1i64,
            0,
            1,
            2,
            3,
            1000,
            i64::from(i32::MAX) + 1,
            i64::MAX
        ])
        .prop_map(Value::from),
        prop::sample::select(&[1e300, 1e308, -0.5, 1.5][..]).prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{"type": "text", "text": "\u{0}"}])),
        Just(json!({"type": "text"})),
        (1usize..20_000).prop_map(|n| Value::from("y".repeat(n))),
        ".{0,8}".prop_map(Value::from),
    ]
}

/// One change to an exported task's files.
#[derive(Debug, Clone)]
enum Edit {
    /// Walks into a JSON file (or one line of a JSON Lines file) by the indexes, and puts the
    /// value there.
    Set(
        proptest::sample::Index,
        proptest::sample::Index,
        Vec<proptest::sample::Index>,
        Value,
    ),
    Remove(proptest::sample::Index),
}

fn edit() -> impl proptest::strategy::Strategy<Value = Edit> {
    use proptest::prelude::*;
    prop_oneof![
        9 => (
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<prop::sample::Index>(), 0..5),
            odd_value(),
        )
            .prop_map(|(file, line, path, value)| Edit::Set(file, line, path, value)),
        1 => any::<prop::sample::Index>().prop_map(Edit::Remove),
    ]
}

fn apply_edit(files: &mut BTreeMap<String, Vec<u8>>, edit: &Edit) {
    let json_files: Vec<String> = files
        .keys()
        .filter(|k| k.ends_with(".json") || k.ends_with(".jsonl"))
        .cloned()
        .collect();
    match edit {
        Edit::Remove(file) => {
            let names: Vec<String> = files.keys().cloned().collect();
            files.remove(&names[file.index(names.len())]);
        }
        Edit::Set(file, line, path, value) => {
            if json_files.is_empty() {
                return;
            }
            let name = json_files[file.index(json_files.len())].clone();
            let text = String::from_utf8(files[&name].clone()).unwrap();
            let mut lines: Vec<String> = if name.ends_with(".jsonl") {
                text.lines().map(str::to_string).collect()
            } else {
                vec![text]
            };
            if lines.is_empty() {
                return;
            }
            let n = line.index(lines.len());
            let mut doc: Value = serde_json::from_str(&lines[n]).unwrap();
            // The place, as a JSON pointer found walking the document.
            let mut pointer = String::new();
            let mut at = &doc;
            for step in path {
                let (next, token) = match at {
                    Value::Object(map) if !map.is_empty() => {
                        let key = map.keys().nth(step.index(map.len())).unwrap();
                        (&map[key], key.replace('~', "~0").replace('/', "~1"))
                    }
                    Value::Array(items) if !items.is_empty() => {
                        let i = step.index(items.len());
                        (&items[i], i.to_string())
                    }
                    _ => break,
                };
                pointer.push('/');
                pointer.push_str(&token);
                at = next;
            }
            *doc.pointer_mut(&pointer).unwrap() = value.clone();
            lines[n] = serde_json::to_string(&doc).unwrap();
            files.insert(name, lines.join("\n").into_bytes());
        }
    }
}

/// Cases for the import property: 32, or an eighth of `PROPTEST_CASES` (each case is an HTTP
/// import against the database).
fn http_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(32, |n| (n / 8).max(1))
}

/// A real export with values changed anywhere in its files imports as a task or is refused with
/// a 4xx, never a 500; a refused import writes nothing, an accepted one exports again.
#[sqlx::test]
async fn edited_exports_import_or_are_refused_never_500(pool: PgPool) {
    use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let id = rich_task(&app, &alice).await;
    let (dir, files) = files_of(&export(&app, &alice, &id).await);
    let base = app.url("");
    let token = app.token("t1", "fuzz");
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();

    // The runner is synchronous: it drives the server (which keeps running on this test's
    // runtime) from a blocking thread with a runtime of its own.
    let result = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = reqwest::Client::new();
        let mut config = Config::with_cases(http_cases());
        if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
            config.rng_seed = RngSeed::Fixed(0x1a2b_3c4d);
        }
        config.failure_persistence = None;
        let mut runner = TestRunner::new(config);
        let strategy = (
            proptest::collection::vec(edit(), 1..4),
            proptest::bool::weighted(0.2),
        );
        runner.run(&strategy, |(edits, keep_id)| {
            let mut files = files.clone();
            for e in &edits {
                apply_edit(&mut files, e);
            }
            let archive = mnemo::tasks::workspace::export::archive(&dir, &files, 7).unwrap();
            let (status, body) = rt.block_on(async {
                let response = client
                    .post(format!("{base}/api/tasks/import?keep_id={keep_id}"))
                    .bearer_auth(&token)
                    .header("content-type", "application/gzip")
                    .body(archive)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                (status, response.text().await.unwrap())
            });
            if !(status == 201 || (400..500).contains(&status)) {
                return Err(TestCaseError::fail(format!("{status}: {body}")));
            }
            if status == 201 {
                counted.fetch_add(1, Ordering::SeqCst);
                let new_id = serde_json::from_str::<Value>(&body).unwrap()["task_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let again = rt.block_on(async {
                    client
                        .get(format!("{base}/api/tasks/{new_id}/export"))
                        .bearer_auth(&token)
                        .send()
                        .await
                        .unwrap()
                        .status()
                        .as_u16()
                });
                if again != 200 {
                    return Err(TestCaseError::fail(format!(
                        "the imported task {new_id} exports with {again}"
                    )));
                }
            }
            Ok(())
        })
    })
    .await
    .unwrap();
    if let Err(err) = result {
        panic!("{err}");
    }
    let accepted_count = accepted.load(Ordering::SeqCst);
    eprintln!("import property: {accepted_count} edited exports accepted, the others refused");
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        tasks,
        1 + i64::try_from(accepted_count).unwrap(),
        "refused imports wrote nothing"
    );
}

/// Values an export's files can hold but PostgreSQL cannot store (NUL characters, years past 9999
/// or before 1, numbers past ±1e300) are 422 naming the member, and nothing is written.
#[sqlx::test]
async fn exports_with_values_that_cannot_be_stored_are_422(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let id = rich_task(&app, &alice).await;
    let (dir, files) = files_of(&export(&app, &alice, &id).await);
    let cases: [(&str, &str, Value); 7] = [
        (
            "messages.jsonl",
            "/timestamp",
            json!("+262142-12-31T23:59:59Z"),
        ),
        (
            "execution.log.jsonl",
            "/timestamp",
            json!("-0001-01-01T00:00:00Z"),
        ),
        ("actions.jsonl", "/summary", json!("a\u{0}b")),
        (
            "actions.jsonl",
            "/input_data",
            json!([{"type": "text", "text": "\u{0}"}]),
        ),
        (
            "metadata.json",
            "/timestamps/createdAt",
            json!("0000-01-01T00:00:00Z"),
        ),
        ("history.jsonl", "/parts/0/text", json!("\u{0}")),
        ("team.json", "/model", json!(1e308)),
    ];
    for (file, pointer, value) in cases {
        let mut files = files.clone();
        let text = String::from_utf8(files[file].clone()).unwrap();
        let mut lines: Vec<Value> = if file.ends_with(".jsonl") {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        } else {
            vec![serde_json::from_str(&text).unwrap()]
        };
        *lines[0].pointer_mut(pointer).unwrap() = value;
        let joined: Vec<String> = lines.iter().map(|v| v.to_string()).collect();
        files.insert(file.into(), joined.join("\n").into_bytes());
        let archive = mnemo::tasks::workspace::export::archive(&dir, &files, 7).unwrap();
        let problem = expect_problem(
            app.post("/api/tasks/import", &alice)
                .header("content-type", "application/gzip")
                .body(archive),
            422,
        )
        .await;
        assert_eq!(
            problem["member"],
            format!("task_memory_bank/{dir}/{file}"),
            "{file} {pointer}: {problem}"
        );
    }
    let mut files = files.clone();
    files.insert("final_answer.md".into(), b"done\0".to_vec());
    let archive = mnemo::tasks::workspace::export::archive(&dir, &files, 7).unwrap();
    expect_problem(
        app.post("/api/tasks/import", &alice)
            .header("content-type", "application/gzip")
            .body(archive),
        422,
    )
    .await;
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 1);
}

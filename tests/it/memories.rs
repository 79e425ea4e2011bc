//! Detail memory over HTTP.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{
    TestApp, expect, expect_problem, index_blocks_read, load_memories, one_connection,
    rows_fetched_through_indexes,
};

/// A log of about `target` bytes whose lines carry multi-byte characters, with one error line 40
/// lines before the end. Returns the log, the error line's number and its text.
fn build_log(target: usize) -> (String, u64, String) {
    let mut lines = Vec::new();
    let mut size = 0;
    let mut n = 0u64;
    while size < target {
        n += 1;
        let line = format!(
            "2026-11-21T10:{:02}:{:02}.{:03}Z INFO worker-{} processed batch {n} in {} ms · status ok ✓ naïve café 🦀\n",
            (n / 60) % 60,
            n % 60,
            n % 1000,
            n % 8,
            n % 97
        );
        size += line.len();
        lines.push(line);
    }
    let error = "2026-11-21T11:59:59.001Z ERROR worker-2 database connection refused: ECONNREFUSED 10.0.0.7:5432 — retries exhausted".to_owned();
    let at = lines.len() - 40;
    lines.insert(at, format!("{error}\n"));
    (lines.concat(), at as u64 + 1, error)
}

/// `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

async fn chunk_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM agent_memory_chunks")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn store(app: &TestApp, token: &str, body: Value) -> Value {
    expect(app.post("/api/memories", token).json(&body), 201).await
}

#[sqlx::test]
async fn a_five_megabyte_log_is_stored_searched_grepped_and_paged(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");
    let (log, error_line, error_text) = build_log(5 * 1024 * 1024);
    assert!(log.len() > 5 * 1024 * 1024);

    let stored = store(
        &app,
        &token,
        json!({"content": log, "key": "build-log", "memory_type": "command_output",
               "metadata": {"command": "make deploy", "exit_code": 2}}),
    )
    .await;
    assert_eq!(stored["status"], "created");
    assert_eq!(stored["size_bytes"], log.len() as u64);
    assert_eq!(stored["line_count"], log.lines().count() as u64);
    let tokens = stored["token_count"].as_i64().unwrap();
    assert!(
        tokens > log.len() as i64 / 10 && tokens < log.len() as i64,
        "{tokens}"
    );
    let summary = stored["summary"].as_str().unwrap();
    assert_eq!(
        stored["placeholder"],
        format!("[MemoryRef: build-log - {summary}]")
    );
    assert!(
        summary.contains(&format!("1 error line at line {}", thousands(error_line))),
        "{summary}"
    );

    // Search finds the error line's chunk, and the first line in it with a matched word.
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "database connection refused"})),
        200,
    )
    .await;
    let hits = found["hits"].as_array().unwrap();
    assert!(
        hits.iter().all(|h| h["memory_key"] == "build-log"),
        "{found}"
    );
    // The summary quotes the error line, so it matches too, but a memory is listed once, at
    // the content chunk that locates the line.
    assert_eq!(hits.len(), 1, "{found}");
    let hit = &hits[0];
    assert_eq!(hit["matched"], "content");
    assert_eq!(hit["placeholder"], stored["placeholder"]);
    let (start, end) = (
        hit["line_start"].as_u64().unwrap(),
        hit["line_end"].as_u64().unwrap(),
    );
    assert!(start <= error_line && error_line <= end, "{hit}");
    assert!(end - start < 1000, "a chunk is a narrow range: {hit}");
    assert_eq!(hit["match_line"], error_line);
    assert!(
        hit["snippet"].as_str().unwrap().contains("**database**"),
        "{hit}"
    );
    // The hit's page parameters read the chunk holding the error line.
    let retrieve = &hit["retrieve"];
    let page = expect(
        app.get(
            &format!(
                "/api/memories/build-log?line_start={}&line_count={}",
                retrieve["line_start"], retrieve["line_count"]
            ),
            &token,
        ),
        200,
    )
    .await;
    assert!(
        page["content"].as_str().unwrap().contains(&error_text),
        "{}",
        page["range"]
    );
    assert_eq!(page["range"]["line_start"], start);

    // Grep with context.
    let lines: Vec<&str> = log.lines().collect();
    let grep = expect(
        app.get(
            "/api/memories/build-log/grep?pattern=ECONNREFUSED%20%5B0-9.%5D%2B&context=2",
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(grep["total_matches"], 1);
    assert_eq!(grep["truncated"], false);
    let m = &grep["matches"][0];
    assert_eq!(m["line_number"], error_line);
    assert_eq!(m["line"], error_text);
    let at = error_line as usize - 1;
    assert_eq!(
        m["before"],
        json!([{"line_number": error_line - 2, "line": lines[at - 2]},
               {"line_number": error_line - 1, "line": lines[at - 1]}])
    );
    assert_eq!(
        m["after"],
        json!([{"line_number": error_line + 1, "line": lines[at + 1]},
               {"line_number": error_line + 2, "line": lines[at + 2]}])
    );

    // Paged through by bytes with an odd page size, so pages end inside multi-byte characters.
    let mut joined = String::with_capacity(log.len());
    let mut query = "offset=0&limit=30001".to_owned();
    let mut pages = 0;
    loop {
        let page = expect(
            app.get(&format!("/api/memories/build-log?{query}"), &token),
            200,
        )
        .await;
        assert_eq!(page["range"]["offset"], joined.len() as u64);
        let text = page["content"].as_str().unwrap();
        assert!(!text.is_empty() && text.len() <= 30001);
        joined.push_str(text);
        assert_eq!(page["totals"]["size_bytes"], log.len() as u64);
        pages += 1;
        match page["next"].as_object() {
            Some(next) => {
                query = format!("offset={}&limit={}", next["offset"], next["limit"]);
            }
            None => break,
        }
    }
    assert!(pages > 150);
    assert!(joined == log, "byte pages concatenate to the original");

    // And by lines, across chunk edges.
    let mut joined = String::with_capacity(log.len());
    let mut query = "line_start=1&line_count=4999".to_owned();
    let mut expected_line = 1;
    loop {
        let page = expect(
            app.get(&format!("/api/memories/build-log?{query}"), &token),
            200,
        )
        .await;
        assert_eq!(page["range"]["line_start"], expected_line);
        assert_eq!(page["capped"], false);
        joined.push_str(page["content"].as_str().unwrap());
        match page["next"].as_object() {
            Some(next) => {
                expected_line = next["line_start"].as_u64().unwrap();
                query = format!(
                    "line_start={}&line_count={}",
                    next["line_start"], next["line_count"]
                );
            }
            None => break,
        }
    }
    assert!(joined == log, "line pages concatenate to the original");

    // The raw slice as text/plain.
    let response = app
        .get("/api/memories/build-log?offset=3&limit=10", &token)
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(
        response.headers()["x-memory-range"],
        format!("bytes 3-13/{}", log.len()).as_str()
    );
    assert_eq!(response.headers()["x-memory-next"], "offset=13&limit=10");
    assert_eq!(response.text().await.unwrap(), &log[3..13]);
}

#[sqlx::test]
async fn default_page_is_small_and_pages_never_split_characters(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");
    let content = "é🦀€".repeat(5000);
    store(&app, &token, json!({"content": content, "key": "chars"})).await;
    let page = expect(app.get("/api/memories/chars", &token), 200).await;
    assert_eq!(page["range"]["unit"], "bytes");
    assert!(page["content"].as_str().unwrap().len() <= 8192);
    assert_eq!(page["next"]["offset"], page["range"]["end"]);
    // An offset inside a character moves back to its first byte; a limit smaller than one
    // character still returns that character.
    let page = expect(app.get("/api/memories/chars?offset=3&limit=1", &token), 200).await;
    assert_eq!(page["content"], "🦀");
    assert_eq!(page["range"]["offset"], 2);
    assert_eq!(page["range"]["end"], 6);
}

#[sqlx::test]
async fn put_is_idempotent(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("acme", "alice");
    let body = json!({"content": "line one\nline two\n", "description": "two lines"});

    let first = expect(app.put("/api/memories/notes.v1", &token).json(&body), 201).await;
    assert_eq!(first["status"], "created");
    assert_eq!(first["version"], 1);
    assert_eq!(first["placeholder"], "[MemoryRef: notes.v1 - two lines]");
    let chunks = chunk_rows(&pool).await;

    let again = expect(app.put("/api/memories/notes.v1", &token).json(&body), 200).await;
    assert_eq!(again["status"], "unchanged");
    assert_eq!(again["version"], 1);
    assert_eq!(again["updated_at"], first["updated_at"]);
    assert_eq!(chunk_rows(&pool).await, chunks, "nothing duplicated");
    let list = expect(app.get("/api/memories", &token), 200).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // Same content, new description: updated in place.
    let updated = expect(
        app.put("/api/memories/notes.v1", &token)
            .json(&json!({"content": "line one\nline two\n", "description": "renamed"})),
        200,
    )
    .await;
    assert_eq!(updated["status"], "updated");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["placeholder"], "[MemoryRef: notes.v1 - renamed]");

    // Different content replaces the old version.
    let replaced = expect(
        app.put("/api/memories/notes.v1", &token)
            .json(&json!({"content": "new content\n", "description": "renamed"})),
        200,
    )
    .await;
    assert_eq!(replaced["status"], "replaced");
    assert_eq!(replaced["version"], 3);
    assert_eq!(replaced["previous"]["size_bytes"], 18);
    assert_eq!(
        replaced["previous"]["content_sha256"],
        first["content_sha256"]
    );
    assert_ne!(replaced["content_sha256"], first["content_sha256"]);
    assert_eq!(replaced["created_at"], first["created_at"]);
    let page = expect(app.get("/api/memories/notes.v1", &token), 200).await;
    assert_eq!(page["content"], "new content\n");
    assert_eq!(chunk_rows(&pool).await, 1);

    // POST to an existing key is a conflict; the body key must match the path.
    let problem = expect_problem(
        app.post("/api/memories", &token)
            .json(&json!({"content": "x", "key": "notes.v1"})),
        409,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("PUT"));
    let problem = expect_problem(
        app.put("/api/memories/notes.v1", &token)
            .json(&json!({"content": "x", "key": "other"})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "key");
}

#[sqlx::test]
async fn soft_and_hard_delete(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("acme", "alice");
    store(
        &app,
        &token,
        json!({"content": "kubectl rollout status: deployment payments ready\n", "key": "rollout"}),
    )
    .await;
    let search = json!({"query": "payments"});

    expect(app.delete("/api/memories/rollout", &token), 204).await;
    let problem = expect_problem(app.get("/api/memories/rollout", &token), 404).await;
    assert_eq!(problem["is_active"], false);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("include_inactive")
    );
    let page = expect(
        app.get("/api/memories/rollout?include_inactive=true", &token),
        200,
    )
    .await;
    assert_eq!(page["is_active"], false);
    assert!(page["content"].as_str().unwrap().contains("payments"));
    let list = expect(app.get("/api/memories", &token), 200).await;
    assert_eq!(list["items"], json!([]));
    let list = expect(app.get("/api/memories?include_inactive=true", &token), 200).await;
    assert_eq!(list["items"][0]["memory_key"], "rollout");
    assert_eq!(list["items"][0]["is_active"], false);
    let found = expect(app.post("/api/memories/search", &token).json(&search), 200).await;
    assert_eq!(found["hits"], json!([]));
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "payments", "filters": {"include_inactive": true}})),
        200,
    )
    .await;
    assert_eq!(found["hits"][0]["memory_key"], "rollout");
    // Soft delete twice is fine.
    expect(app.delete("/api/memories/rollout", &token), 204).await;

    expect(app.delete("/api/memories/rollout?hard=true", &token), 204).await;
    expect_problem(
        app.get("/api/memories/rollout?include_inactive=true", &token),
        404,
    )
    .await;
    expect_problem(app.delete("/api/memories/rollout", &token), 404).await;
    assert_eq!(chunk_rows(&pool).await, 0, "hard delete removes the chunks");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_memories")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[sqlx::test]
async fn another_user_or_tenant_sees_nothing(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("acme", "alice");
    let bob = app.token("acme", "bob");
    let alice_elsewhere = app.token("other", "alice");
    store(
        &app,
        &alice,
        json!({"content": "secret token rotation log\nERROR vault sealed\n", "key": "vault",
               "agent_id": "ops"}),
    )
    .await;
    for token in [&bob, &alice_elsewhere] {
        expect_problem(app.get("/api/memories/vault", token), 404).await;
        expect_problem(
            app.get("/api/memories/vault?include_inactive=true", token),
            404,
        )
        .await;
        expect_problem(
            app.get("/api/memories/vault/grep?pattern=vault", token),
            404,
        )
        .await;
        expect_problem(app.delete("/api/memories/vault?hard=true", token), 404).await;
        let found = expect(
            app.post("/api/memories/search", token)
                .json(&json!({"query": "vault sealed"})),
            200,
        )
        .await;
        assert_eq!(found["hits"], json!([]));
        let list = expect(app.get("/api/memories?include_inactive=true", token), 200).await;
        assert_eq!(list["items"], json!([]));
    }
    // Bob may use the same key for his own memory; Alice's is untouched.
    let bobs = expect(
        app.put("/api/memories/vault", &bob)
            .json(&json!({"content": "bob's"})),
        201,
    )
    .await;
    assert_eq!(bobs["status"], "created");
    let page = expect(app.get("/api/memories/vault", &alice), 200).await;
    assert!(page["content"].as_str().unwrap().contains("vault sealed"));
    let found = expect(
        app.post("/api/memories/search", &alice)
            .json(&json!({"query": "vault sealed"})),
        200,
    )
    .await;
    assert_eq!(found["hits"][0]["memory_key"], "vault");
}

#[sqlx::test]
async fn capture_below_and_above_the_threshold(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");

    let small = "On branch main\nnothing to commit, working tree clean\n";
    let inline = expect(
        app.post("/api/memories/capture", &token)
            .json(&json!({"content": small, "command": "git status"})),
        200,
    )
    .await;
    assert_eq!(inline["stored"], false);
    assert_eq!(inline["context"], small);
    assert_eq!(inline["memory"], Value::Null);
    assert_eq!(inline["threshold_tokens"], 500);
    assert!(inline["token_count"].as_i64().unwrap() > 5);
    let list = expect(app.get("/api/memories", &token), 200).await;
    assert_eq!(
        list["items"],
        json!([]),
        "nothing stored below the threshold"
    );

    let mut output = String::from("   Compiling mnemo v0.1.0\n");
    for i in 0..300 {
        output.push_str(&format!("   Compiling dependency-{i} v1.{i}.0\n"));
    }
    output.push_str("warning: unused variable `x`\n");
    output.push_str("error[E0425]: cannot find value `y` in this scope\n");
    output.push_str("error: could not compile `mnemo` due to 1 previous error\n");
    let captured = expect(
        app.post("/api/memories/capture", &token).json(&json!({
            "content": output, "command": "cargo build", "exit_code": 101,
            "duration_ms": 5300, "thread_id": "t-1"
        })),
        201,
    )
    .await;
    assert_eq!(captured["stored"], true);
    assert!(captured["token_count"].as_i64().unwrap() > 500);
    let memory = &captured["memory"];
    let key = memory["memory_key"].as_str().unwrap();
    assert!(key.starts_with("cmd_"), "{key}");
    assert_eq!(memory["memory_type"], "command_output");
    let placeholder = memory["placeholder"].as_str().unwrap();
    assert_eq!(
        captured["context"],
        format!("Command 'cargo build' exited with 101; its output is stored in {placeholder}")
    );
    let summary = memory["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("cargo build: \"Compiling mnemo v0.1.0\" (")
            && summary.ends_with(
                " KiB, 304 lines; 2 error lines, first at line 303: \"error(E0425): cannot find \
                 value `y` in this scope\"; 1 warning line)"
            ),
        "{summary}"
    );
    // Stored in full, with the command in the metadata.
    let page = expect(
        app.get(&format!("/api/memories/{key}?limit=1000000"), &token),
        200,
    )
    .await;
    assert_eq!(page["content"], output);
    let list = expect(
        app.get(
            "/api/memories?metadata=%7B%22exit_code%22%3A101%7D&thread_id=t-1",
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(list["items"][0]["memory_key"], key);
    assert_eq!(list["items"][0]["metadata"]["command"], "cargo build");
    assert_eq!(list["items"][0]["metadata"]["duration_ms"], 5300);

    // A higher threshold keeps the same output inline.
    let inline = expect(
        app.post("/api/memories/capture", &token)
            .json(&json!({"content": output, "threshold_tokens": 100000})),
        200,
    )
    .await;
    assert_eq!(inline["stored"], false);
    assert_eq!(inline["context"], output);

    // A duration must fit the signed 64-bit integer the document promises, and not be negative.
    for bad in [json!(9_223_372_036_854_775_808u64), json!(-1)] {
        let p = expect_problem(
            app.post("/api/memories/capture", &token)
                .json(&json!({"content": "x", "duration_ms": bad})),
            422,
        )
        .await;
        assert_eq!(p["field"], "duration_ms", "{p}");
    }
}

#[sqlx::test]
async fn bad_input_is_refused_with_the_field_named(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.memory_max_bytes = 1000).await;
    let token = app.token("acme", "alice");
    store(&app, &token, json!({"content": "abc\ndef\n", "key": "k"})).await;

    let p = expect_problem(
        app.post("/api/memories", &token)
            .json(&json!({"content": ""})),
        422,
    )
    .await;
    assert_eq!(p["field"], "content");
    let p = expect_problem(
        app.post("/api/memories", &token)
            .json(&json!({"content": "x".repeat(1001)})),
        413,
    )
    .await;
    assert_eq!(p["limit_bytes"], 1000);
    assert!(p["detail"].as_str().unwrap().contains("1000"));
    // A body over the route limit (twice the content limit plus 1 MiB) is refused unread.
    let p = expect_problem(
        app.post("/api/memories", &token)
            .json(&json!({"content": "x".repeat(2000 + 1024 * 1024)})),
        413,
    )
    .await;
    assert_eq!(p["limit_bytes"], 2000 + 1024 * 1024);
    expect_problem(
        app.post("/api/memories", &token)
            .header("content-type", "text/plain")
            .body("abc"),
        415,
    )
    .await;
    for (body, field) in [
        (json!({"content": "x", "key": "has space"}), "key"),
        (json!({"content": "x", "key": "search"}), "key"),
        (json!({"content": "x", "memory_type": ""}), "memory_type"),
        (json!({"content": "x", "agent_id": "a\u{0007}"}), "agent_id"),
        (json!({"content": "x", "metadata": [1]}), "metadata"),
        (json!({"content": 5}), "content"),
        (json!({"content": "x", "surprise": 1}), "surprise"),
    ] {
        let p = expect_problem(app.post("/api/memories", &token).json(&body), 422).await;
        assert_eq!(p["field"], field, "{body} -> {p}");
    }
    let p = expect_problem(
        app.post("/api/memories/capture", &token)
            .json(&json!({"content": "", "command": "true"})),
        422,
    )
    .await;
    assert_eq!(p["field"], "content");

    // Ranges.
    for (query, field) in [
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
        ("limit=abc", "limit"),
        ("limit=2000000", "limit"),
        ("offset=99999999999999999", "offset"),
        ("line_start=0", "line_start"),
        ("line_count=0", "line_count"),
        ("line_count=100001", "line_count"),
        ("offset=0&line_start=1", "line_start"),
    ] {
        let p = expect_problem(app.get(&format!("/api/memories/k?{query}"), &token), 422).await;
        assert_eq!(p["field"], field, "{query} -> {p}");
    }
    // Past the end: an empty slice with the totals.
    let page = expect(app.get("/api/memories/k?offset=50&limit=10", &token), 200).await;
    assert_eq!(page["content"], "");
    assert_eq!(page["next"], Value::Null);
    assert_eq!(page["totals"]["size_bytes"], 8);
    assert_eq!(page["totals"]["line_count"], 2);
    let page = expect(app.get("/api/memories/k?line_start=3", &token), 200).await;
    assert_eq!(page["content"], "");
    assert_eq!(page["range"]["line_start"], Value::Null);
    assert_eq!(page["totals"]["line_count"], 2);

    // Unknown key; grep, list and search parameters.
    expect_problem(app.get("/api/memories/nope", &token), 404).await;
    expect_problem(app.get("/api/memories/nope/grep?pattern=x", &token), 404).await;
    for (query, field) in [
        ("pattern=%28", "pattern"),
        ("", "pattern"),
        ("pattern=x&context=21", "context"),
        ("pattern=x&max_matches=0", "max_matches"),
    ] {
        let p = expect_problem(
            app.get(&format!("/api/memories/k/grep?{query}"), &token),
            422,
        )
        .await;
        assert_eq!(p["field"], field, "{query} -> {p}");
    }
    for (query, field) in [
        ("cursor=zzz", "cursor"),
        ("limit=0", "limit"),
        ("metadata=%5B1%5D", "metadata"),
        ("created_after=yesterday", "created_after"),
    ] {
        let p = expect_problem(app.get(&format!("/api/memories?{query}"), &token), 422).await;
        assert_eq!(p["field"], field, "{query} -> {p}");
    }
    for (body, field) in [
        (json!({"query": "  "}), "query"),
        (json!({"query": "x", "limit": 0}), "limit"),
        (
            json!({"query": "x", "filters": {"nope": 1}}),
            "filters.nope",
        ),
    ] {
        let p = expect_problem(app.post("/api/memories/search", &token).json(&body), 422).await;
        assert_eq!(p["field"], field, "{body} -> {p}");
    }
    // Any text is a safe query.
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "'); DROP TABLE agent_memories; -- \" & | !"})),
        200,
    )
    .await;
    assert_eq!(found["hits"], json!([]));
}

#[sqlx::test]
async fn list_filters_and_cursor_pagination(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");
    for i in 0..5 {
        store(
            &app,
            &token,
            json!({"content": format!("output {i}\n"), "agent_id": if i % 2 == 0 { "even" } else { "odd" },
                   "thread_id": format!("t{}", i % 3), "memory_type": if i == 4 { "file_content" } else { "command_output" },
                   "metadata": {"n": i, "tag": "x"}}),
        )
        .await;
    }
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/memories?limit=2&cursor={c}"),
            None => "/api/memories?limit=2".to_owned(),
        };
        let page = expect(app.get(&path, &token), 200).await;
        for item in page["items"].as_array().unwrap() {
            assert!(item.get("content").is_none(), "no content bodies in lists");
            keys.push(item["summary"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..5)
        .rev()
        .map(|i| format!("\"output {i}\" (9 B, 1 line)"))
        .collect();
    assert_eq!(keys, expected, "newest first, each once");

    let count = |v: Value| v["items"].as_array().unwrap().len();
    assert_eq!(
        count(expect(app.get("/api/memories?agent_id=even", &token), 200).await),
        3
    );
    assert_eq!(
        count(expect(app.get("/api/memories?thread_id=t1", &token), 200).await),
        2
    );
    assert_eq!(
        count(
            expect(
                app.get("/api/memories?memory_type=file_content", &token),
                200
            )
            .await
        ),
        1
    );
    assert_eq!(
        count(
            expect(
                app.get("/api/memories?metadata=%7B%22n%22%3A3%7D", &token),
                200
            )
            .await
        ),
        1
    );
    assert_eq!(
        count(
            expect(
                app.get("/api/memories?created_after=2100-01-01T00:00:00Z", &token),
                200
            )
            .await
        ),
        0
    );
    assert_eq!(
        count(
            expect(
                app.get(
                    "/api/memories?created_before=2100-01-01T00:00:00Z&agent_id=odd",
                    &token
                ),
                200
            )
            .await
        ),
        2
    );
}

#[sqlx::test]
async fn search_ranks_summaries_and_filters(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");
    store(
        &app,
        &token,
        json!({"content": "step 1\nstep 2\n", "description": "Deployment checklist for the payments service",
               "key": "checklist", "agent_id": "planner"}),
    )
    .await;
    store(
        &app,
        &token,
        json!({"content": "GET /payments 200\nGET /payments 503 upstream timeout\n", "key": "access",
               "agent_id": "ops", "description": "nginx access log"}),
    )
    .await;
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "payments"})),
        200,
    )
    .await;
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    let summary_hit = hits.iter().find(|h| h["matched"] == "summary").unwrap();
    assert_eq!(summary_hit["memory_key"], "checklist");
    assert_eq!(summary_hit["line_start"], Value::Null);
    assert!(
        summary_hit["snippet"]
            .as_str()
            .unwrap()
            .contains("**payments**")
    );
    let content_hit = hits.iter().find(|h| h["matched"] == "content").unwrap();
    assert_eq!(content_hit["memory_key"], "access");
    assert_eq!(content_hit["line_start"], 1);
    assert_eq!(content_hit["line_end"], 2);
    assert_eq!(content_hit["byte_start"], 0);
    assert!(content_hit["score"].as_f64().unwrap() > 0.0);

    // Filters and limit.
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "payments", "filters": {"agent_id": "ops"}})),
        200,
    )
    .await;
    assert_eq!(found["hits"].as_array().unwrap().len(), 1);
    assert_eq!(found["hits"][0]["memory_key"], "access");
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "payments", "limit": 1})),
        200,
    )
    .await;
    assert_eq!(found["hits"].as_array().unwrap().len(), 1);
    assert_eq!(found["has_more"], true);
    // Web-search syntax: exclusion.
    let found = expect(
        app.post("/api/memories/search", &token)
            .json(&json!({"query": "payments -timeout"})),
        200,
    )
    .await;
    assert_eq!(found["hits"].as_array().unwrap().len(), 1);
    assert_eq!(found["hits"][0]["memory_key"], "checklist");
}

#[sqlx::test]
async fn grep_counts_every_match_and_flags_truncation(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "alice");
    let content: String = (1..=30)
        .map(|i| format!("{} line {i}\n", if i % 3 == 0 { "WARN" } else { "info" }))
        .collect();
    store(&app, &token, json!({"content": content, "key": "g"})).await;
    let grep = expect(
        app.get(
            "/api/memories/g/grep?pattern=warn&ignore_case=true&context=0&max_matches=4",
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(grep["total_matches"], 10);
    assert_eq!(grep["truncated"], true);
    let numbers: Vec<u64> = grep["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["line_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![3, 6, 9, 12]);
    assert_eq!(grep["matches"][0]["before"], json!([]));
    // Case-sensitive by default.
    let grep = expect(app.get("/api/memories/g/grep?pattern=warn", &token), 200).await;
    assert_eq!(grep["total_matches"], 0);
}

#[sqlx::test]
async fn writes_need_the_write_scope(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let reader = crate::common::hs256(
        &json!({"sub": "alice", "tenant_id": "acme", "exp": crate::common::now() + 600,
                "scope": "memory:read"}),
    );
    expect_problem(
        app.post("/api/memories", &reader)
            .json(&json!({"content": "x"})),
        403,
    )
    .await;
    expect_problem(
        app.post("/api/memories/capture", &reader)
            .json(&json!({"content": "x"})),
        403,
    )
    .await;
    expect_problem(app.delete("/api/memories/x", &reader), 403).await;
    expect(app.get("/api/memories", &reader), 200).await;
}

/// The agent tools other domains call with their own scoped transaction.
#[sqlx::test]
async fn agent_tool_functions_work_in_a_callers_transaction(pool: PgPool) {
    use mnemo::access::Caller;
    use mnemo::auth::{Principal, Scope};
    use mnemo::memories::PageRequest;
    use mnemo::memories::model::SearchRequest;
    use mnemo::memories::store::{Limits, NewMemory, retrieve_memory, search_memory, store_memory};

    let app = TestApp::new(pool.clone()).await;
    let limits = Limits::from_config(&app.state.config);
    let principal = Principal {
        tenant_id: "acme".into(),
        user_id: "alice".into(),
        scopes: vec![],
    };
    let mut tx = mnemo::db::Db::new(pool.clone())
        .scoped(&principal)
        .await
        .unwrap();
    let stored = store_memory(
        &mut tx,
        NewMemory {
            content: "alpha\nbeta kubernetes\ngamma\n".into(),
            description: Some("tool output".into()),
            ..NewMemory::default()
        },
        &limits,
    )
    .await
    .unwrap();
    assert!(stored.memory_key.starts_with("mem_"));
    let found = search_memory(
        &mut tx,
        &SearchRequest {
            query: "kubernetes".into(),
            limit: None,
            mode: None,
            filters: None,
        },
        mnemo::search::SearchMode::Keyword,
        None,
    )
    .await
    .unwrap();
    assert_eq!(found.hits[0].memory_key, stored.memory_key);
    assert_eq!(found.hits[0].match_line, Some(2));
    tx.commit().await.unwrap();
    // Committed in the caller's transaction: a page reads in one call as the caller, and no
    // one else finds it.
    let page_as = |user: &str| {
        let caller = Caller::new(
            mnemo::db::Db::new(pool.clone()),
            Principal {
                tenant_id: "acme".into(),
                user_id: user.into(),
                scopes: vec![Scope::Read],
            },
            Scope::Read,
        )
        .unwrap();
        let key = stored.memory_key.clone();
        async move {
            retrieve_memory(
                &caller,
                &key,
                PageRequest::Lines { start: 2, count: 1 },
                false,
                &limits,
            )
            .await
        }
    };
    assert_eq!(page_as("alice").await.unwrap().content, "beta kubernetes\n");
    assert_eq!(page_as("bob").await.unwrap_err().status_code(), 404);
    // And over HTTP.
    let token = app.token("acme", "alice");
    let page = expect(
        app.get(&format!("/api/memories/{}", stored.memory_key), &token),
        200,
    )
    .await;
    assert_eq!(page["content"], "alpha\nbeta kubernetes\ngamma\n");
}

/// Gives Alice 400 more memories and makes the statistics know them; nobody else has any.
async fn four_hundred_more_for_alice(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type, summary,
                                     size_bytes, line_count, token_count, content_sha256,
                                     chunk_count)
         SELECT 'acme', 'alice', gen_random_uuid(), 'bulk-' || i, 'text', 'bulk ' || i, 10, 1,
                2, md5(i::text), 1
         FROM generate_series(1, 400) i",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE agent_memories")
        .execute(pool)
        .await
        .unwrap();
}

/// A memory read by key costs one index entry whoever called first on the connection. The
/// read's plan is made once per connection, at its first call; made for a user the statistics
/// do not know yet, it once took that user to hold nothing and read a memory through the
/// stream index with the key as a filter, so every later caller's read went through all of
/// their memories.
#[sqlx::test]
async fn a_key_read_planned_for_a_new_user_reads_one_memory(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("acme", "alice");
    let stored = store(
        &app,
        &token,
        json!({"content": "the one we read\n", "description": "target"}),
    )
    .await;
    let key = stored["memory_key"].as_str().unwrap().to_owned();
    four_hundred_more_for_alice(&pool).await;
    let mut conn = pool.acquire().await.unwrap();
    // The first call on this connection, by a user unknown to the statistics, makes the plan.
    let none: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM mnemo_read_memory($1, false, 0, 8192, false, 32768, 'acme', 'newcomer')",
    )
    .bind(&key)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(none, 0, "another user's key reads nothing");
    // Then Alice's read, with the rows this transaction fetched through indexes of the table.
    let (pages, fetched): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM mnemo_read_memory($1, false, 0, 8192, false, 32768,
                                                       'acme', 'alice')),
                (SELECT idx_tup_fetch FROM pg_stat_xact_user_tables
                 WHERE relname = 'agent_memories')",
    )
    .bind(&key)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(pages, 1, "the memory with its one chunk");
    assert!(
        fetched <= 2,
        "the read fetched {fetched} memory rows to find one by its key"
    );
    drop(conn);
    // And over HTTP, the same page.
    let page = expect(app.get(&format!("/api/memories/{key}"), &token), 200).await;
    assert_eq!(page["content"], "the one we read\n");
}

/// The statements that find a memory by its key for a grep, a `PUT` and a delete compare with
/// the caller's tenant and user as values the planner cannot see, so the plan a connection keeps
/// for them after its first calls is the key index's whoever made those calls. Costed for a
/// user the statistics do not know, it once went through the stream index with the key as a
/// filter, and every later caller's grep read all of their memories.
#[sqlx::test]
async fn a_grep_planned_for_a_new_user_reads_one_memory(pool: PgPool) {
    // One connection, so the plans the newcomer's calls leave are the ones Alice's call uses.
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let token = app.token("acme", "alice");
    let stored = store(
        &app,
        &token,
        json!({"content": "needle in here\n", "description": "target"}),
    )
    .await;
    let key = stored["memory_key"].as_str().unwrap().to_owned();
    four_hundred_more_for_alice(&pool).await;
    let grep = format!("/api/memories/{key}/grep?pattern=needle");
    // More calls than the five custom plans a prepared statement gets before its generic plan.
    let newcomer = app.token("acme", "newcomer");
    for _ in 0..8 {
        expect_problem(app.get(&grep, &newcomer), 404).await;
    }
    let fetched = || rows_fetched_through_indexes(&one, &pool, "agent_memories");
    let before = fetched().await;
    let found = expect(app.get(&grep, &token), 200).await;
    assert_eq!(found["matches"][0]["line"], "needle in here", "{found}");
    let after = fetched().await;
    assert!(
        after - before <= 2,
        "the grep fetched {} memory rows to find one by its key",
        after - before
    );
}

/// A user the statistics do not know yet (one who arrived after the last `ANALYZE`) is taken by
/// the planner to hold a single memory, so any index that leads with the tenant and user looks
/// as good as the primary key for a lookup by id: a search's lookups by id (its filter test on
/// each match, its follower lookups, the hits it shows) once read all of the user's entries of
/// another index (the creation time's, or the stream's, which ends with the id and which
/// PostgreSQL 18 can skip-scan), one such scan per memory. They compare the scope through
/// sub-selects, which the planner does not evaluate, and go through the primary key whoever
/// searches.
#[sqlx::test]
async fn a_search_by_a_user_the_statistics_do_not_know_looks_memories_up_by_id(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    four_hundred_more_for_alice(&pool).await;
    // Carol's 3,000 memories arrive after the statistics were taken; 30 of them hold the word.
    load_memories(
        &pool,
        "carol",
        3000,
        "CASE WHEN i % 100 = 50 THEN 'the deploy went to zanzibar ' || i
              ELSE 'the deploy went fine ' || i END",
    )
    .await;
    let carol = app.token("acme", "carol");
    let blocks = || index_blocks_read(&one, &pool, "agent_memories");
    for body in [
        json!({"query": "zanzibar", "mode": "keyword", "limit": 10}),
        // A filter, tested on each match by a lookup by id.
        json!({"query": "zanzibar", "mode": "keyword", "limit": 10,
               "filters": {"memory_type": "text"}}),
    ] {
        let before = blocks().await;
        let found = expect(app.post("/api/memories/search", &carol).json(&body), 200).await;
        let read = blocks().await - before;
        let hits = found["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 10, "{found}");
        assert!(
            hits.iter()
                .all(|h| h["snippet"].as_str().unwrap().contains("zanzibar")),
            "{found}"
        );
        // A few blocks a lookup, and a pass over the user's memories for their summaries: 461
        // blocks measured; a scan of the user's index entries for each match read 1,466.
        assert!(
            read <= 800,
            "{body}: the search read {read} index blocks of the memories"
        );
    }
}

/// A `PUT` of a memory that is already stored finds its row by id, and that lookup too is
/// planned the same for every caller: made after a newcomer's calls, it once could leave a plan
/// that reached the row through an index with the id as a filter, reading all of a later
/// caller's memories.
#[sqlx::test]
async fn a_put_planned_for_a_new_user_reads_one_memory(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let alice = app.token("acme", "alice");
    let body = json!({"content": "the same text\n", "description": "kept"});
    expect(app.put("/api/memories/target", &alice).json(&body), 201).await;
    four_hundred_more_for_alice(&pool).await;
    // The newcomer stores its own memory, then writes it unchanged more times than the five
    // custom plans a prepared statement gets before its generic plan.
    let newcomer = app.token("acme", "newcomer");
    expect(app.put("/api/memories/target", &newcomer).json(&body), 201).await;
    for _ in 0..8 {
        let again = expect(app.put("/api/memories/target", &newcomer).json(&body), 200).await;
        assert_eq!(again["status"], "unchanged", "{again}");
    }
    let fetched = || rows_fetched_through_indexes(&one, &pool, "agent_memories");
    let before = fetched().await;
    let again = expect(app.put("/api/memories/target", &alice).json(&body), 200).await;
    assert_eq!(again["status"], "unchanged", "{again}");
    assert_eq!(again["version"], 1, "{again}");
    let after = fetched().await;
    // The lookup by key (locking the row) and the read of its version by id.
    assert!(
        after - before <= 3,
        "the put fetched {} memory rows to find one",
        after - before
    );
}

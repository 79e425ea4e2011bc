//! Hostile input never answers 500 and never corrupts what is stored; an unreachable database is
//! a prompt 503 with `Retry-After`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::common::{TestApp, expect, expect_problem, one_waits_on_a_lock};

const NOTES_OPS: &str = "/api/agents/assistant/notes/operations";

async fn task(app: &TestApp, token: &str) -> String {
    let body = expect(
        app.post("/api/tasks", token)
            .json(&json!({"name": "probe", "plan": ["one", "two"]})),
        201,
    )
    .await;
    body["id"].as_str().unwrap().to_owned()
}

/// Every way a NUL character can arrive is a 422 naming where it was, never a 500.
#[sqlx::test]
async fn nul_characters_are_422_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token).await;
    let cases: Vec<(&str, reqwest::RequestBuilder, &str)> = vec![
        (
            "memory content",
            app.put("/api/memories/k", &token)
                .json(&json!({"content": "a\u{0}b"})),
            "content",
        ),
        (
            "memory description",
            app.post("/api/memories", &token)
                .json(&json!({"content": "x", "description": "d\u{0}"})),
            "description",
        ),
        (
            "metadata value",
            app.post("/api/memories", &token)
                .json(&json!({"content": "x", "metadata": {"a": ["ok", "b\u{0}"]}})),
            "metadata.a[1]",
        ),
        (
            "metadata key",
            app.post("/api/memories", &token)
                .json(&json!({"content": "x", "metadata": {"k\u{0}": 1}})),
            "metadata.k\\u0000",
        ),
        (
            "search query",
            app.post("/api/memories/search", &token)
                .json(&json!({"query": "a\u{0}"})),
            "query",
        ),
        (
            "key in the path",
            app.get("/api/memories/n%00k", &token),
            "path",
        ),
        (
            "query-string filter",
            app.get("/api/memories?agent_id=a%00", &token),
            "agent_id",
        ),
        (
            "notes",
            app.post(NOTES_OPS, &token)
                .json(&json!({"operation": "append", "content": "x\u{0}"})),
            "content",
        ),
        (
            "task name",
            app.post("/api/tasks", &token)
                .json(&json!({"name": "n\u{0}"})),
            "name",
        ),
        (
            "task event",
            app.post(&format!("/api/tasks/{id}/events"), &token)
                .json(&json!({"events": [{"step_narrative": "s\u{0}"}]})),
            "events[0].step_narrative",
        ),
        (
            "chat archive",
            app.post("/api/chat/session/archive_messages", &token)
                .json(&json!({"session_id": "s", "messages_batch": [
                    {"id": "m\u{0}", "text": "t", "sender": "user", "timestamp": "2026-01-01T00:00:00Z"}]})),
            "messages_batch[0].id",
        ),
    ];
    for (name, request, field) in cases {
        let problem = expect_problem(request, 422).await;
        assert_eq!(problem["field"], field, "{name}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("NUL"),
            "{name}: {problem}"
        );
    }
    // Nothing was stored on the way.
    let list = expect(app.get("/api/memories", &token), 200).await;
    assert_eq!(list["items"], json!([]));
}

/// A path segment that does not parse as its parameter is 422 naming the parameter, not a bare
/// 400 and never a 500.
#[sqlx::test]
async fn unparseable_path_parameters_are_422_naming_them(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token).await;
    for (path, field) in [
        ("/api/tasks/not-a-uuid".to_owned(), "id"),
        (format!("/api/tasks/{id}/waits/null%2Cnull"), "wait_id"),
        (format!("/api/tasks/{id}/plans/2147483648"), "version"),
        (format!("/api/tasks/{id}/items/x/actions"), "ordinal"),
        (
            "/api/agents/a/notes/revisions/9223372036854775808".to_owned(),
            "version",
        ),
    ] {
        let problem = expect_problem(app.get(&path, &token), 422).await;
        assert_eq!(problem["field"], field, "{path}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(field),
            "{path}: {problem}"
        );
    }
}

/// A number PostgreSQL would keep but not give back readably is refused at write time, so no
/// read is ever poisoned; ordinary numbers round-trip exactly.
#[sqlx::test]
async fn numbers_round_trip_or_are_refused(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token).await;
    let problem = expect_problem(
        app.post("/api/memories", &token)
            .body(r#"{"content":"x","metadata":{"x":1.7976931348623157e308}}"#)
            .header("content-type", "application/json"),
        422,
    )
    .await;
    assert_eq!(problem["field"], "metadata.x");
    let problem = expect_problem(
        app.post(&format!("/api/tasks/{id}/events"), &token)
            .body(r#"{"events":[{"step_narrative":"s","result_data":{"big":-5e307}}]}"#)
            .header("content-type", "application/json"),
        422,
    )
    .await;
    assert_eq!(problem["field"], "events[0].result_data.big");

    let numbers = json!({"tiny": 5e-324, "pi": std::f64::consts::PI, "third": 1.0 / 3.0,
                         "big": 1e300, "max_int": u64::MAX, "min_int": i64::MIN, "neg_zero": -0.0});
    expect(
        app.put("/api/memories/numbers", &token)
            .json(&json!({"content": "x", "metadata": numbers})),
        201,
    )
    .await;
    let list = expect(app.get("/api/memories", &token), 200).await;
    let stored = &list["items"][0]["metadata"];
    for key in ["tiny", "pi", "third", "big", "max_int", "min_int"] {
        assert_eq!(stored[key], numbers[key], "{key} round-trips");
    }
    expect(app.get(&format!("/api/tasks/{id}/events"), &token), 200).await;
}

/// Dates the JSON parser takes but PostgreSQL cannot hold (before 4713 BC) are 422 wherever they
/// go, written or used as a filter, and nothing is stored.
#[sqlx::test]
async fn dates_outside_the_database_range_are_422(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token).await;
    let ancient = "-9999-01-01T00:00:00Z";
    let writes = [
        (
            format!("/api/tasks/{id}/events"),
            json!({"events": [{"timestamp": ancient, "step_narrative": "x", "status": "COMPLETED"}]}),
        ),
        (
            format!("/api/tasks/{id}/snapshots"),
            json!({"label": "a", "content": "b", "timestamp": ancient}),
        ),
        (
            "/api/chat/session/archive_messages".to_owned(),
            json!({"session_id": "s1", "messages_batch": [
                {"id": "m1", "text": "hi", "sender": "user", "timestamp": ancient}]}),
        ),
        (
            "/api/memories/search".to_owned(),
            json!({"query": "hi", "filters": {"created_after": ancient}}),
        ),
        (
            "/api/chat/search".to_owned(),
            json!({"query": "hi", "after": ancient}),
        ),
        (
            "/api/recall".to_owned(),
            json!({"query": "hi", "filters": {"before": ancient}}),
        ),
    ];
    for (path, body) in writes {
        let problem = expect_problem(app.post(&path, &token).json(&body), 422).await;
        assert!(
            problem["detail"].as_str().unwrap().contains("4713 BC"),
            "{path}: {problem}"
        );
    }
    // A search answers the same whether or not it finds something to search: the first
    // instant PostgreSQL holds is taken, the one before it is 422 naming the filter, for a
    // user with memories and one without.
    let first = "-4713-11-24T00:00:00Z";
    let before_first = "-4713-11-23T23:59:59.999999Z";
    // The bounds are PostgreSQL's own.
    for (at, holds) in [(first, true), (before_first, false)] {
        let at: chrono::DateTime<chrono::Utc> = serde_json::from_value(json!(at)).unwrap();
        let bound = sqlx::query("SELECT $1::timestamptz")
            .bind(at)
            .execute(&app.pool)
            .await;
        assert_eq!(bound.is_ok(), holds, "{at}: {bound:?}");
    }
    let bob = app.token("t1", "bob");
    expect(
        app.post("/api/memories", &bob)
            .json(&json!({"content": "hi there", "description": "greeting"})),
        201,
    )
    .await;
    for who in [&token, &bob] {
        for field in ["created_after", "created_before"] {
            expect(
                app.post("/api/memories/search", who)
                    .json(&json!({"query": "hi", "filters": {field: first}})),
                200,
            )
            .await;
            let problem = expect_problem(
                app.post("/api/memories/search", who)
                    .json(&json!({"query": "hi", "filters": {field: before_first}})),
                422,
            )
            .await;
            assert!(
                problem["detail"].as_str().unwrap().contains("4713 BC"),
                "{problem}"
            );
        }
        let problem = expect_problem(
            app.post("/api/recall", who)
                .json(&json!({"query": "hi", "filters": {"after": before_first}})),
            422,
        )
        .await;
        assert_eq!(problem["field"], "filters.after", "{problem}");
    }
    let events = expect(app.get(&format!("/api/tasks/{id}/events"), &token), 200).await;
    assert_eq!(events["items"], json!([]), "{events}");
    let sessions = expect(app.get("/api/chat/sessions", &token), 200).await;
    assert_eq!(sessions["items"], json!([]), "{sessions}");
    // The far end of the range is stored and read back as sent.
    let far = "+262142-01-01T00:00:00Z";
    expect(
        app.post(&format!("/api/tasks/{id}/events"), &token).json(
            &json!({"events": [{"timestamp": far, "step_narrative": "x", "status": "COMPLETED"}]}),
        ),
        201,
    )
    .await;
    let events = expect(app.get(&format!("/api/tasks/{id}/events"), &token), 200).await;
    assert_eq!(events["items"][0]["timestamp"], far, "{events}");
}

/// A struct is a JSON object: an array in its place (which serde would read as the fields in
/// order) is 422, at the top of the body or inside it, and nothing is stored.
#[sqlx::test]
async fn arrays_in_place_of_objects_are_422(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    for (path, body, field) in [
        ("/api/chat/context", json!([null, null]), ""),
        ("/api/chat/session/archive_messages", json!(["s1", []]), ""),
        (
            "/api/memories/search",
            json!({"query": "x", "filters": [true]}),
            "filters",
        ),
        (
            "/api/recall",
            json!({"query": "x", "filters": []}),
            "filters",
        ),
        (
            "/api/chat/session/archive_messages",
            json!({"session_id": "s1", "messages_batch": [["m1", "hi", "user"]]}),
            "messages_batch[0]",
        ),
    ] {
        let problem = expect_problem(app.post(path, &token).json(&body), 422).await;
        assert_eq!(problem["field"], field, "{path}: {problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("a JSON object"),
            "{path}: {problem}"
        );
    }
    let sessions = expect(app.get("/api/chat/sessions", &token), 200).await;
    assert_eq!(sessions["items"], json!([]), "{sessions}");
}

#[sqlx::test]
async fn dot_keys_are_refused(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    for key in [".", ".."] {
        let problem = expect_problem(
            app.post("/api/memories", &token)
                .json(&json!({"content": "x", "key": key})),
            422,
        )
        .await;
        assert_eq!(problem["field"], "key", "{key}");
    }
}

/// A client-chosen request id is echoed when reasonable, replaced when not.
#[sqlx::test]
async fn request_ids_are_bounded(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let echoed = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "abc-123");
    let long = "x".repeat(10_000);
    let replaced = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", &long)
        .send()
        .await
        .unwrap();
    let id = replaced.headers()["x-request-id"].to_str().unwrap();
    assert!(id.len() <= 128 && id != long, "{} bytes", id.len());
}

/// Without a client's id, each request gets a random UUID of its own, also when the requests
/// run at once on every worker thread (the generator is per thread).
#[sqlx::test]
async fn generated_request_ids_are_random_and_distinct(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let requests = (0..64).map(|_| app.client.get(app.url("/healthz")).send());
    let mut ids = std::collections::HashSet::new();
    for response in futures::future::join_all(requests).await {
        let response = response.unwrap();
        let id = response.headers()["x-request-id"].to_str().unwrap();
        let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|_| panic!("not a UUID: {id}"));
        assert_eq!(uuid.get_version_num(), 4, "{id}");
        assert!(ids.insert(uuid), "{id} given twice");
    }
    assert_eq!(ids.len(), 64);
}

/// Artifacts keep the uploader's type but browsers neither sniff nor render active content.
#[sqlx::test]
async fn artifacts_are_never_rendered_as_pages(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let id = task(&app, &token).await;
    for (mime, attachment) in [
        ("text/html", true),
        ("image/svg+xml", true),
        ("text/plain", false),
    ] {
        let artifact = expect(
            app.post(&format!("/api/tasks/{id}/artifacts"), &token)
                .header("content-type", mime)
                .body("<script>alert(1)</script>"),
            201,
        )
        .await;
        let aid = artifact["artifact_id"].as_str().unwrap();
        let response = app
            .get(&format!("/api/tasks/{id}/artifacts/{aid}"), &token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let headers = response.headers();
        assert_eq!(headers["x-content-type-options"], "nosniff", "{mime}");
        assert_eq!(
            headers
                .get("content-disposition")
                .is_some_and(|v| v == "attachment"),
            attachment,
            "{mime}"
        );
    }
}

/// With the database unreachable a request is a 503 with `Retry-After`, promptly.
#[sqlx::test]
async fn an_unreachable_database_is_503_with_retry_after(pool: PgPool) {
    // The real schema is migrated on `pool`; the app gets a pool to a port where nothing listens.
    drop(pool);
    let dead = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy("postgres://postgres@127.0.0.1:9/mnemo")
        .unwrap();
    let app = TestApp::new(dead).await;
    let token = app.token("t1", "alice");
    let started = Instant::now();
    let response = app.get("/api/memories/k", &token).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], 503);
    assert!(started.elapsed() < Duration::from_secs(10));
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
}

/// A request that PostgreSQL aborts to break a deadlock is 503 with `Retry-After` (the request
/// was not wrong, and the same one again succeeds), and stores nothing.
#[sqlx::test]
async fn a_request_that_loses_a_deadlock_is_503_and_stores_nothing(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    expect(
        app.put("/api/memories/k", &token)
            .json(&json!({"content": "version one"})),
        201,
    )
    .await;
    // Another transaction holds the memory's chunks. Replacing the content locks the memory's
    // row, then waits for the chunks; that transaction then asks for the row: a deadlock, which
    // PostgreSQL breaks by aborting the request's transaction (it has waited longest).
    let mut other = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM agent_memory_chunks WHERE user_id = 'alice' FOR UPDATE")
        .execute(&mut *other)
        .await
        .unwrap();
    let request = app
        .put("/api/memories/k", &token)
        .json(&json!({"content": "version two"}))
        .send();
    let replace = tokio::spawn(request);
    one_waits_on_a_lock(&pool).await;
    sqlx::query("SELECT 1 FROM agent_memories WHERE user_id = 'alice' FOR UPDATE")
        .execute(&mut *other)
        .await
        .unwrap();
    let response = replace.await.unwrap().unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = response.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("retry"), "{body}");
    other.rollback().await.unwrap();
    let stored = expect(app.get("/api/memories/k", &token), 200).await;
    assert_eq!(stored["content"], "version one");
    // The same request again succeeds.
    let again = expect(
        app.put("/api/memories/k", &token)
            .json(&json!({"content": "version two"})),
        200,
    )
    .await;
    assert_eq!(again["status"], "replaced");
}

/// A tenant with its cap of requests in flight gets 429 for more, at once, while another tenant
/// is served as usual.
#[sqlx::test]
async fn one_tenant_cannot_starve_another(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.fair_use.tenant_max_concurrent = Some(2);
        c.fair_use.tenant_queue_ms = 0;
    })
    .await;
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let router = axum::Router::new().route(
        "/api/slow",
        axum::routing::get(move || {
            let mut release = release_rx.clone();
            async move {
                let _ = release.wait_for(|go| *go).await;
                "done"
            }
        }),
    );
    let layered = mnemo::http::layered(router, app.state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(mnemo::serve_router(listener, layered, async {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }));
    let flooder = app.token("flood", "a");
    let mut held = Vec::new();
    for _ in 0..2 {
        let client = app.client.clone();
        let (url, token) = (format!("{base}/api/slow"), flooder.clone());
        held.push(tokio::spawn(async move {
            client.get(url).bearer_auth(token).send().await
        }));
    }
    // Wait until both are in flight.
    let mut refused = None;
    for _ in 0..100 {
        let response = app
            .client
            .get(format!("{base}/api/slow"))
            .bearer_auth(&flooder)
            .send()
            .await
            .unwrap();
        if response.status() == 429 {
            refused = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = refused.expect("the third request of the tenant is refused");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["max_concurrent"], 2);
    // Another tenant is served while the flooder holds its slots.
    let other = app.token("quiet", "b");
    let me = app
        .client
        .get(format!("{base}/api/me"))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(
        me.status(),
        404,
        "the test router has no /api/me, but auth and caps passed"
    );
    release_tx.send(true).unwrap();
    for request in held {
        assert_eq!(request.await.unwrap().unwrap().status(), 200);
    }
    // Slots come back.
    let again = app
        .client
        .get(format!("{base}/api/slow"))
        .bearer_auth(&flooder)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    server.abort();
}

/// Token buckets per user answer 429 with `Retry-After` and the RateLimit headers.
#[sqlx::test]
async fn rate_limits_answer_429_with_headers(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.fair_use.user_per_sec = Some(1);
        c.fair_use.user_burst = Some(2);
    })
    .await;
    let alice = app.token("t1", "alice");
    for _ in 0..2 {
        let ok = app.get("/api/me", &alice).send().await.unwrap();
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["ratelimit-policy"], "\"user\";q=1;w=1");
        assert!(
            ok.headers()["ratelimit"]
                .to_str()
                .unwrap()
                .starts_with("\"user\";r=")
        );
    }
    let limited = app.get("/api/me", &alice).send().await.unwrap();
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    assert_eq!(limited.headers()["ratelimit-policy"], "\"user\";q=1;w=1");
    assert_eq!(limited.headers()["ratelimit"], "\"user\";r=0;t=1");
    assert_eq!(
        limited.headers()["content-type"],
        "application/problem+json"
    );
    // Bob has his own bucket.
    let bob = app.token("t1", "bob");
    assert_eq!(app.get("/api/me", &bob).send().await.unwrap().status(), 200);
}

/// A statement running past `MNEMO_DB_STATEMENT_TIMEOUT_SECS` is cancelled by PostgreSQL and
/// answered as a 503, not left holding its connection.
#[sqlx::test]
async fn long_statements_are_cancelled(pool: PgPool) {
    let options = pool.connect_options();
    let url = format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    );
    let bounded = mnemo::db::connect(&url, 1, Some(Duration::from_millis(200)))
        .await
        .unwrap();
    let principal = mnemo::auth::Principal {
        tenant_id: "acme".into(),
        user_id: "alice".into(),
        scopes: Vec::new(),
    };
    let mut tx = bounded.scoped(&principal).await.unwrap();
    let started = Instant::now();
    let err = sqlx::query("SELECT pg_sleep(5)")
        .execute(&mut tx)
        .await
        .unwrap_err();
    drop(tx);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(mnemo::error::is_unavailable(&err), "{err}");
    let api = mnemo::error::ApiError::from(err);
    assert_eq!(api.status_code(), 503);
    // The connection is fine afterwards.
    let mut tx = bounded.scoped(&principal).await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut tx)
        .await
        .unwrap();
    assert_eq!(one, 1);
}

/// A client trickling its request head is disconnected after the header-read timeout, and one
/// address cannot hold more than its share of connections; the server keeps answering others.
#[sqlx::test]
async fn slow_and_greedy_connections_are_cut_off(pool: PgPool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::new(pool).await;
    let router = mnemo::app(app.state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = mnemo::ConnectionLimits {
        max_connections: 100,
        max_connections_per_ip: 3,
        header_read_timeout: Duration::from_millis(500),
    };
    let server = tokio::spawn(mnemo::serve_router_with(listener, router, limits, async {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }));

    // A head sent one line at a time, too slowly: cut off.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let _ = slow.write_all(b"X-Slow: 1\r\n").await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {
                    // hyper may answer 408 before closing; the connection ends either way.
                }
            }
        }
    })
    .await;
    assert!(
        closed.unwrap_or(false),
        "the trickling connection was closed"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // Three idle connections from this address take its share; a fourth is closed at once.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fourth = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let read = tokio::time::timeout(Duration::from_secs(2), fourth.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the fourth connection is closed unanswered: {read:?}"
    );
    // Once they go, the address is served again.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.abort();
}

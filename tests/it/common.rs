//! The shared `TestApp`: the real application served on 127.0.0.1:0 over a per-test database.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mnemo::AppState;
use mnemo::config::Config;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::oneshot;

pub const SECRET: &str = "test-secret-that-is-long-enough-for-hs256!";

pub struct TestApp {
    pub url: String,
    pub client: reqwest::Client,
    pub pool: PgPool,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestApp {
    /// The app with HS256 tokens signed by [`SECRET`].
    pub async fn new(pool: PgPool) -> TestApp {
        Self::with_config(pool, |_| {}).await
    }

    /// The app with a configuration adjusted by `adjust`.
    pub async fn with_config(pool: PgPool, adjust: impl FnOnce(&mut Config)) -> TestApp {
        Self::with_state(pool, adjust, |_| {}).await
    }

    /// The app with semantic search through `embedder`.
    pub async fn with_embedder(pool: PgPool, embedder: mnemo::embed::Embedder) -> TestApp {
        Self::with_state(
            pool,
            |_| {},
            move |state| state.set_embedder(Some(embedder)),
        )
        .await
    }

    /// The app with its configuration and then its state adjusted.
    pub async fn with_state(
        pool: PgPool,
        adjust: impl FnOnce(&mut Config),
        adjust_state: impl FnOnce(&mut AppState),
    ) -> TestApp {
        let mut config = Config::for_secret(None, SECRET);
        adjust(&mut config);
        config.validate().expect("test config is valid");
        let mut state = AppState::new(config, mnemo::db::Db::new(pool.clone()))
            .await
            .expect("state");
        adjust_state(&mut state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(mnemo::serve(listener, state.clone(), async {
            let _ = stopped.await;
        }));
        TestApp {
            url,
            client: reqwest::Client::new(),
            pool,
            state,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Asks the server to shut down gracefully and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("server task").expect("server result");
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// A read+write token for `user` in `tenant`.
    pub fn token(&self, tenant: &str, user: &str) -> String {
        hs256(&json!({"sub": user, "tenant_id": tenant, "exp": now() + 3600}))
    }

    pub fn get(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(token)
    }

    pub fn post(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.post(self.url(path)).bearer_auth(token)
    }

    pub fn put(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.put(self.url(path)).bearer_auth(token)
    }

    pub fn patch(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.patch(self.url(path)).bearer_auth(token)
    }

    pub fn delete(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client.delete(self.url(path)).bearer_auth(token)
    }
}

pub fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs(),
    )
    .expect("time fits")
}

/// Signs `claims` with HS256 and [`SECRET`].
pub fn hs256(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        claims,
    )
}

pub fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).expect("sign")
}

/// Sends `request`, asserts the status, and returns the JSON body (Null when empty).
pub async fn expect(request: reqwest::RequestBuilder, status: u16) -> Value {
    let response = request.send().await.expect("request sent");
    let got = response.status().as_u16();
    let text = response.text().await.expect("body");
    assert_eq!(got, status, "unexpected status; body: {text}");
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// Asserts that `response` is RFC 9457 problem+json with `status`, and returns the body.
pub async fn expect_problem(request: reqwest::RequestBuilder, status: u16) -> Value {
    let response = request.send().await.expect("request sent");
    assert_eq!(response.status().as_u16(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let request_id = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = response.json().await.expect("problem body is JSON");
    assert_eq!(
        content_type, "application/problem+json",
        "content type; body {body}"
    );
    assert_eq!(body["status"], status, "status member; body {body}");
    for member in ["type", "title", "detail", "instance", "request_id"] {
        assert!(body[member].is_string(), "problem lacks `{member}`: {body}");
    }
    assert_eq!(
        body["request_id"].as_str(),
        request_id.as_deref(),
        "request id echoed"
    );
    body
}

/// The `message_id` of each hit of a chat search answer, in order.
pub fn message_ids(found: &Value) -> Vec<String> {
    found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["message_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until one statement of the database waits on a lock, and fails unless exactly one does.
pub async fn one_waits_on_a_lock(pool: &PgPool) {
    let waiting = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    for _ in 0..200 {
        if waiting().await > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(waiting().await, 1);
}

/// A pool of one connection to the test's database: every request of an app on it runs on that
/// connection, so the plans its statements keep are the ones every later request uses, and
/// `pg_prepared_statements` read through it lists the app's statements.
pub async fn one_connection(pool: &PgPool) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap()
}

/// The rows of `table` read through its indexes so far (`idx_tup_fetch`), as the statistics hold
/// them once the app's one connection `one` has flushed its own.
pub async fn rows_fetched_through_indexes(one: &PgPool, pool: &PgPool, table: &str) -> i64 {
    flushed_statistic(
        one,
        pool,
        "SELECT idx_tup_fetch FROM pg_stat_user_tables WHERE relname = $1",
        table,
    )
    .await
}

/// The rows of `table` read so far, by sequential scans and through its indexes
/// (`seq_tup_read` and `idx_tup_fetch`), as the statistics hold them once the app's one
/// connection `one` has flushed its own.
pub async fn rows_read(one: &PgPool, pool: &PgPool, table: &str) -> i64 {
    flushed_statistic(
        one,
        pool,
        "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
         WHERE relname = $1",
        table,
    )
    .await
}

/// The blocks of the indexes of `table` read so far (`idx_blks_hit` + `idx_blks_read`), as the
/// statistics hold them once the app's one connection `one` has flushed its own.
pub async fn index_blocks_read(one: &PgPool, pool: &PgPool, table: &str) -> i64 {
    flushed_statistic(
        one,
        pool,
        "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_tables WHERE relname = $1",
        table,
    )
    .await
}

/// The statistic `statement` reads for `table`, once the app's one connection `one` has flushed
/// its own.
async fn flushed_statistic(one: &PgPool, pool: &PgPool, statement: &str, table: &str) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(one)
        .await
        .unwrap();
    sqlx::query_scalar::<_, i64>(statement)
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `count` one-chunk memories of `user` (tenant acme), `m-0` to `m-<count - 1>`, a second apart
/// and with ids in that order, holding `content` (an SQL expression of `i`, written by the test
/// itself) and summarised as "run <i>"; loaded directly, as the superuser.
pub async fn load_memories(pool: &PgPool, user: &str, count: i64, content: &str) {
    let mut conn = pool.acquire().await.unwrap();
    // Test-only: `content` is an SQL expression written by the test itself.
    sqlx::query(&format!(
        "CREATE TEMP TABLE loaded AS
         SELECT i, ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid AS id,
                {content} AS content
         FROM generate_series(0, $1 - 1) i"
    ))
    .bind(count)
    .execute(&mut *conn)
    .await
    .unwrap();
    for statement in [
        "INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type, summary,
                                     size_bytes, line_count, token_count, content_sha256,
                                     chunk_count, created_at)
         SELECT 'acme', $1, id, 'm-' || i, 'text', 'run ' || i, octet_length(content), 1, 6,
                md5(content), 1, timestamptz '2026-01-01' + i * interval '1 second'
         FROM loaded",
        "INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
                                          line_start, line_end, content)
         SELECT 'acme', $1, id, 0, octet_length(content), 1, 1, content FROM loaded",
        "DROP TABLE loaded",
    ] {
        sqlx::query(statement)
            .bind(user)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

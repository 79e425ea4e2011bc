//! Auth, tenancy, problem+json, health, metrics and shutdown, over HTTP.

use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use mnemo::auth::Principal;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{SECRET, TestApp, expect, expect_problem, hs256, now, sign};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn principal(tenant: &str, user: &str) -> Principal {
    Principal {
        tenant_id: tenant.into(),
        user_id: user.into(),
        scopes: vec![],
    }
}

#[sqlx::test]
async fn me_reads_identity_back_from_the_scoped_session(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = hs256(
        &json!({"sub": "alice", "tenant_id": "acme", "exp": now() + 60, "scope": "memory:read"}),
    );
    let body = expect(app.get("/api/me", &token), 200).await;
    assert_eq!(
        body,
        json!({"tenant_id": "acme", "user_id": "alice", "scopes": ["memory:read"]})
    );
    let token = app.token("acme", "o'brien\\x");
    let body = expect(app.get("/api/me", &token), 200).await;
    assert_eq!(
        body["user_id"], "o'brien\\x",
        "quotes and backslashes survive the literal"
    );
    assert_eq!(body["scopes"], json!(["memory:read", "memory:write"]));
}

/// Each case: (name, Authorization header or None, expected words in `detail`).
#[sqlx::test]
async fn every_bad_token_is_401_with_its_own_reason(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.jwt_issuer = Some("https://issuer.example".into());
        c.jwt_audience = Some("mnemo".into());
    })
    .await;
    let good = json!({"sub": "u", "tenant_id": "t", "exp": now() + 600,
                      "iss": "https://issuer.example", "aud": "mnemo"});
    let with = |key: &str, value: Value| {
        let mut claims = good.clone();
        claims[key] = value;
        claims
    };
    let without = |key: &str| {
        let mut claims = good.clone();
        claims.as_object_mut().expect("object").remove(key);
        claims
    };
    let forged = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(b"another-secret-another-secret-another"),
        &good,
    );
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(good.to_string());
    let unsigned = format!("{header}.{payload}.");

    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no header", None, "missing `Authorization"),
        (
            "malformed header",
            Some("Token abc".into()),
            "malformed `Authorization` header",
        ),
        (
            "garbage token",
            Some("Bearer not-a-jwt".into()),
            "not a JWT",
        ),
        (
            "garbage parts",
            Some("Bearer a.b.c".into()),
            "header is not valid base64url",
        ),
        (
            "bad signature",
            Some(format!("Bearer {forged}")),
            "signature does not verify",
        ),
        (
            "expired",
            Some(format!(
                "Bearer {}",
                hs256(&with("exp", json!(now() - 3600)))
            )),
            "expired",
        ),
        (
            "nbf in future",
            Some(format!(
                "Bearer {}",
                hs256(&with("nbf", json!(now() + 3600)))
            )),
            "not valid yet",
        ),
        ("alg none", Some(format!("Bearer {unsigned}")), "alg: none"),
        (
            "wrong aud",
            Some(format!("Bearer {}", hs256(&with("aud", json!("other"))))),
            "audience",
        ),
        (
            "wrong iss",
            Some(format!(
                "Bearer {}",
                hs256(&with("iss", json!("https://evil.example")))
            )),
            "issuer",
        ),
        (
            "missing sub",
            Some(format!("Bearer {}", hs256(&without("sub")))),
            "no `sub` claim",
        ),
        (
            "empty tenant",
            Some(format!("Bearer {}", hs256(&with("tenant_id", json!(""))))),
            "`tenant_id` claim is empty",
        ),
        (
            "tenant with trailing space",
            Some(format!("Bearer {}", hs256(&with("tenant_id", json!("t "))))),
            "`tenant_id` claim starts or ends with whitespace",
        ),
        (
            "sub with a leading no-break space",
            Some(format!("Bearer {}", hs256(&with("sub", json!("\u{a0}u"))))),
            "`sub` claim starts or ends with whitespace",
        ),
        (
            "numeric tenant",
            Some(format!("Bearer {}", hs256(&with("tenant_id", json!(123))))),
            "`tenant_id` claim is not a string",
        ),
        (
            "only unknown scopes",
            Some(format!(
                "Bearer {}",
                hs256(&with("scope", json!("memory.read read")))
            )),
            "none of `memory:read`",
        ),
        (
            "crit header",
            Some(format!("Bearer {}", with_crit_header(&good))),
            "`crit`",
        ),
        (
            "missing tenant",
            Some(format!("Bearer {}", hs256(&without("tenant_id")))),
            "no `tenant_id` claim",
        ),
        (
            "missing exp",
            Some(format!("Bearer {}", hs256(&without("exp")))),
            "`exp`",
        ),
    ];
    let mut details = std::collections::HashSet::new();
    for (name, header, expected) in cases {
        let mut request = app.client.get(app.url("/api/me"));
        if let Some(header) = &header {
            request = request.header("authorization", header);
        }
        let response = request.send().await.expect("sent");
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(response.status(), 401, "{name}");
        assert!(
            challenge.starts_with("Bearer"),
            "{name}: WWW-Authenticate is `{challenge}`"
        );
        let body: Value = response.json().await.expect("json");
        let detail = body["detail"].as_str().unwrap_or_default().to_owned();
        assert!(
            detail.contains(expected),
            "{name}: detail `{detail}` lacks `{expected}`"
        );
        assert!(
            details.insert(detail.clone()),
            "{name}: detail `{detail}` is not distinct"
        );
    }
    // The good token passes, so the failures above are the claims' fault, not the setup's.
    expect(app.get("/api/me", &hs256(&good)), 200).await;
}

/// An HS256 token over `claims` whose protected header names a critical extension.
fn with_crit_header(claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(Algorithm::HS256);
    header.crit = Some(vec!["exp".into()]);
    jsonwebtoken::encode(
        &header,
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign")
}

/// Claims are compared byte for byte: a tenant or user that differs from another only by
/// whitespace, case or type never reaches the other's data.
#[sqlx::test]
async fn identities_never_merge(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("acme", "alice");
    expect(
        app.put("/api/memories/secret", &alice)
            .json(&json!({"content": "alice's secret"})),
        201,
    )
    .await;
    let lookalikes = [
        json!({"sub": "alice", "tenant_id": "acme ", "exp": now() + 60}),
        json!({"sub": "alice", "tenant_id": " acme", "exp": now() + 60}),
        json!({"sub": "alice", "tenant_id": "acme\u{a0}", "exp": now() + 60}),
        json!({"sub": "alice", "tenant_id": "acme\u{3000}", "exp": now() + 60}),
        json!({"sub": "alice\t", "tenant_id": "acme", "exp": now() + 60}),
        json!({"sub": "alice\n", "tenant_id": "acme", "exp": now() + 60}),
    ];
    for claims in &lookalikes {
        let problem = expect_problem(app.get("/api/memories/secret", &hs256(claims)), 401).await;
        assert!(problem["detail"].as_str().is_some(), "{claims}");
        expect_problem(
            app.put("/api/memories/secret", &hs256(claims))
                .json(&json!({"content": "overwritten"})),
            401,
        )
        .await;
    }
    // Numbers are not strings: tenant 123 is not tenant "123".
    let numeric = hs256(&json!({"sub": "alice", "tenant_id": 123, "exp": now() + 60}));
    expect_problem(app.get("/api/me", &numeric), 401).await;
    // Case and inner characters make other identities, which see nothing of alice's.
    for (tenant, user) in [("ACME", "alice"), ("acme", "Alice"), ("ac me", "alice")] {
        let other = app.token(tenant, user);
        expect_problem(app.get("/api/memories/secret", &other), 404).await;
        let me = expect(app.get("/api/me", &other), 200).await;
        assert_eq!(me["tenant_id"], tenant);
        assert_eq!(me["user_id"], user);
    }
    let body = expect(app.get("/api/memories/secret", &alice), 200).await;
    assert_eq!(body["content"], "alice's secret", "nothing overwrote it");
}

#[sqlx::test]
async fn rs256_key_refuses_hs_tokens_and_accepts_its_own(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.jwt_secret = None;
        c.jwt_public_key = Some(fixture("rs256-public.pem"));
    })
    .await;
    let claims = json!({"sub": "u", "tenant_id": "t", "exp": now() + 600});
    let body = expect_problem(app.get("/api/me", &hs256(&claims)), 401).await;
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("signed with HS256") && detail.contains("RS256"),
        "{detail}"
    );

    let pem = std::fs::read(fixture("rs256-private.pem")).expect("key");
    let key = EncodingKey::from_rsa_pem(&pem).expect("rsa key");
    let token = sign(Algorithm::RS256, &key, &claims);
    expect(app.get("/api/me", &token), 200).await;
}

/// A JWKS document holding the fixture EC public key under each of `kids`.
fn es256_jwks(kids: &[&str]) -> Value {
    let pem = std::fs::read_to_string(fixture("es256-public.pem")).expect("key");
    let der = base64::engine::general_purpose::STANDARD
        .decode(
            pem.lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>(),
        )
        .expect("der");
    let point = &der[der.len() - 65..];
    let keys: Vec<Value> = kids
        .iter()
        .map(|kid| {
            json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                   "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])})
        })
        .collect();
    json!({ "keys": keys })
}

/// An ES256 token signed with the fixture key under `kid`.
fn es256_token(kid: &str, claims: &Value) -> String {
    let key = EncodingKey::from_ec_pem(&std::fs::read(fixture("es256-private.pem")).expect("key"))
        .expect("ec key");
    let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &key).expect("sign")
}

#[sqlx::test]
async fn es256_via_jwks_file_and_default_tenant(pool: PgPool) {
    let jwks = es256_jwks(&["k1"]);
    let dir = std::env::temp_dir().join(format!("mnemo-jwks-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("jwks.json");
    std::fs::write(&path, jwks.to_string()).expect("write");

    let app = TestApp::with_config(pool, |c| {
        c.jwt_secret = None;
        c.jwt_jwks = Some(path.to_string_lossy().into_owned());
        c.default_tenant = Some("public".into());
    })
    .await;
    let claims = json!({"sub": "supabase-user", "exp": now() + 600, "role": "authenticated"});
    let body = expect(app.get("/api/me", &es256_token("k1", &claims)), 200).await;
    assert_eq!(
        body["tenant_id"], "public",
        "tokens without a tenant claim get the default"
    );

    let body = expect_problem(app.get("/api/me", &es256_token("unknown", &claims)), 401).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("kid `unknown`")
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A JWKS URL is fetched at start, cached, and fetched again when a token names an unknown `kid`
/// (key rotation); a kid that is still unknown after the refresh is 401.
#[sqlx::test]
async fn jwks_url_is_cached_and_refreshed_on_key_rotation(pool: PgPool) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let served = Arc::new(Mutex::new(es256_jwks(&["k1"])));
    let fetches = Arc::new(AtomicUsize::new(0));
    let router = {
        let (served, fetches) = (served.clone(), fetches.clone());
        axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                let (served, fetches) = (served.clone(), fetches.clone());
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    axum::Json(served.lock().expect("lock").clone())
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/.well-known/jwks.json",
        listener.local_addr().expect("addr")
    );
    tokio::spawn(async move { axum::serve(listener, router).await });

    let app = TestApp::with_config(pool, |c| {
        c.jwt_secret = None;
        c.jwt_jwks = Some(url.clone());
        c.jwt_jwks_min_refresh_secs = 0;
    })
    .await;
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "fetched once at start");
    let claims = json!({"sub": "u", "tenant_id": "t", "exp": now() + 600});
    expect(app.get("/api/me", &es256_token("k1", &claims)), 200).await;
    expect(app.get("/api/me", &es256_token("k1", &claims)), 200).await;
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "known kids are served from the cache"
    );

    // The issuer rotates in k2: the first k2 token makes mnemo fetch the set again.
    *served.lock().expect("lock") = es256_jwks(&["k1", "k2"]);
    expect(app.get("/api/me", &es256_token("k2", &claims)), 200).await;
    assert_eq!(fetches.load(Ordering::SeqCst), 2);

    let body = expect_problem(app.get("/api/me", &es256_token("k9", &claims)), 401).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("kid `k9`"),
        "{body}"
    );
}

/// The tenancy guarantee: a query with no tenant or user filter, run in a scoped transaction on a
/// pool that logs in as a superuser, sees only the caller's rows and cannot write another's.
#[sqlx::test]
async fn row_level_security_scopes_unfiltered_queries(pool: PgPool) {
    let is_super: bool =
        sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&pool)
            .await
            .expect("role");
    assert!(
        is_super,
        "this test proves RLS holds even for a superuser pool"
    );

    sqlx::raw_sql(
        "CREATE TABLE rls_probe (tenant_id text NOT NULL, user_id text NOT NULL, note text NOT NULL);
         SELECT mnemo_scope_table('rls_probe');
         INSERT INTO rls_probe VALUES ('t1','alice','a1'), ('t1','alice','a2'), ('t1','bob','b1'),
                                      ('t2','alice','other-tenant-alice');",
    )
    .execute(&pool)
    .await
    .expect("setup");

    let notes = |tenant: &'static str, user: &'static str| {
        let pool = pool.clone();
        async move {
            let mut tx = mnemo::db::Db::new(pool.clone())
                .scoped(&principal(tenant, user))
                .await
                .expect("begin");
            let rows: Vec<String> = sqlx::query_scalar("SELECT note FROM rls_probe ORDER BY note")
                .fetch_all(&mut tx)
                .await
                .expect("select");
            tx.commit().await.expect("commit");
            rows
        }
    };
    assert_eq!(notes("t1", "alice").await, vec!["a1", "a2"]);
    assert_eq!(notes("t1", "bob").await, vec!["b1"]);
    assert_eq!(notes("t2", "alice").await, vec!["other-tenant-alice"]);
    assert!(notes("t3", "alice").await.is_empty());

    // Writing a row for someone else is refused by the policy's WITH CHECK.
    let mut tx = mnemo::db::Db::new(pool.clone())
        .scoped(&principal("t1", "alice"))
        .await
        .expect("begin");
    let err = sqlx::query("INSERT INTO rls_probe VALUES ('t1', 'bob', 'forged')")
        .execute(&mut tx)
        .await
        .expect_err("insert for another user must fail");
    assert!(err.to_string().contains("row-level security"), "{err}");
    drop(tx);

    // Updates and deletes without a filter touch only the caller's rows.
    let mut tx = mnemo::db::Db::new(pool.clone())
        .scoped(&principal("t1", "bob"))
        .await
        .expect("begin");
    let deleted = sqlx::query("DELETE FROM rls_probe")
        .execute(&mut tx)
        .await
        .expect("delete");
    assert_eq!(deleted.rows_affected(), 1);
    tx.commit().await.expect("commit");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM rls_probe")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(left, 3);

    // The scoped session really runs as mnemo_app, not as the superuser.
    let mut tx = mnemo::db::Db::new(pool.clone())
        .scoped(&principal("t1", "alice"))
        .await
        .expect("begin");
    let role: String = sqlx::query_scalar("SELECT current_user::text")
        .fetch_one(&mut tx)
        .await
        .expect("role");
    assert_eq!(role, "mnemo_app");
}

/// Every table the migrations create is scoped: FORCE RLS and the isolation policy.
#[sqlx::test]
async fn every_table_forces_row_level_security(pool: PgPool) {
    let unscoped: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> '_sqlx_migrations'
           AND c.relispartition = false
           AND (NOT c.relrowsecurity OR NOT c.relforcerowsecurity
                OR NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid))",
    )
    .fetch_all(&pool)
    .await
    .expect("catalog");
    assert!(
        unscoped.is_empty(),
        "tables without forced row-level security: {unscoped:?}"
    );
}

/// The isolation policy is the only one that applies to every role; each other policy belongs to
/// the role of the work it serves. PostgreSQL combines the permissive policies that apply to a
/// role with OR, so one more for every role would turn each request's scope into a condition no
/// index can search (a lookup by key then reads every tenant's rows).
#[sqlx::test]
async fn only_the_isolation_policy_applies_to_every_role(pool: PgPool) {
    let for_everyone: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.polrelid::regclass::text, p.polname::text FROM pg_policy p
         WHERE p.polroles = '{0}' AND p.polname <> 'tenant_user_isolation' ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("catalog");
    assert_eq!(for_everyone, Vec::<(String, String)>::new());
    let isolation_is_everyones: bool = sqlx::query_scalar(
        "SELECT bool_and(p.polroles = '{0}') FROM pg_policy p
         WHERE p.polname = 'tenant_user_isolation'",
    )
    .fetch_one(&pool)
    .await
    .expect("catalog");
    assert!(isolation_is_everyones);
}

/// Every constraint the error table maps to a client problem exists under that name, so a rename
/// in a migration cannot silently turn a 409 or 404 back into a 500.
#[sqlx::test]
async fn every_mapped_constraint_exists(pool: PgPool) {
    let names: Vec<&str> = mnemo::error::mapped_constraints().collect();
    assert!(names.len() >= 10, "{names:?}");
    let missing: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM unnest($1::text[]) AS name
         WHERE NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = name)",
    )
    .bind(&names)
    .fetch_all(&pool)
    .await
    .expect("catalog");
    assert!(
        missing.is_empty(),
        "mapped constraints not in the schema: {missing:?}"
    );
    let step = mnemo::error::ApiError::from_constraint("task_steps_step_id_key").expect("mapped");
    assert_eq!(step.status_code(), 409);
    assert_eq!(step.field(), Some("step_id"));
    assert!(mnemo::error::ApiError::from_constraint("tasks_status_check").is_none());
}

/// The word-lookup functions that reach past row-level security to use the full-text indexes
/// find only the scoped user's rows, nothing without a scope, and only mnemo_app may call them;
/// no other function runs with its owner's rights.
#[sqlx::test]
async fn word_lookups_find_only_the_callers_rows(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let tokens = [
        app.token("t1", "alice"),
        app.token("t1", "bob"),
        app.token("t2", "alice"),
    ];
    for (i, token) in tokens.iter().enumerate() {
        // One more of each per identity, so that the counts tell them apart.
        for n in 0..=i {
            expect(
                app.put(&format!("/api/memories/zanzibar-{n}"), token)
                    .json(&json!({"content": "a trip to zanzibar", "description": "zanzibar"})),
                201,
            )
            .await;
            expect(
                app.post("/api/chat/session/archive_messages", token)
                    .json(&json!({
                        "session_id": "s1",
                        "messages_batch": [{"id": format!("m{n}"), "sender": "user",
                                            "text": "zanzibar again",
                                            "timestamp": "2026-03-01T10:00:00Z"}]
                    })),
                200,
            )
            .await;
            let task = expect(
                app.post("/api/tasks", token)
                    .json(&json!({"name": format!("trip {n}")})),
                201,
            )
            .await;
            let task = task["id"].as_str().unwrap();
            expect(
                app.post(&format!("/api/tasks/{task}/update"), token)
                    .json(&json!({"message": "booked zanzibar"})),
                200,
            )
            .await;
        }
    }
    let db = mnemo::db::Db::new(pool.clone());
    for (i, (tenant, user)) in [("t1", "alice"), ("t1", "bob"), ("t2", "alice")]
        .into_iter()
        .enumerate()
    {
        let mut tx = db.scoped(&principal(tenant, user)).await.expect("begin");
        let counts: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM mnemo_message_matches(ARRAY['zanzibar'], NULL)),
                    (SELECT count(*) FROM mnemo_chunk_matches(ARRAY['zanzibar'], NULL)),
                    (SELECT count(*) FROM mnemo_summary_matches(ARRAY['zanzibar'], NULL)),
                    (SELECT count(*) FROM mnemo_task_matches(ARRAY['zanzibar'], NULL))",
        )
        .fetch_one(&mut tx)
        .await
        .expect("lookups");
        let n = i as i64 + 1;
        assert_eq!(counts, (n, n, n, n), "{tenant}/{user}");
        // A limit holds, and a user of the same name in another tenant is someone else.
        let limited: (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM mnemo_message_matches(ARRAY['zanzibar'], 1)),
                    (SELECT count(*) FROM mnemo_task_matches(ARRAY['zanzibar'], 1))",
        )
        .fetch_one(&mut tx)
        .await
        .expect("limited");
        assert_eq!(limited, (1, 1));
    }

    // No scope: nothing, even for the superuser calling them directly.
    let unscoped: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM mnemo_message_matches(ARRAY['zanzibar'], NULL))
              + (SELECT count(*) FROM mnemo_task_matches(ARRAY['zanzibar'], NULL))",
    )
    .fetch_one(&pool)
    .await
    .expect("unscoped");
    assert_eq!(unscoped, 0);

    // Exactly these four run with their owner's rights, with a fixed search path, callable by
    // mnemo_app and by no other role of the service.
    let definers: Vec<(String, bool, bool, bool)> = sqlx::query_as(
        "SELECT p.proname::text,
                coalesce(array_to_string(p.proconfig, ',') LIKE 'search_path=%', false),
                has_function_privilege('mnemo_app', p.oid, 'EXECUTE'),
                has_function_privilege('mnemo_indexer', p.oid, 'EXECUTE')
                    OR has_function_privilege('mnemo_eraser', p.oid, 'EXECUTE')
                    OR has_function_privilege('mnemo_retention', p.oid, 'EXECUTE')
                    OR has_function_privilege('mnemo_sweeper', p.oid, 'EXECUTE')
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'public' AND p.prosecdef ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("catalog");
    assert_eq!(
        definers,
        vec![
            ("mnemo_chunk_matches".to_owned(), true, true, false),
            ("mnemo_message_matches".to_owned(), true, true, false),
            ("mnemo_summary_matches".to_owned(), true, true, false),
            ("mnemo_task_matches".to_owned(), true, true, false),
        ]
    );
}

/// The word keys and text-search vectors every write computes are the values of their first
/// definitions (the ones the rows and index entries of an older database were written with),
/// whatever the caller's search path, so that nothing stored has to be rebuilt.
#[sqlx::test]
async fn word_keys_and_text_vectors_keep_their_values(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "Ann Lee");
    let texts = [
        "npm ERR! code ELIFECYCLE in /var/log/app/payments.log",
        "C:\\Users\\ann\\build output: 3 tests failed, retrying",
        "Zürich, naïve café — 東京 and emoji 🚀 deployments",
        "!!! ??? ...",
        "the the the running runs ran",
    ];
    for (i, text) in texts.iter().enumerate() {
        expect(
            app.put(&format!("/api/memories/k{i}"), &token)
                .json(&json!({"content": text, "description": format!("about {text}")})),
            201,
        )
        .await;
        expect(
            app.post("/api/chat/session/archive_messages", &token)
                .json(&json!({
                    "session_id": "s1",
                    "messages_batch": [{"id": format!("m{i}"), "sender": "user", "text": text,
                                        "timestamp": "2026-03-01T10:00:00Z"}]
                })),
            200,
        )
        .await;
    }
    // The first definitions, written out: the slash mapping, the English vector and the keys
    // seeded by the tenant and user.
    let first_tsv = |column: &str| {
        format!("to_tsvector('english'::regconfig, translate({column}, '/\\', '  '))")
    };
    let first_keys = |tsv: &str| {
        format!(
            "ARRAY(SELECT hashtextextended(l, hashtextextended(tenant_id || E'\\n' || user_id, 0))
                   FROM unnest(tsvector_to_array({tsv})) AS l)"
        )
    };
    for search_path in ["public", "pg_catalog, pg_temp"] {
        let mut tx = pool.begin().await.expect("begin");
        sqlx::query(&format!("SET LOCAL search_path = {search_path}"))
            .execute(&mut *tx)
            .await
            .expect("search path");
        let sql = format!(
            "SELECT
               (SELECT count(*) FILTER (WHERE tsv = {m_tsv}
                                          AND public.mnemo_word_keys(tenant_id, user_id,
                                                  tsvector_to_array(tsv)) = {keys}
                                          AND cardinality({keys}) = length(tsv))
                FROM public.conversation_messages),
               (SELECT count(*) FILTER (WHERE tsv = {c_tsv}
                                          AND public.mnemo_word_keys(tenant_id, user_id,
                                                  tsvector_to_array(tsv)) = {keys})
                FROM public.agent_memory_chunks),
               (SELECT count(*) FILTER (WHERE summary_tsv = {s_tsv}
                                          AND public.mnemo_word_keys(tenant_id, user_id,
                                                  tsvector_to_array(summary_tsv)) = {s_keys})
                FROM public.agent_memories),
               (SELECT count(*) FILTER (WHERE public.mnemo_memory_query(t)
                                              = websearch_to_tsquery('english'::regconfig,
                                                    translate(t, '/\\', '  ')))
                FROM unnest($1::text[]) AS t),
               public.mnemo_word_keys('t', 'u', '{{}}') = '{{}}'::int8[]",
            m_tsv = first_tsv("text"),
            keys = first_keys("tsv"),
            c_tsv = first_tsv("content"),
            s_tsv = first_tsv("summary"),
            s_keys = first_keys("summary_tsv"),
        );
        let same: (i64, i64, i64, i64, bool) = sqlx::query_as(&sql)
            .bind(&texts[..])
            .fetch_one(&mut *tx)
            .await
            .expect("compare");
        let n = texts.len() as i64;
        assert_eq!(same, (n, n, n, n, true), "search_path {search_path}");
        tx.rollback().await.expect("rollback");
    }
    // The keys differ by user: the same words of another user are other keys.
    let differ: bool = sqlx::query_scalar(
        "SELECT mnemo_word_keys('t1', 'Ann Lee', ARRAY['deploy'])
                <> mnemo_word_keys('t1', 'Ann Le', ARRAY['deploy'])",
    )
    .fetch_one(&pool)
    .await
    .expect("differ");
    assert!(differ);
}

#[sqlx::test]
async fn problems_for_unknown_routes_methods_and_bodies(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t", "u");

    let body = expect_problem(app.get("/api/nope", &token), 404).await;
    assert_eq!(body["instance"], "/api/nope");
    let body = expect_problem(
        app.client.delete(app.url("/api/me")).bearer_auth(&token),
        405,
    )
    .await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("DELETE")
    );

    // The request id a client sends is echoed in the header and the problem body.
    let response = app
        .get("/api/nope", &token)
        .header("x-request-id", "req-12345")
        .send()
        .await
        .expect("sent");
    assert_eq!(response.headers()["x-request-id"], "req-12345");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["request_id"], "req-12345");
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Probe {
    name: String,
    items: Vec<ProbeItem>,
}
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct ProbeItem {
    count: u32,
}

/// The JSON extractor and the shared layers, mounted on a route of the test's own.
#[sqlx::test]
async fn problems_for_json_bodies_through_the_real_layers(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let router = axum::Router::new()
        .route(
            "/api/probe",
            post(|mnemo::extract::Json(probe): mnemo::extract::Json<Probe>| async move { probe.name }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(64))
        .layer(axum::Extension(mnemo::extract::RouteBodyLimit(64)));
    let layered = mnemo::http::layered(router, app.state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, layered).await });
    let client = reqwest::Client::new();
    let token = app.token("t", "u");
    let send = |body: &'static str| {
        client
            .post(format!("{base}/api/probe"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
    };

    let ok = send(r#"{"name":"x","items":[]}"#)
        .send()
        .await
        .expect("sent");
    assert_eq!(ok.status(), 200);
    let body = expect_problem(send(r#"{"name": "x", "items": ["#), 400).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("malformed JSON")
    );
    let body = expect_problem(
        send(r#"{"name":"x","items":[{"count":1},{"count":-1}]}"#),
        422,
    )
    .await;
    assert_eq!(body["field"], "items[1].count");
    let body = expect_problem(send(r#"{"items":[]}"#), 422).await;
    assert!(
        body["detail"].as_str().unwrap_or_default().contains("name"),
        "{body}"
    );
    let body = expect_problem(
        send(r#"{"name":"a very long name that goes well past the sixty-four byte limit","items":[]}"#),
        413,
    )
    .await;
    assert_eq!(body["limit_bytes"], 64);
    let body = expect_problem(
        client
            .post(format!("{base}/api/probe"))
            .bearer_auth(&token)
            .body("{}"),
        415,
    )
    .await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("application/json")
    );
}

#[sqlx::test]
async fn health_readiness_and_metrics_need_no_token(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(health.status(), 200);
    let ready = app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(ready.status(), 200);

    let token = app.token("t", "u");
    expect(app.get("/api/me", &token), 200).await;
    expect_problem(app.get("/api/nope", &token), 404).await;
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("text");
    assert!(
        text.contains(r#"mnemo_http_requests_total{route="/api/me",method="GET",status="200"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mnemo_http_request_duration_seconds_count{route="/api/me"} 1"#),
        "{text}"
    );
    let max = pool.options().get_max_connections();
    assert!(
        text.contains(&format!("mnemo_db_pool_max_connections {max}")),
        "{text}"
    );

    // Migrations missing: not ready.
    sqlx::query("UPDATE _sqlx_migrations SET success = false WHERE version = (SELECT max(version) FROM _sqlx_migrations)")
        .execute(&pool)
        .await
        .expect("update");
    expect_problem(app.client.get(app.url("/readyz")), 503).await;
}

#[sqlx::test]
async fn swagger_ui_and_spec_are_served_offline(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let spec: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(spec["openapi"], "3.1.0");
    assert!(spec["components"]["securitySchemes"]["bearer"].is_object());
    let page = app
        .client
        .get(app.url("/docs/"))
        .send()
        .await
        .expect("sent");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("swagger-ui"), "Swagger UI page: {html}");
    let bundle = app
        .client
        .get(app.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .expect("sent");
    assert_eq!(
        bundle.status(),
        200,
        "the UI's assets are vendored into the binary"
    );
}

#[sqlx::test]
async fn scopes_gate_and_cors_answers_preflight(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.cors_origins = vec!["https://app.example".into()]
    })
    .await;
    let response = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/api/me"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    // Conditional requests, idempotency keys and ranges may be sent cross-origin.
    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/api/memories/k"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .header(
            "access-control-request-headers",
            "authorization, if-none-match, idempotency-key, range",
        )
        .send()
        .await
        .expect("sent");
    assert_eq!(preflight.status(), 200);
    let allowed = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for header in ["if-none-match", "if-match", "idempotency-key", "range"] {
        assert!(allowed.contains(header), "{header} not in {allowed}");
    }
    // Paging, back-off and rate-limit headers are readable by the page.
    let token = app.token("t", "u");
    let answer = app
        .get("/api/me", &token)
        .header("origin", "https://app.example")
        .send()
        .await
        .expect("sent");
    let exposed = answer.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for header in [
        "x-memory-range",
        "x-memory-lines",
        "x-memory-next",
        "content-range",
        "retry-after",
        "ratelimit",
        "ratelimit-policy",
        "etag",
        "idempotent-replayed",
    ] {
        assert!(exposed.contains(header), "{header} not in {exposed}");
    }
    let read_only =
        hs256(&json!({"sub": "u", "tenant_id": "t", "exp": now() + 60, "scope": "memory:read"}));
    let principal = app.state.verifier.verify(&read_only).await.expect("valid");
    assert!(principal.require(mnemo::auth::Scope::Write).is_err());
    assert!(principal.require(mnemo::auth::Scope::Read).is_ok());
    let _ = SECRET;
}

/// Shutdown while a request is being handled: the request completes with its full response.
#[sqlx::test]
async fn graceful_shutdown_lets_requests_in_flight_finish(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (started_tx, started_rx) = tokio::sync::mpsc::channel::<()>(1);
    let router = axum::Router::new().route(
        "/api/slow",
        axum::routing::get(move || {
            let started = started_tx.clone();
            async move {
                let _ = started.send(()).await;
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                "finished"
            }
        }),
    );
    let layered = mnemo::http::layered(router, app.state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/api/slow", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mnemo::serve_router(listener, layered, async {
        let _ = stopped.await;
    }));
    let token = app.token("t", "u");
    let client = app.client.clone();
    let request = tokio::spawn(async move { client.get(url).bearer_auth(token).send().await });
    let mut started_rx = started_rx;
    started_rx.recv().await.expect("handler started");
    stop.send(()).expect("signal shutdown");
    let response = request
        .await
        .expect("join")
        .expect("in-flight request completed");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "finished");
    server.await.expect("join").expect("server stopped cleanly");
}

/// A pool of one connection to `pool`'s database, so that the next user of a connection is
/// known to get the same one.
async fn single_connection_pool(pool: &PgPool) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with((*pool.connect_options()).clone())
        .await
        .expect("pool")
}

/// A read-only scoped transaction ended without waiting leaves nothing behind on the connection:
/// the next user of the (single) pooled connection runs as the login role with no tenant set.
#[sqlx::test]
async fn ending_read_only_leaks_no_scope_to_the_next_user(pool: PgPool) {
    let single = single_connection_pool(&pool).await;
    let tx = mnemo::db::Db::new(single.clone())
        .scoped(&principal("t1", "alice"))
        .await
        .expect("begin");
    tx.end_read_only();
    let (tenant, role): (Option<String>, String) = sqlx::query_as(
        "SELECT nullif(current_setting('mnemo.tenant', true), ''), current_user::text",
    )
    .fetch_one(&single)
    .await
    .expect("next query");
    assert_eq!(
        tenant, None,
        "the tenant setting ended with the transaction"
    );
    assert_ne!(
        role, "mnemo_app",
        "the role switch ended with the transaction"
    );
}

/// A one-call read scopes itself inside its own statement: it finds only the caller's rows, and
/// the next user of the (single) pooled connection runs as the login role with no tenant set.
/// Anything but a call of a read function is refused before it reaches the connection.
#[sqlx::test]
async fn one_call_reads_see_only_the_caller_and_leak_no_scope(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    expect(
        app.post("/api/chat/session/archive_messages", &alice).json(&json!({
            "session_id": "s1",
            "messages_batch": [{"id": "m1", "sender": "user", "text": "hello", "timestamp": "2026-01-01T00:00:00Z"}]
        })),
        200,
    )
    .await;
    let single = single_connection_pool(&pool).await;
    let db = mnemo::db::Db::new(single.clone());
    let count_as = |user: &'static str| {
        let db = db.clone();
        async move {
            let who = principal("t1", user);
            db.read_call(&who, |tenant, user| {
                sqlx::query(
                    "SELECT message_id FROM mnemo_read_messages($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(None::<i32>)
                .bind("s1")
                .bind(None::<chrono::DateTime<chrono::Utc>>)
                .bind(None::<i64>)
                .bind(10i64)
                .bind(true)
                .bind(tenant)
                .bind(user)
                .map(|_| ())
            })
            .await
            .expect("read")
            .len()
        }
    };
    assert_eq!(count_as("alice").await, 1);
    assert_eq!(
        count_as("bob").await,
        0,
        "another user's session is not there"
    );
    // The one connection is parked for the next read; a transaction takes it back at once
    // instead of waiting for it, and finds no scope left on it.
    let usage = db.usage();
    assert_eq!(
        (usage.size, usage.idle),
        (1, 1),
        "parked, and reported idle"
    );
    let mut job = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        db.system(mnemo::db::Job::Schema),
    )
    .await
    .expect("a transaction does not wait on a parked connection")
    .expect("begin")
    .expect("the schema job takes no lock");
    let (tenant, user, role): (Option<String>, Option<String>, String) = sqlx::query_as(
        "SELECT nullif(current_setting('mnemo.tenant', true), ''),
                nullif(current_setting('mnemo.user', true), ''), current_user::text",
    )
    .fetch_one(&mut job)
    .await
    .expect("next query");
    assert_eq!(
        (tenant, user),
        (None, None),
        "the scope ended with the call"
    );
    assert_ne!(role, "mnemo_app", "the role switch ended with the call");
    job.rollback().await.expect("rollback");

    let refused = db
        .read_call(&principal("t1", "alice"), |_, _| {
            sqlx::query("SELECT message_id FROM conversation_messages").map(|_| ())
        })
        .await
        .expect_err("a bare statement is refused");
    assert!(refused.to_string().contains("mnemo_read_"), "{refused}");

    // Closing the pool (as the test harness and a shutdown do) does not wait forever on a parked
    // connection: the close hands it back.
    assert_eq!(count_as("alice").await, 1);
    tokio::time::timeout(std::time::Duration::from_secs(10), single.close())
        .await
        .expect("the pool closes with a connection parked");
}

/// A new memory is stored in one call (`POST /api/memories` without an Idempotency-Key): it
/// lands under the caller only, a taken key is still 409, the write is committed when the
/// answer comes, and the connection it ran on carries no scope afterwards. Only calls of write
/// functions pass `write_call`.
#[sqlx::test]
async fn one_call_writes_store_as_the_caller_only(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let (alice, bob) = (app.token("t1", "alice"), app.token("t1", "bob"));
    let stored = expect(
        app.post("/api/memories", &alice)
            .json(&json!({"key": "k1", "content": "alpha\nbeta\n", "description": "two lines"})),
        201,
    )
    .await;
    assert_eq!(stored["memory_key"], "k1");
    assert_eq!(stored["version"], 1);
    assert_eq!(stored["line_count"], 2);
    // Committed: another connection, as the superuser, sees the row and its chunk.
    let (memories, chunks): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM agent_memories WHERE tenant_id = 't1' AND user_id = 'alice'
                   AND memory_key = 'k1'),
                (SELECT count(*) FROM agent_memory_chunks WHERE tenant_id = 't1' AND user_id = 'alice')",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!((memories, chunks), (1, 1));
    let taken = expect(
        app.post("/api/memories", &alice)
            .json(&json!({"key": "k1", "content": "other"})),
        409,
    )
    .await;
    assert_eq!(taken["memory_key"], "k1");
    let page = expect(app.get("/api/memories/k1", &alice), 200).await;
    assert_eq!(page["content"], "alpha\nbeta\n", "the 409 changed nothing");
    expect(app.get("/api/memories/k1", &bob), 404).await;
    // Bob's key space is his own.
    expect(
        app.post("/api/memories", &bob)
            .json(&json!({"key": "k1", "content": "bob's"})),
        201,
    )
    .await;
    let generated = expect(
        app.post("/api/memories", &alice)
            .json(&json!({"content": "no key given"})),
        201,
    )
    .await;
    let key = generated["memory_key"].as_str().expect("a generated key");
    expect(app.get(&format!("/api/memories/{key}"), &alice), 200).await;
    expect(app.get(&format!("/api/memories/{key}"), &bob), 404).await;

    // On one connection: the write's scope is gone when the call ends.
    let single = single_connection_pool(&pool).await;
    let db = mnemo::db::Db::new(single.clone());
    let who = principal("t1", "carol");
    let chunk = "carol's note";
    let written = db
        .write_call(&who, |tenant, user| {
            sqlx::query(
                "SELECT version FROM mnemo_write_memory($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                     $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)",
            )
            .bind(uuid::Uuid::now_v7())
            .bind("c1")
            .bind(None::<String>)
            .bind(None::<String>)
            .bind("text")
            .bind("carol's note")
            .bind(json!({}))
            .bind(chunk.len() as i64)
            .bind(1i64)
            .bind(3i64)
            .bind("0".repeat(64))
            .bind(1i32)
            .bind(vec![0i64])
            .bind(vec![chunk.len() as i32])
            .bind(vec![1i64])
            .bind(vec![1i64])
            .bind(vec![chunk])
            .bind(false)
            .bind(false)
            .bind(false)
            .bind(tenant)
            .bind(user)
            .map(|_| ())
        })
        .await
        .expect("write");
    assert_eq!(written.len(), 1, "one memory row written");
    // The connection is parked; a transaction takes it back and finds no scope left on it.
    let mut job = db
        .system(mnemo::db::Job::Schema)
        .await
        .expect("begin")
        .expect("the schema job takes no lock");
    let (tenant, role): (Option<String>, String) = sqlx::query_as(
        "SELECT nullif(current_setting('mnemo.tenant', true), ''), current_user::text",
    )
    .fetch_one(&mut job)
    .await
    .expect("next query");
    assert_eq!(tenant, None, "the scope ended with the call");
    assert_ne!(role, "mnemo_app", "the role switch ended with the call");
    job.rollback().await.expect("rollback");
    let owner: String = sqlx::query_scalar(
        "SELECT user_id FROM agent_memories WHERE tenant_id = 't1' AND memory_key = 'c1'",
    )
    .fetch_one(&pool)
    .await
    .expect("committed");
    assert_eq!(owner, "carol");

    for sql in [
        "DELETE FROM agent_memories",
        "SELECT message_id FROM mnemo_read_messages($1, $2, $3, $4, $5, $6, $7, $8)",
    ] {
        let refused = db
            .write_call(&principal("t1", "alice"), |_, _| {
                sqlx::query(sql).map(|_| ())
            })
            .await
            .expect_err("only write functions");
        assert!(refused.to_string().contains("mnemo_write_"), "{refused}");
    }
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_memories")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(left, 4, "nothing refused reached the database");
    tokio::time::timeout(std::time::Duration::from_secs(10), single.close())
        .await
        .expect("the pool closes with a connection parked");
}

/// Every read and write function acts as the user it is given before it touches a table (the
/// first statement of its body), runs with its caller's rights, never its owner's, and runs its
/// statements with the generic plans `bench/explain` shows, planned once per connection rather
/// than for each call.
#[sqlx::test]
async fn read_functions_act_as_their_caller_first(pool: PgPool) {
    let functions: Vec<(String, String, bool, Vec<String>)> = sqlx::query_as(
        "SELECT p.proname::text, p.prosrc, p.prosecdef, coalesce(p.proconfig, '{}')
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'public'
           AND (p.proname LIKE 'mnemo\\_read\\_%' OR p.proname LIKE 'mnemo\\_write\\_%')
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("catalog");
    let names: Vec<&str> = functions.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "mnemo_read_me",
            "mnemo_read_memory",
            "mnemo_read_messages",
            "mnemo_read_notes",
            "mnemo_read_summary_due",
            "mnemo_write_archive",
            "mnemo_write_archives",
            "mnemo_write_memory",
            "mnemo_write_summary"
        ]
    );
    for (name, source, definer, config) in &functions {
        assert!(!definer, "{name} runs with its owner's rights");
        assert_eq!(
            config,
            &["plan_cache_mode=force_generic_plan"],
            "{name} leaves its plans to the plan cache"
        );
        let body = source
            .split_once("BEGIN")
            .map(|(_, body)| body.trim_start())
            .unwrap_or_default();
        assert!(
            body.starts_with("PERFORM mnemo_act_as(p_tenant, p_user);"),
            "{name} reads or writes before it acts as its caller"
        );
    }
}

/// An archive alone runs, in `mnemo_write_archive`, the very statement a grouped archive runs in
/// its transaction (and `bench-explain` explains).
#[sqlx::test]
async fn the_archive_function_runs_the_archive_statement(pool: PgPool) {
    let source: String =
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = 'mnemo_write_archive'")
            .fetch_one(&pool)
            .await
            .expect("source");
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let statement = words(mnemo::conversations::store::ARCHIVE_SQL);
    assert!(
        words(&source).contains(&format!(
            "PERFORM mnemo_act_as(p_tenant, p_user); {statement} INTO r;"
        )),
        "the function's archive differs from ARCHIVE_SQL"
    );
}

/// The page statements the conversation store documents and explains are the ones
/// `mnemo_read_messages` runs.
#[sqlx::test]
async fn the_message_page_function_runs_the_documented_statements(pool: PgPool) {
    use mnemo::conversations::model::Order;
    use mnemo::conversations::store::messages_sql;
    let source: String =
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = 'mnemo_read_messages'")
            .fetch_one(&pool)
            .await
            .expect("source");
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let source = words(&source);
    for order in [Order::Asc, Order::Desc] {
        for after_cursor in [false, true] {
            let statement = words(messages_sql(order, after_cursor));
            assert!(
                source.contains(&format!("RETURN QUERY {statement};")),
                "{order:?} page (after a cursor: {after_cursor}) differs from the function's"
            );
        }
    }
}

/// A request that outlives `MNEMO_REQUEST_TIMEOUT_SECS` is stopped and answered 408 problem+json.
#[sqlx::test]
async fn slow_requests_time_out_with_408(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.request_timeout_secs = 1).await;
    let router = axum::Router::new().route(
        "/api/stuck",
        axum::routing::get(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            "never"
        }),
    );
    let layered = mnemo::http::layered(router, app.state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/api/stuck", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, layered).await });
    let token = app.token("t", "u");
    let body = expect_problem(app.client.get(url).bearer_auth(&token), 408).await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("too long"),
        "{body}"
    );
}

/// A database that an earlier release migrated, while some migrations still carried other
/// comments, records those migrations' earlier checksums; `migrate` accepts it and records the
/// current ones. A checksum that is no earlier text of the migration is still refused.
#[sqlx::test]
async fn a_database_migrated_before_comments_were_reworded_still_migrates(pool: PgPool) {
    let recorded = |version: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, Vec<u8>>(
                "SELECT checksum FROM _sqlx_migrations WHERE version = $1",
            )
            .bind(version)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let current = |version: i64| {
        mnemo::db::MIGRATOR
            .iter()
            .find(|m| m.version == version)
            .unwrap()
            .checksum
            .to_vec()
    };
    assert!(!mnemo::db::REWORDED.is_empty());
    for &(version, earlier) in mnemo::db::REWORDED {
        sqlx::query("UPDATE _sqlx_migrations SET checksum = decode($2, 'hex') WHERE version = $1")
            .bind(version)
            .bind(earlier)
            .execute(&pool)
            .await
            .unwrap();
        assert_ne!(
            recorded(version).await,
            current(version),
            "migration {version}"
        );
    }
    let db = mnemo::db::Db::new(pool.clone());
    db.migrate()
        .await
        .expect("an earlier release's database migrates");
    for &(version, _) in mnemo::db::REWORDED {
        assert_eq!(
            recorded(version).await,
            current(version),
            "migration {version}"
        );
    }

    sqlx::query("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = 5")
        .execute(&pool)
        .await
        .unwrap();
    let refused = db
        .migrate()
        .await
        .expect_err("a changed migration is refused");
    assert!(
        matches!(refused, sqlx::migrate::MigrateError::VersionMismatch(5)),
        "{refused:?}"
    );
}

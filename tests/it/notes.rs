//! Long-term notes over HTTP.

use mnemo::auth::Principal;
use mnemo::notes::cache::Held;
use mnemo::notes::model::{NotesOperationRequest, Operation};
use mnemo::notes::store;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, hs256, now};

const NOTES: &str = "/api/agents/assistant/notes";
const OPS: &str = "/api/agents/assistant/notes/operations";

async fn op(app: &TestApp, token: &str, body: Value) -> Value {
    expect(app.post(OPS, token).json(&body), 200).await
}

async fn etag_of(response: reqwest::Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (status, etag, body)
}

#[sqlx::test]
async fn never_written_notes_read_as_empty_version_0(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let (status, etag, body) = etag_of(app.get(NOTES, &token).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(etag, "\"0\"");
    assert_eq!(body["notes"], "");
    assert_eq!(body["version"], 0);
    assert_eq!(body["size_bytes"], 0);
    assert!(body["updated_at"].is_null());

    let body = op(&app, &token, json!({})).await;
    assert_eq!(body["operation"], "read", "read is the default operation");
    assert_eq!(body["notes"], "");
    assert_eq!(body["version"], 0);
    assert_eq!(body["changed"], false);
    assert_eq!(body["outcome"], "no notes yet");

    let page = expect(app.get(&format!("{NOTES}/revisions"), &token), 200).await;
    assert_eq!(page, json!({"items": [], "next_cursor": null}));
}

#[sqlx::test]
async fn each_operation_through_the_tool_endpoint(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");

    let body = op(
        &app,
        &token,
        json!({"operation": "overwrite", "content": "# Notes\n\n## Preferences\n- tea\n\n## Work\nrust\n"}),
    )
    .await;
    assert_eq!(body["version"], 1);
    assert_eq!(body["changed"], true);
    assert_eq!(body["operation"], "overwrite");
    assert!(
        body["outcome"]
            .as_str()
            .unwrap()
            .starts_with("overwrote notes (was 0 B); notes now ")
    );

    let body = op(
        &app,
        &token,
        json!({"operation": "append", "content": "- footnote"}),
    )
    .await;
    assert_eq!(body["version"], 2);
    assert_eq!(
        body["notes"],
        "# Notes\n\n## Preferences\n- tea\n\n## Work\nrust\n- footnote\n"
    );
    assert_eq!(body["outcome"], "appended 10 chars; notes now 55 B");

    let body = op(
        &app,
        &token,
        json!({"operation": "prepend", "content": "<!-- curated -->"}),
    )
    .await;
    assert_eq!(body["version"], 3);
    assert!(
        body["notes"]
            .as_str()
            .unwrap()
            .starts_with("<!-- curated -->\n# Notes\n")
    );

    let body = op(
        &app,
        &token,
        json!({"operation": "replace_section_by_header", "section_header": "preferences",
               "content": "- tea, no sugar\n- answers in French\n"}),
    )
    .await;
    assert_eq!(body["version"], 4);
    assert_eq!(
        body["notes"],
        "<!-- curated -->\n# Notes\n\n## Preferences\n- tea, no sugar\n- answers in French\n## Work\nrust\n- footnote\n"
    );
    assert_eq!(
        body["outcome"],
        "replaced section \"## Preferences\" (7 chars -> 36 chars); notes now 101 B"
    );

    // Content starting with a heading replaces the heading too.
    let body = op(
        &app,
        &token,
        json!({"operation": "replace_section_by_header", "section_header": "## Work",
               "content": "## Job\nmnemo"}),
    )
    .await;
    assert_eq!(body["version"], 5);
    assert!(body["notes"].as_str().unwrap().ends_with("## Job\nmnemo\n"));

    // Upsert adds a missing section at the end.
    let body = op(
        &app,
        &token,
        json!({"operation": "replace_section_by_header", "section_header": "### Pets",
               "content": "a cat", "upsert": true}),
    )
    .await;
    assert_eq!(body["version"], 6);
    assert!(
        body["notes"]
            .as_str()
            .unwrap()
            .ends_with("## Job\nmnemo\n\n### Pets\na cat\n")
    );
    assert!(
        body["outcome"]
            .as_str()
            .unwrap()
            .starts_with("added section \"### Pets\" at the end")
    );

    let body = op(
        &app,
        &token,
        json!({"operation": "delete_section_by_header", "section_header": "job"}),
    )
    .await;
    assert_eq!(body["version"], 7);
    assert_eq!(
        body["notes"],
        "<!-- curated -->\n# Notes\n\n## Preferences\n- tea, no sugar\n- answers in French\n"
    );

    let body = op(&app, &token, json!({"operation": "read"})).await;
    assert_eq!(body["version"], 7);
    assert_eq!(body["changed"], false);
    assert_eq!(body["outcome"], "read 77 B of notes (version 7)");

    let body = op(&app, &token, json!({"operation": "delete_all_notes"})).await;
    assert_eq!(body["version"], 8);
    assert_eq!(body["notes"], "");
    assert_eq!(
        body["outcome"],
        "deleted all notes (was 77 B); notes now empty"
    );
    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["notes"], "");
    assert_eq!(body["version"], 8, "cleared notes keep counting versions");
}

#[sqlx::test]
async fn section_lookups_answer_404_409_with_headings(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let doc = "## Tea\n```\n# not a heading\n```\n## Tea\nb\n### Deep\n## Last\nz\n";
    op(
        &app,
        &token,
        json!({"operation": "overwrite", "content": doc}),
    )
    .await;
    let problem = expect_problem(
        app.post(OPS, &token).json(&json!({
            "operation": "delete_section_by_header", "section_header": "not a heading"})),
        404,
    )
    .await;
    assert_eq!(
        problem["headings"],
        json!(["## Tea", "## Tea", "### Deep", "## Last"])
    );
    assert_eq!(problem["field"], "section_header");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("## Tea, ## Tea, ### Deep, ## Last")
    );

    let problem = expect_problem(
        app.post(OPS, &token).json(&json!({
            "operation": "replace_section_by_header", "section_header": "TEA", "content": "x"})),
        409,
    )
    .await;
    assert_eq!(
        problem["matches"],
        json!([{"heading": "## Tea", "line": 1}, {"heading": "## Tea", "line": 5}])
    );

    let problem = expect_problem(
        app.post(OPS, &token).json(&json!({
            "operation": "replace_section_by_header", "section_header": "deep",
            "content": "```\nunclosed"})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "content");

    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["version"], 1, "failed edits write nothing");
    assert_eq!(body["notes"], doc);
}

#[sqlx::test]
async fn rest_forms_with_etags(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let (status, etag, body) = etag_of(
        app.put(NOTES, &token)
            .json(&json!({"notes": "line one\r\nline two 🍵"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, etag.as_str()), (200, "\"1\""));
    assert_eq!(body["operation"], "overwrite");
    assert_eq!(
        body["notes"], "line one\r\nline two 🍵",
        "PUT stores the bytes given"
    );

    let (status, etag, body) = etag_of(app.get(NOTES, &token).send().await.unwrap()).await;
    assert_eq!((status, etag.as_str()), (200, "\"1\""));
    assert_eq!(body["notes"], "line one\r\nline two 🍵");
    assert_eq!(body["size_bytes"], 23);
    assert!(body["created_at"].is_string() && body["updated_at"].is_string());

    let (status, etag, _) = etag_of(
        app.get(NOTES, &token)
            .header("if-none-match", "\"1\"")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, etag.as_str()), (304, "\"1\""));

    let (status, etag, body) = etag_of(
        app.delete(NOTES, &token)
            .header("if-match", "\"1\"")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, etag.as_str()), (200, "\"2\""));
    assert_eq!(body["operation"], "delete_all_notes");
    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(
        (body["notes"].as_str(), body["version"].as_i64()),
        (Some(""), Some(2))
    );
}

#[sqlx::test]
async fn stale_if_match_is_412_with_the_current_version(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    // `"0"` means "only if never written".
    expect(
        app.put(NOTES, &token)
            .header("if-match", "\"0\"")
            .json(&json!({"notes": "first"})),
        200,
    )
    .await;
    let problem = expect_problem(
        app.put(NOTES, &token)
            .header("if-match", "\"0\"")
            .json(&json!({"notes": "clobber"})),
        412,
    )
    .await;
    assert_eq!(problem["current_version"], 1);

    // Two agents read version 1; the first write wins, the second is told to re-read.
    let first = expect(
        app.post(OPS, &token)
            .header("if-match", "\"1\"")
            .json(&json!({"operation": "append", "content": "from A"})),
        200,
    )
    .await;
    assert_eq!(first["version"], 2);
    let problem = expect_problem(
        app.post(OPS, &token)
            .header("if-match", "1")
            .json(&json!({"operation": "overwrite", "content": "from B"})),
        412,
    )
    .await;
    assert_eq!(problem["current_version"], 2);
    assert!(problem["detail"].as_str().unwrap().contains("version 2"));
    for (method, path) in [
        ("delete", NOTES.to_owned()),
        ("restore", format!("{NOTES}/revisions/1/restore")),
    ] {
        let request = if method == "delete" {
            app.delete(&path, &token)
        } else {
            app.post(&path, &token)
        };
        let problem = expect_problem(request.header("if-match", "W/\"1\""), 412).await;
        assert_eq!(problem["current_version"], 2, "{method}");
    }
    // `read` ignores If-Match; a malformed one on a write is 422.
    let body = expect(
        app.post(OPS, &token)
            .header("if-match", "\"99\"")
            .json(&json!({"operation": "read"})),
        200,
    )
    .await;
    assert_eq!(body["notes"], "first\nfrom A\n");
    let problem = expect_problem(
        app.put(NOTES, &token)
            .header("if-match", "yesterday")
            .json(&json!({"notes": "x"})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "If-Match");
    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["version"], 2, "no refused write changed anything");
}

#[sqlx::test]
async fn fifty_concurrent_appends_lose_nothing(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let appends = (0..50).map(|i| {
        let request = app
            .post(OPS, &token)
            .json(&json!({"operation": "append", "content": format!("- fact {i}")}));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (status, body["version"].as_i64())
        }
    });
    let results = futures::future::join_all(appends).await;
    let mut versions: Vec<i64> = results
        .iter()
        .map(|(status, version)| {
            assert_eq!(*status, 200);
            version.unwrap()
        })
        .collect();
    versions.sort_unstable();
    assert_eq!(
        versions,
        (1..=50).collect::<Vec<_>>(),
        "each append got its own version"
    );

    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["version"], 50);
    let notes = body["notes"].as_str().unwrap();
    let mut lines: Vec<&str> = notes.lines().collect();
    assert_eq!(lines.len(), 50, "{notes}");
    lines.sort_unstable();
    let mut expected: Vec<String> = (0..50).map(|i| format!("- fact {i}")).collect();
    expected.sort_unstable();
    assert_eq!(lines, expected);

    let page = expect(
        app.get(&format!("{NOTES}/revisions?limit=200"), &token),
        200,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 50);
}

#[sqlx::test]
async fn revisions_list_get_restore_and_pruning(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.notes.revisions_kept = 4).await;
    let token = app.token("t1", "alice");
    for i in 1..=6 {
        op(
            &app,
            &token,
            json!({"operation": "overwrite", "content": format!("text {i}")}),
        )
        .await;
    }
    let page = expect(app.get(&format!("{NOTES}/revisions"), &token), 200).await;
    let versions: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["version"].as_i64().unwrap())
        .collect();
    assert_eq!(versions, vec![6, 5, 4, 3], "only the newest 4 are kept");
    assert_eq!(page["items"][0]["operation"], "overwrite");
    assert_eq!(page["items"][0]["size_bytes"], 6);
    assert!(page["items"][0]["created_at"].is_string());
    assert!(
        page["items"][0].get("notes").is_none(),
        "the list leaves the text out"
    );
    assert!(page["next_cursor"].is_null());

    // Pagination.
    let first = expect(app.get(&format!("{NOTES}/revisions?limit=3"), &token), 200).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 3);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = expect(
        app.get(
            &format!("{NOTES}/revisions?limit=3&cursor={cursor}"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(second["items"][0]["version"], 3);
    assert_eq!(second["items"].as_array().unwrap().len(), 1);
    assert!(second["next_cursor"].is_null());
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("cursor=zz", "cursor"),
    ] {
        let problem =
            expect_problem(app.get(&format!("{NOTES}/revisions?{query}"), &token), 422).await;
        assert_eq!(problem["field"], field, "{query}");
    }

    let revision = expect(app.get(&format!("{NOTES}/revisions/4"), &token), 200).await;
    assert_eq!(revision["notes"], "text 4");
    assert_eq!(revision["version"], 4);
    let problem = expect_problem(app.get(&format!("{NOTES}/revisions/2"), &token), 404).await;
    assert_eq!(problem["oldest_version"], 3);
    assert_eq!(problem["newest_version"], 6);

    let (status, etag, body) = etag_of(
        app.post(&format!("{NOTES}/revisions/4/restore"), &token)
            .header("if-match", "\"6\"")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, etag.as_str()), (200, "\"7\""));
    assert_eq!(body["notes"], "text 4");
    assert_eq!(body["operation"], "restore");
    assert_eq!(body["outcome"], "restored version 4; notes now 6 B");
    let page = expect(app.get(&format!("{NOTES}/revisions?limit=1"), &token), 200).await;
    assert_eq!(page["items"][0]["operation"], "restore");
    assert_eq!(page["items"][0]["restored_from"], 4);
    let current = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(
        (current["notes"].as_str(), current["version"].as_i64()),
        (Some("text 4"), Some(7))
    );
    expect_problem(
        app.post(&format!("{NOTES}/revisions/2/restore"), &token),
        404,
    )
    .await;
}

#[sqlx::test]
async fn other_users_tenants_and_agents_see_their_own_notes(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("t1", "alice");
    op(
        &app,
        &alice,
        json!({"operation": "append", "content": "alice's assistant"}),
    )
    .await;
    op(
        &app,
        &alice,
        json!({"operation": "append", "content": "second"}),
    )
    .await;
    let other_agent = "/api/agents/test_agent/notes";
    let body = expect(app.get(other_agent, &alice), 200).await;
    assert_eq!(
        (body["notes"].as_str(), body["version"].as_i64()),
        (Some(""), Some(0))
    );
    expect(
        app.put(other_agent, &alice)
            .json(&json!({"notes": "test agent's"})),
        200,
    )
    .await;

    for token in [app.token("t1", "bob"), app.token("t2", "alice")] {
        let body = expect(app.get(NOTES, &token), 200).await;
        assert_eq!(body["notes"], "");
        assert_eq!(body["version"], 0);
        let page = expect(app.get(&format!("{NOTES}/revisions"), &token), 200).await;
        assert_eq!(page["items"], json!([]));
        expect_problem(app.get(&format!("{NOTES}/revisions/1"), &token), 404).await;
        expect_problem(
            app.post(&format!("{NOTES}/revisions/1/restore"), &token),
            404,
        )
        .await;
        // Their own first write starts at version 1, untouched by alice's two.
        let body = op(
            &app,
            &token,
            json!({"operation": "append", "content": "mine"}),
        )
        .await;
        assert_eq!(
            (body["notes"].as_str(), body["version"].as_i64()),
            (Some("mine\n"), Some(1))
        );
    }
    let body = expect(app.get(NOTES, &alice), 200).await;
    assert_eq!(body["notes"], "alice's assistant\nsecond\n");
    assert_eq!(body["version"], 2);
    let body = expect(app.get(other_agent, &alice), 200).await;
    assert_eq!(body["notes"], "test agent's");
}

#[sqlx::test]
async fn bad_input_is_named(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let cases = [
        (json!({"operation": "summarise"}), "operation"),
        (json!({"operation": "append"}), "content"),
        (
            json!({"operation": "overwrite", "content": null}),
            "content",
        ),
        (
            json!({"operation": "replace_section_by_header", "content": "x"}),
            "section_header",
        ),
        (
            json!({"operation": "delete_section_by_header"}),
            "section_header",
        ),
        (
            json!({"operation": "delete_section_by_header", "section_header": "##"}),
            "section_header",
        ),
        (
            json!({"operation": "append", "content": "x", "section_header": "Prefs"}),
            "section_header",
        ),
        (
            json!({"operation": "append", "content": "x", "upsert": true}),
            "upsert",
        ),
        (json!({"operation": "append", "content": 7}), "content"),
    ];
    for (body, field) in cases {
        let problem = expect_problem(app.post(OPS, &token).json(&body), 422).await;
        assert_eq!(problem["field"], field, "{body}");
    }
    let long = "x".repeat(65);
    for name in ["bad%20name", "a%2Fb", long.as_str(), "%C3%BC"] {
        for request in [
            app.get(&format!("/api/agents/{name}/notes"), &token),
            app.post(&format!("/api/agents/{name}/notes/operations"), &token)
                .json(&json!({"operation": "append", "content": "x"})),
        ] {
            let problem = expect_problem(request, 422).await;
            assert_eq!(problem["field"], "agent_name", "{name}");
        }
    }
    expect_problem(
        app.post(OPS, &token)
            .header("content-type", "application/json")
            .body("{not json"),
        400,
    )
    .await;
    // A read-only token reads but may not write.
    let read_only = hs256(
        &json!({"sub": "alice", "tenant_id": "t1", "exp": now() + 60, "scope": "memory:read"}),
    );
    expect(app.get(NOTES, &read_only), 200).await;
    expect(
        app.post(OPS, &read_only)
            .json(&json!({"operation": "read"})),
        200,
    )
    .await;
    expect_problem(
        app.post(OPS, &read_only)
            .json(&json!({"operation": "append", "content": "x"})),
        403,
    )
    .await;
    expect_problem(app.put(NOTES, &read_only).json(&json!({"notes": "x"})), 403).await;
}

#[sqlx::test]
async fn size_cap_is_422_with_all_three_sizes_and_writes_nothing(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.notes.max_bytes = 100).await;
    let token = app.token("t1", "alice");
    expect(
        app.put(NOTES, &token)
            .json(&json!({"notes": "a".repeat(60)})),
        200,
    )
    .await;
    let problem = expect_problem(
        app.post(OPS, &token)
            .json(&json!({"operation": "append", "content": "b".repeat(50)})),
        422,
    )
    .await;
    assert_eq!(problem["current_bytes"], 60);
    assert_eq!(problem["attempted_bytes"], 112);
    assert_eq!(problem["max_bytes"], 100);
    assert_eq!(problem["field"], "content");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("112") && detail.contains("100") && detail.contains("60"),
        "{detail}"
    );
    let problem = expect_problem(
        app.put(NOTES, &token)
            .json(&json!({"notes": "c".repeat(101)})),
        422,
    )
    .await;
    assert_eq!(problem["attempted_bytes"], 101);
    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["version"], 1);
    assert_eq!(body["notes"], "a".repeat(60));
    // Exactly at the cap is fine.
    expect(
        app.put(NOTES, &token)
            .json(&json!({"notes": "d".repeat(100)})),
        200,
    )
    .await;
}

/// The plain functions the chat endpoint calls as the `manage_long_term_memory` tool, inside its
/// own scoped transaction: a refused operation leaves the transaction usable.
#[sqlx::test]
async fn tool_functions_run_inside_the_callers_transaction(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let principal = Principal {
        tenant_id: "t1".into(),
        user_id: "alice".into(),
        scopes: vec![],
    };
    let config = app.state.config.notes.clone();
    let mut tx = mnemo::db::Db::new(app.pool.clone())
        .scoped(&principal)
        .await
        .unwrap();
    let notes = store::read_notes(&mut tx, "assistant").await.unwrap();
    assert_eq!((notes.notes.as_str(), notes.version), ("", 0));

    let missing = NotesOperationRequest {
        operation: Operation::DeleteSectionByHeader,
        section_header: Some("Prefs".into()),
        ..Default::default()
    };
    assert!(
        store::run_operation(&mut tx, "assistant", missing, None, &config)
            .await
            .is_err()
    );
    let append = NotesOperationRequest {
        operation: Operation::Append,
        content: Some("## Prefs\ntea".into()),
        ..Default::default()
    };
    let done = store::run_operation(&mut tx, "assistant", append, Some(0), &config)
        .await
        .unwrap();
    assert_eq!(done.version, 1);
    assert_eq!(done.outcome, "appended 12 chars; notes now 13 B");
    let stale = NotesOperationRequest {
        operation: Operation::Append,
        content: Some("late".into()),
        ..Default::default()
    };
    assert!(
        store::run_operation(&mut tx, "assistant", stale, Some(0), &config)
            .await
            .is_err()
    );
    tx.commit().await.unwrap();

    let token = app.token("t1", "alice");
    let body = expect(app.get(NOTES, &token), 200).await;
    assert_eq!(body["notes"], "## Prefs\ntea\n");
    assert_eq!(body["version"], 1);
}

/// A replica keeps the notes answer it last gave, and the database sends the text again only
/// when the row changed: every change is seen, whoever made it, and no caller is given another's
/// answer.
#[sqlx::test]
async fn held_notes_answers_follow_every_change_of_their_row(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let cache = &app.state.notes_cache;
    let alice = app.token("t1", "alice");
    expect(
        app.put(NOTES, &alice).json(&json!({"notes": "# A\none"})),
        200,
    )
    .await;
    let first = expect(app.get(NOTES, &alice), 200).await;
    assert_eq!(first["notes"], "# A\none");
    let held = cache
        .get("t1", "alice", "assistant")
        .expect("the answer is held after a read");
    assert_eq!(serde_json::from_slice::<Value>(&held.body).unwrap(), first);

    // While the row is the one the answer was made from, the held answer is the answer: marked,
    // the mark comes back (and so does a 304 for its version).
    let marked = Held {
        body: bytes::Bytes::from_static(br#"{"held":true}"#),
        ..held.clone()
    };
    cache.put("t1", "alice", "assistant", marked.clone());
    assert_eq!(
        expect(app.get(NOTES, &alice), 200).await,
        json!({"held": true})
    );
    let response = app
        .get(NOTES, &alice)
        .header("if-none-match", "\"1\"")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 304);

    // Users and tenants with an agent of the same name read their own notes, and never the
    // held one.
    let bob = app.token("t1", "bob");
    let other_alice = app.token("t2", "alice");
    expect(app.put(NOTES, &bob).json(&json!({"notes": "bob's"})), 200).await;
    assert_eq!(expect(app.get(NOTES, &bob), 200).await["notes"], "bob's");
    assert_eq!(expect(app.get(NOTES, &other_alice), 200).await["notes"], "");
    assert_eq!(
        expect(app.get(NOTES, &alice), 200).await,
        json!({"held": true})
    );

    // A change made by hand in SQL, version untouched, is seen on the next read.
    sqlx::query("UPDATE agent_long_term_memory SET notes = '# A\nfixed' WHERE user_id = 'alice'")
        .execute(&pool)
        .await
        .unwrap();
    let fixed = expect(app.get(NOTES, &alice), 200).await;
    assert_eq!(
        (&fixed["notes"], &fixed["version"]),
        (&json!("# A\nfixed"), &json!(1))
    );

    // A write through the service.
    op(
        &app,
        &alice,
        json!({"operation": "append", "content": "two"}),
    )
    .await;
    let appended = expect(app.get(NOTES, &alice), 200).await;
    assert_eq!(appended["notes"], "# A\nfixed\ntwo\n");
    assert_eq!(appended["version"], 2);

    // Notes removed behind the replica's back read as never written, and are no longer held;
    // written anew, their version is 1 again, with another text.
    let carol = app.token("t1", "carol");
    expect(app.put(NOTES, &carol).json(&json!({"notes": "old"})), 200).await;
    assert_eq!(expect(app.get(NOTES, &carol), 200).await["notes"], "old");
    for table in ["agent_long_term_memory_revisions", "agent_long_term_memory"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE user_id = 'carol'"))
            .execute(&pool)
            .await
            .unwrap();
    }
    assert!(cache.get("t1", "carol", "assistant").is_some());
    assert_eq!(expect(app.get(NOTES, &carol), 200).await["version"], 0);
    assert!(cache.get("t1", "carol", "assistant").is_none());
    expect(app.put(NOTES, &carol).json(&json!({"notes": "old"})), 200).await;
    expect(app.get(NOTES, &carol), 200).await;
    sqlx::query("DELETE FROM agent_long_term_memory_revisions WHERE user_id = 'carol'")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM agent_long_term_memory WHERE user_id = 'carol'")
        .execute(&pool)
        .await
        .unwrap();
    expect(app.put(NOTES, &carol).json(&json!({"notes": "new"})), 200).await;
    let anew = expect(app.get(NOTES, &carol), 200).await;
    assert_eq!(
        (&anew["notes"], &anew["version"]),
        (&json!("new"), &json!(1))
    );

    // An erasure forgets what the replica held of the erased user.
    assert!(cache.get("t1", "bob", "assistant").is_some());
    expect(app.delete("/api/me/data?confirm=bob", &bob), 200).await;
    assert!(cache.get("t1", "bob", "assistant").is_none());
    assert_eq!(expect(app.get(NOTES, &bob), 200).await["notes"], "");
}

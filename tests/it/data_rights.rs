//! Data rights: the account export, its import here or elsewhere, erasing a user, deleting a
//! task, erasing a tenant. Row counts come from the catalogue (every table of the public schema),
//! so a table added later is checked too.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use mnemo::embed::Embedder;
use mnemo::search::indexer::{self, IndexerStats, Pass};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, hs256, now};
use crate::workspace::rich_task;

const ARCHIVE: &str = "/api/chat/session/archive_messages";

/// An archive's members, in order: path and bytes.
type Members = Vec<(String, Vec<u8>)>;

/// Rows per table for each (tenant, user), over every table with a user_id column.
type Census = BTreeMap<String, BTreeMap<(String, String), i64>>;

async fn tables_with(pool: &PgPool, column: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT t.tablename::text FROM pg_tables t
         WHERE t.schemaname = 'public'
           AND EXISTS (SELECT 1 FROM information_schema.columns c
                       WHERE c.table_schema = 'public' AND c.table_name = t.tablename
                         AND c.column_name = $1)
         ORDER BY 1",
    )
    .bind(column)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The test pool is a superuser: it sees every row.
async fn census(pool: &PgPool) -> Census {
    let mut out = Census::new();
    for table in tables_with(pool, "user_id").await {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(&format!(
            "SELECT tenant_id, user_id, count(*) FROM {table} GROUP BY 1, 2"
        ))
        .fetch_all(pool)
        .await
        .unwrap();
        let per = out.entry(table).or_default();
        for (tenant, user, n) in rows {
            per.insert((tenant, user), n);
        }
    }
    out
}

fn rows_of(census: &Census, tenant: &str, user: &str) -> BTreeMap<String, i64> {
    census
        .iter()
        .map(|(table, per)| {
            let n = per
                .get(&(tenant.to_string(), user.to_string()))
                .copied()
                .unwrap_or(0);
            (table.clone(), n)
        })
        .collect()
}

fn scoped_token(tenant: &str, user: &str, scope: &str) -> String {
    hs256(&json!({"sub": user, "tenant_id": tenant, "exp": now() + 3600, "scope": scope}))
}

/// Something of every kind for the token's user.
async fn seed(app: &TestApp, token: &str, tag: &str) {
    // A memory of several chunks, one with metadata, one soft-deleted.
    let big: String = (0..2500)
        .map(|i| format!("{tag} line {i}: compiling crate number {i}\n"))
        .collect();
    expect(
        app.put(&format!("/api/memories/{tag}-build-log"), token)
            .json(&json!({"content": big, "memory_type": "command_output",
                          "agent_id": "coder", "thread_id": "t-7",
                          "metadata": {"exit": 0, "tags": ["ci", tag]}})),
        201,
    )
    .await;
    expect(
        app.put(&format!("/api/memories/{tag}-note"), token).json(
            &json!({"content": format!("small {tag} note\nwith ünïcode ✓"),
                          "description": "a small note"}),
        ),
        201,
    )
    .await;
    expect(
        app.put(&format!("/api/memories/{tag}-gone"), token)
            .json(&json!({"content": "soon inactive"})),
        201,
    )
    .await;
    expect(app.delete(&format!("/api/memories/{tag}-gone"), token), 204).await;
    // Notes with two revisions, for two agents.
    for agent in ["assistant", "planner"] {
        for (op, content) in [
            ("overwrite", format!("# {tag}\n\n## Likes\n- tea\n")),
            ("append", "- rust".to_string()),
        ] {
            expect(
                app.post(&format!("/api/agents/{agent}/notes/operations"), token)
                    .json(&json!({"operation": op, "content": content})),
                200,
            )
            .await;
        }
    }
    // Two chat sessions, archived in two batches.
    for (session, batch) in [
        (
            "s-one",
            vec![
                ("m1", "hello there", "user"),
                ("m2", "hi, how can I help?", "ai"),
            ],
        ),
        (
            "s-one",
            vec![
                ("m2", "hi, how can I help?", "ai"),
                ("m3", "deploy please", "user"),
            ],
        ),
        ("s-two", vec![("x1", "another chat", "user")]),
    ] {
        let messages: Vec<Value> = batch
            .iter()
            .enumerate()
            .map(|(i, (id, text, sender))| {
                json!({"id": id, "text": format!("{tag}: {text}"), "sender": sender,
                       "timestamp": format!("2026-11-21T10:{:02}:00.000Z", i + 1)})
            })
            .collect();
        expect(
            app.post(ARCHIVE, token)
                .json(&json!({"session_id": session, "messages_batch": messages})),
            200,
        )
        .await;
    }
    // A task with plan versions, steps, events, messages, snapshots, actions, artifacts, waits
    // and a configuration; and a second, plain one.
    rich_task(app, token).await;
    expect(
        app.post("/api/tasks", token)
            .json(&json!({"name": format!("{tag} plain task")})),
        201,
    )
    .await;
}

/// Runs the indexer until the outbox is empty.
async fn drain(app: &TestApp) {
    let embedder = app.state.embedder.clone().unwrap();
    let stats = IndexerStats::default();
    for _ in 0..100 {
        match indexer::run_once(&app.state.db, &embedder, &stats).await {
            Pass::Done { .. } => {}
            Pass::Idle => return,
            Pass::Failed(error) => panic!("indexing failed: {error}"),
        }
    }
    panic!("the outbox did not drain");
}

pub(crate) async fn export(app: &TestApp, token: &str) -> Vec<u8> {
    let response = app.get("/api/me/export", token).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/gzip");
    let disposition = response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        disposition.starts_with("attachment; filename=\"mnemo-export-")
            && disposition.ends_with(".tar.gz\""),
        "{disposition}"
    );
    response.bytes().await.unwrap().to_vec()
}

/// The members of an archive, in order.
fn members(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let mut out = Vec::new();
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        out.push((path, bytes));
    }
    out
}

/// Packs members as a `.tar.gz`; paths are written raw, so hostile ones go through.
fn pack(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut raw = Vec::new();
    for (path, data) in members {
        let mut header = tar::Header::new_ustar();
        if header.set_path(path).is_err() {
            // Hostile (short) paths the builder refuses.
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
        }
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        raw.extend_from_slice(header.as_bytes());
        raw.extend_from_slice(data);
        raw.extend(std::iter::repeat_n(0u8, (512 - data.len() % 512) % 512));
    }
    raw.extend(std::iter::repeat_n(0u8, 1024));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap()
}

fn manifest_of(members: &[(String, Vec<u8>)]) -> Value {
    assert_eq!(members[0].0, "mnemo_export/manifest.json");
    serde_json::from_slice(&members[0].1).unwrap()
}

/// The members with the manifest's created_at, tenant and user left out (all else must match).
fn comparable(members: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = members.to_vec();
    let mut manifest = manifest_of(members);
    let object = manifest.as_object_mut().unwrap();
    for volatile in ["created_at", "tenant_id", "user_id"] {
        object.remove(volatile);
    }
    out[0].1 = serde_json::to_vec(&manifest).unwrap();
    out
}

fn assert_same_members(a: &[(String, Vec<u8>)], b: &[(String, Vec<u8>)]) {
    let names_a: Vec<&str> = a.iter().map(|(p, _)| p.as_str()).collect();
    let names_b: Vec<&str> = b.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names_a, names_b);
    for ((name, x), (_, y)) in comparable(a).iter().zip(comparable(b).iter()) {
        assert_eq!(
            String::from_utf8_lossy(x),
            String::from_utf8_lossy(y),
            "{name} differs"
        );
    }
}

pub(crate) fn import(app: &TestApp, token: &str, archive: Vec<u8>) -> reqwest::RequestBuilder {
    app.post("/api/me/import", token)
        .header("content-type", "application/gzip")
        .body(archive)
}

#[sqlx::test]
async fn erasing_me_deletes_every_row_of_mine_and_nothing_else(pool: PgPool) {
    let embedder = Embedder::hashing(64);
    indexer::prepare_schema(&mnemo::db::Db::new(pool.clone()), &embedder)
        .await
        .unwrap();
    let app = TestApp::with_embedder(pool.clone(), embedder).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t1", "bob");
    let carol = app.token("t2", "carol");
    for (token, tag) in [(&alice, "a"), (&bob, "b"), (&carol, "c")] {
        seed(&app, token, tag).await;
    }
    drain(&app).await;
    // Something still queued for the embedder too.
    for token in [&alice, &bob, &carol] {
        expect(
            app.put("/api/memories/late", token)
                .json(&json!({"content": "queued, not embedded yet"})),
            201,
        )
        .await;
    }
    // Alice's chat window is cached now.
    let context = expect(
        app.post("/api/chat/context", &alice)
            .json(&json!({"session_id": "s-two"})),
        200,
    )
    .await;
    assert_eq!(context["window_messages"], 1);
    let before = census(&pool).await;
    let alice_before = rows_of(&before, "t1", "alice");
    for table in [
        "agent_memories",
        "agent_memory_chunks",
        "memory_vectors",
        "embedding_outbox",
        "agent_long_term_memory",
        "agent_long_term_memory_revisions",
        "agent_sessions",
        "conversation_messages",
        "message_vectors",
        "recent_conversation_history",
        "tasks",
        "task_plans",
        "task_plan_items",
        "task_actions",
        "task_action_logs",
        "task_events",
        "task_messages",
        "task_snapshots",
        "task_steps",
        "task_tool_calls",
        "task_step_texts",
        "task_artifacts",
        "task_configs",
        "task_waits",
        "task_vectors",
    ] {
        assert!(
            alice_before.get(table).copied().unwrap_or(0) > 0,
            "the seed left {table} empty for alice: {alice_before:?}"
        );
    }

    // Without the explicit confirmation nothing happens.
    for query in [
        "",
        "?confirm=",
        "?confirm=bob",
        "?confirm=delete-everything",
        "?confirm=ALICE",
    ] {
        let problem =
            expect_problem(app.delete(&format!("/api/me/data{query}"), &alice), 422).await;
        assert_eq!(problem["field"], "confirm", "{query}");
    }
    let read_only = scoped_token("t1", "alice", "memory:read");
    expect_problem(app.delete("/api/me/data?confirm=alice", &read_only), 403).await;
    assert_eq!(census(&pool).await, before);

    let erased = expect(app.delete("/api/me/data?confirm=alice", &alice), 200).await;
    assert_eq!(erased["tenant_id"], "t1");
    assert_eq!(erased["user_id"], "alice");
    let mut total = 0;
    for (table, n) in &alice_before {
        assert_eq!(erased["deleted"][table], *n, "count of {table}: {erased}");
        total += n;
    }
    assert_eq!(erased["total"], total);

    let after = census(&pool).await;
    for (table, n) in rows_of(&after, "t1", "alice") {
        assert_eq!(n, 0, "alice still has rows in {table}");
    }
    for (tenant, user) in [("t1", "bob"), ("t2", "carol")] {
        assert_eq!(
            rows_of(&after, tenant, user),
            rows_of(&before, tenant, user),
            "{user} lost rows"
        );
    }
    // Through the API too: nothing of alice's is left; bob still reads his.
    expect_problem(app.get("/api/memories/a-note", &alice), 404).await;
    let tasks = expect(app.get("/api/tasks", &alice), 200).await;
    assert_eq!(tasks["items"], json!([]));
    expect(app.get("/api/memories/b-note", &bob), 200).await;
    // A new session of the same id starts empty: the cached window of the erased one is gone.
    expect(
        app.post(ARCHIVE, &alice).json(&json!({"session_id": "s-two", "messages_batch": [
            {"id": "new", "text": "a fresh start", "sender": "user", "timestamp": "2026-12-01T10:00:00Z"}
        ]})),
        200,
    )
    .await;
    let context = expect(
        app.post("/api/chat/context", &alice)
            .json(&json!({"session_id": "s-two"})),
        200,
    )
    .await;
    assert_eq!(context["window_messages"], 1, "{context}");
    assert!(!context.to_string().contains("another chat"), "{context}");
}

#[sqlx::test]
async fn export_erase_import_restores_everything_exactly(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    seed(&app, &alice, "a").await;
    let memory_before = expect(app.get("/api/memories/a-build-log", &alice), 200).await;
    let notes_before = expect(app.get("/api/agents/planner/notes", &alice), 200).await;
    let revisions_before =
        expect(app.get("/api/agents/planner/notes/revisions", &alice), 200).await;
    let messages_before = expect(app.get("/api/chat/sessions/s-one/messages", &alice), 200).await;
    let tasks_before = expect(app.get("/api/tasks", &alice), 200).await;
    let rows_before = rows_of(&census(&pool).await, "t1", "alice");

    let first = export(&app, &alice).await;
    let first_members = members(&first);
    let manifest = manifest_of(&first_members);
    assert_eq!(manifest["format"], "mnemo-account-export");
    assert_eq!(manifest["version"], 1);
    assert_eq!(manifest["tenant_id"], "t1");
    assert_eq!(manifest["user_id"], "alice");
    assert!(manifest["created_at"].is_string());
    assert_eq!(
        manifest["counts"],
        json!({"memories": 3, "notes": 2, "note_revisions": 4, "sessions": 2, "messages": 4,
               "session_batches": 3, "tasks": 2})
    );
    // The layout: memories as record + content, tasks in the per-task layout.
    let names: Vec<&str> = first_members.iter().map(|(p, _)| p.as_str()).collect();
    let content = first_members
        .iter()
        .find(|(p, _)| p.ends_with(".txt") && p.starts_with("mnemo_export/memories/"))
        .unwrap();
    assert!(!content.1.is_empty());
    assert!(names.contains(&"mnemo_export/notes/000001.jsonl"));
    assert!(names.contains(&"mnemo_export/messages/000001.jsonl"));
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("task_memory_bank/") && n.ends_with("/artifacts/index.json"))
    );
    let big = first_members
        .iter()
        .find(|(_, b)| b.starts_with(b"a line 0: compiling"))
        .expect("the build log's content");
    assert_eq!(
        big.1.len() as i64,
        memory_before["totals"]["size_bytes"].as_i64().unwrap()
    );

    expect(app.delete("/api/me/data?confirm=alice", &alice), 200).await;
    let empty = members(&export(&app, &alice).await);
    assert_eq!(
        empty.len(),
        1,
        "only the manifest: {:?}",
        empty.iter().map(|m| &m.0).collect::<Vec<_>>()
    );
    assert_eq!(
        manifest_of(&empty)["counts"],
        json!({"memories": 0, "notes": 0, "note_revisions": 0, "sessions": 0, "messages": 0,
               "session_batches": 0, "tasks": 0})
    );

    let imported = expect(import(&app, &alice, first.clone()), 201).await;
    assert_eq!(imported["imported"], manifest["counts"]);
    assert_eq!(rows_of(&census(&pool).await, "t1", "alice"), rows_before);

    let second = members(&export(&app, &alice).await);
    assert_same_members(&first_members, &second);
    // Reads through the API agree as well (ids, versions and times kept).
    assert_eq!(
        expect(app.get("/api/memories/a-build-log", &alice), 200).await,
        memory_before
    );
    assert_eq!(
        expect(app.get("/api/agents/planner/notes", &alice), 200).await,
        notes_before
    );
    assert_eq!(
        expect(app.get("/api/agents/planner/notes/revisions", &alice), 200).await,
        revisions_before
    );
    assert_eq!(
        expect(app.get("/api/chat/sessions/s-one/messages", &alice), 200).await,
        messages_before
    );
    assert_eq!(
        expect(app.get("/api/tasks", &alice), 200).await,
        tasks_before
    );
    let gone = expect_problem(app.get("/api/memories/a-gone", &alice), 404).await;
    assert_eq!(
        gone["is_active"], false,
        "the soft deletion is kept: {gone}"
    );
}

/// What an edited message, a deleted one and a session's running summary leave behind (the
/// stored `edited_at`, the batch's update and deletion counts, the summary and its counters)
/// survives an export, an erase and the import.
#[sqlx::test]
async fn edits_and_session_summaries_survive_export_and_import(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| c.conversations.chat_summary_every = 3).await;
    let alice = app.token("t1", "alice");
    let message = |id: &str, text: &str, sender: &str, minute: u32| {
        json!({"id": id, "text": text, "sender": sender,
               "timestamp": format!("2026-11-21T10:{minute:02}:00.000Z")})
    };
    let first = vec![
        message("q1", "Which backup runs tonight?", "user", 1),
        message("r1", "The nightly", "ai", 2),
        message("q2", "And the replica in Frankfurt?", "user", 3),
        message("q3", "never mind", "user", 4),
    ];
    expect(
        app.post(ARCHIVE, &alice)
            .json(&json!({"session_id": "edits", "messages_batch": first})),
        200,
    )
    .await;
    // The streamed reply completes, and the user takes a question back.
    let mut full = message(
        "r1",
        "The nightly full backup of the Postgres cluster.",
        "ai",
        2,
    );
    full["edited_at"] = json!("2026-11-21T10:02:30.500Z");
    let second = expect(
        app.post(ARCHIVE, &alice)
            .json(&json!({"session_id": "edits", "messages_batch": [
                full,
                {"id": "q3", "deleted": true, "edited_at": "2026-11-21T10:05:00Z"},
            ]})),
        200,
    )
    .await;
    assert_eq!(
        (second["updated"].as_i64(), second["deleted"].as_i64()),
        (Some(1), Some(1))
    );
    // The summary refreshes in the background once three messages arrived; wait for it.
    app.state.settle().await;
    let detail = expect(app.get("/api/chat/sessions/edits", &alice), 200).await;
    assert_eq!(
        detail["summary_message_count"].as_i64(),
        Some(4),
        "{detail}"
    );
    assert!(
        detail["summary"].is_string() && detail["summary_updated_at"].is_string(),
        "{detail}"
    );
    assert_eq!(detail["message_count"], 4, "{detail}");
    let messages_before = expect(app.get("/api/chat/sessions/edits/messages", &alice), 200).await;
    let texts: Vec<&str> = messages_before["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "Which backup runs tonight?",
            "The nightly full backup of the Postgres cluster.",
            "And the replica in Frankfurt?"
        ]
    );
    let reply = &messages_before["items"][1];
    assert_eq!(reply["edited_at"], "2026-11-21T10:02:30.500Z", "{reply}");

    let archive = export(&app, &alice).await;
    let first_members = members(&archive);
    let records = |name: &str| -> Vec<Value> {
        let (_, bytes) = first_members
            .iter()
            .find(|(p, _)| p == name)
            .unwrap_or_else(|| panic!("no {name}"));
        String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let messages = records("mnemo_export/messages/000001.jsonl");
    let exported_reply = messages.iter().find(|m| m["message_id"] == "r1").unwrap();
    assert_eq!(exported_reply["edited_at"], "2026-11-21T10:02:30.500Z");
    assert!(messages.iter().find(|m| m["message_id"] == "q1").unwrap()["edited_at"].is_null());
    let sessions = records("mnemo_export/sessions/000001.jsonl");
    assert_eq!(sessions[0]["summary"], detail["summary"]);
    assert_eq!(sessions[0]["message_count"], 4);
    assert_eq!(sessions[0]["summary_message_count"], 4);
    assert_eq!(
        sessions[0]["summary_updated_at"],
        detail["summary_updated_at"]
    );
    let batches = records("mnemo_export/session_batches/000001.jsonl");
    let counted: Vec<(i64, i64)> = batches
        .iter()
        .map(|b| {
            (
                b["updated_count"].as_i64().unwrap(),
                b["deleted_count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(
        counted.contains(&(1, 1)) && counted.contains(&(0, 0)),
        "{counted:?}"
    );

    expect(app.delete("/api/me/data?confirm=alice", &alice), 200).await;
    expect(import(&app, &alice, archive), 201).await;
    assert_same_members(&first_members, &members(&export(&app, &alice).await));
    assert_eq!(
        expect(app.get("/api/chat/sessions/edits", &alice), 200).await,
        detail
    );
    assert_eq!(
        expect(app.get("/api/chat/sessions/edits/messages", &alice), 200).await,
        messages_before
    );
    // The stored edit time still orders the states: a resend of the partial reply changes nothing.
    let stale = expect(
        app.post(ARCHIVE, &alice)
            .json(&json!({"session_id": "edits",
            "messages_batch": [message("r1", "The nightly", "ai", 2)]})),
        200,
    )
    .await;
    assert_eq!(stale["updated"], 0, "{stale}");

    // An archive of an older export, without these fields, still imports.
    let bob = app.token("t1", "bob");
    let older: Members = first_members
        .iter()
        .map(|(path, bytes)| {
            if !path.ends_with(".jsonl")
                || !(path.contains("/sessions/")
                    || path.contains("/messages/")
                    || path.contains("/session_batches/"))
            {
                return (path.clone(), bytes.clone());
            }
            let lines: Vec<String> = String::from_utf8_lossy(bytes)
                .lines()
                .map(|l| {
                    let mut v: Value = serde_json::from_str(l).unwrap();
                    let o = v.as_object_mut().unwrap();
                    for field in [
                        "edited_at",
                        "summary_message_count",
                        "summary_updated_at",
                        "updated_count",
                        "deleted_count",
                    ] {
                        o.remove(field);
                    }
                    // A session's count is new; a batch always had one.
                    if path.contains("/sessions/") {
                        o.remove("message_count");
                    }
                    v.to_string()
                })
                .collect();
            (path.clone(), format!("{}\n", lines.join("\n")).into_bytes())
        })
        .collect();
    expect(import(&app, &bob, pack(&older)), 201).await;
    let restored = expect(app.get("/api/chat/sessions/edits", &bob), 200).await;
    assert_eq!(restored["summary"], detail["summary"]);
    assert_eq!(
        restored["message_count"], 3,
        "the messages the archive holds: {restored}"
    );
}

#[sqlx::test]
async fn an_export_imports_into_another_account_and_conflicts_store_nothing(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    seed(&app, &alice, "a").await;
    let archive = export(&app, &alice).await;
    let archive_members = members(&archive);

    // Carol, in another tenant, gets it all; alice keeps hers.
    let carol = app.token("t2", "carol");
    let imported = expect(import(&app, &carol, archive.clone()), 201).await;
    assert_eq!(imported["imported"]["tasks"], 2);
    let carols = members(&export(&app, &carol).await);
    assert_same_members(&archive_members, &carols);
    assert_eq!(manifest_of(&carols)["tenant_id"], "t2");
    assert_eq!(manifest_of(&carols)["user_id"], "carol");
    let census_now = census(&pool).await;
    assert_eq!(
        rows_of(&census_now, "t2", "carol"),
        rows_of(&census_now, "t1", "alice")
    );
    let read = expect(app.get("/api/memories/a-note", &carol), 200).await;
    assert_eq!(read["memory_key"], "a-note");

    // Again into carol: everything exists already, 409 naming the first clash.
    let problem = expect_problem(import(&app, &carol, archive.clone()), 409).await;
    assert!(
        problem["member"]
            .as_str()
            .unwrap()
            .starts_with("mnemo_export/memories/")
    );
    assert_eq!(census(&pool).await, census_now);

    // Dave has only a session of the same id: memories and notes come before sessions in the
    // archive, yet none of them is kept when the session clashes.
    let dave = app.token("t1", "dave");
    expect(
        app.post(ARCHIVE, &dave)
            .json(&json!({"session_id": "s-one", "messages_batch": [
                {"id": "d1", "text": "mine", "sender": "user", "timestamp": "2026-11-21T10:00:00Z"}
            ]})),
        200,
    )
    .await;
    let dave_before = rows_of(&census(&pool).await, "t1", "dave");
    let problem = expect_problem(import(&app, &dave, archive), 409).await;
    assert_eq!(problem["member"], "mnemo_export/sessions/000001.jsonl");
    assert_eq!(rows_of(&census(&pool).await, "t1", "dave"), dave_before);
    assert_eq!(dave_before["agent_memories"], 0);

    // A read-only token may export but not import.
    let reader = scoped_token("t1", "erin", "memory:read");
    expect_problem(import(&app, &reader, pack(&archive_members)), 403).await;
}

#[sqlx::test]
async fn malformed_truncated_and_oversized_archives_are_refused(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    seed(&app, &alice, "a").await;
    let archive = export(&app, &alice).await;
    let good = members(&archive);
    let mallory = app.token("t1", "mallory");

    let with = |f: &dyn Fn(&mut Members)| {
        let mut m = good.clone();
        f(&mut m);
        pack(&m)
    };
    let position = |name: &str| good.iter().position(|(p, _)| p.contains(name)).unwrap();
    let first_content = good
        .iter()
        .position(|(p, _)| p.starts_with("mnemo_export/memories/") && p.ends_with(".txt"))
        .unwrap();
    let messages = position("mnemo_export/messages/");
    let task_meta = good
        .iter()
        .position(|(p, _)| p.starts_with("task_memory_bank/") && p.ends_with("/metadata.json"))
        .unwrap();

    let cases: Vec<(&str, Vec<u8>, Option<String>)> = vec![
        ("not gzip", b"this is not an archive".to_vec(), None),
        ("empty body", Vec::new(), None),
        ("truncated", archive[..archive.len() / 2].to_vec(), None),
        (
            "no manifest",
            with(&|m| {
                m.remove(0);
            }),
            Some(good[1].0.clone()),
        ),
        (
            "manifest counts altered",
            with(&|m| {
                let mut manifest: Value = serde_json::from_slice(&m[0].1).unwrap();
                manifest["counts"]["messages"] = json!(5);
                m[0].1 = serde_json::to_vec(&manifest).unwrap();
            }),
            Some("mnemo_export/manifest.json".into()),
        ),
        (
            "a member left out",
            with(&|m| {
                m.remove(messages);
            }),
            None,
        ),
        (
            "another format version",
            with(&|m| {
                let mut manifest: Value = serde_json::from_slice(&m[0].1).unwrap();
                manifest["version"] = json!(2);
                m[0].1 = serde_json::to_vec(&manifest).unwrap();
            }),
            Some("mnemo_export/manifest.json".into()),
        ),
        (
            "content altered",
            with(&|m| {
                m[first_content].1[0] ^= 1;
            }),
            Some(good[first_content - 1].0.clone()),
        ),
        (
            "bad sender",
            with(&|m| {
                let text = String::from_utf8(m[messages].1.clone()).unwrap();
                m[messages].1 = text
                    .replacen("\"sender\":\"user\"", "\"sender\":\"robot\"", 1)
                    .into_bytes();
            }),
            Some(good[messages].0.clone()),
        ),
        (
            "unknown field",
            with(&|m| {
                let text = String::from_utf8(m[messages].1.clone()).unwrap();
                m[messages].1 = text.replacen("{", "{\"extra\":1,", 1).into_bytes();
            }),
            Some(good[messages].0.clone()),
        ),
        (
            "out of order",
            with(&|m| {
                let batches = m
                    .iter()
                    .position(|(p, _)| p.starts_with("mnemo_export/session_batches/"))
                    .unwrap();
                let moved = m.remove(batches);
                m.insert(messages, moved);
            }),
            Some(good[messages].0.clone()),
        ),
        (
            "path traversal",
            with(&|m| {
                m.push(("mnemo_export/../../etc/passwd".into(), b"x".to_vec()));
            }),
            Some("mnemo_export/../../etc/passwd".into()),
        ),
        (
            "foreign member",
            with(&|m| {
                m.insert(1, ("mnemo_export/extra.json".into(), b"{}".to_vec()));
            }),
            Some("mnemo_export/extra.json".into()),
        ),
        (
            "task metadata broken",
            with(&|m| {
                m[task_meta].1 = b"{not json".to_vec();
            }),
            Some(good[task_meta].0.clone()),
        ),
        (
            "NUL in a record",
            with(&|m| {
                let text = String::from_utf8(m[messages].1.clone()).unwrap();
                m[messages].1 = text.replacen("a: hello", "a: hel\\u0000lo", 1).into_bytes();
            }),
            Some(good[messages].0.clone()),
        ),
    ];
    for (what, body, member) in cases {
        let problem = expect_problem(import(&app, &mallory, body), 422).await;
        if let Some(member) = member {
            assert_eq!(problem["member"], member.as_str(), "{what}: {problem}");
        }
        let detail = problem["detail"].as_str().unwrap();
        match what {
            "bad sender" => assert_eq!(problem["line"], 1, "{problem}"),
            "out of order" => assert!(detail.contains("out of order"), "{detail}"),
            "content altered" => assert!(detail.contains("content_sha256"), "{detail}"),
            "a member left out" | "manifest counts altered" => {
                assert!(detail.contains("incomplete or altered"), "{detail}");
            }
            _ => {}
        }
    }
    let nothing = rows_of(&census(&pool).await, "t1", "mallory");
    assert!(nothing.values().all(|n| *n == 0), "{nothing:?}");

    // Size caps: the body, the unpacked total, one memory's content.
    let small_body =
        TestApp::with_config(pool.clone(), |c| c.rights.account_import_max_bytes = 4096).await;
    let problem = expect_problem(import(&small_body, &mallory, archive.clone()), 413).await;
    assert_eq!(problem["limit_bytes"], 4096);
    let small_unpacked = TestApp::with_config(pool.clone(), |c| {
        c.rights.account_import_max_unpacked_bytes = 50_000;
    })
    .await;
    let problem = expect_problem(import(&small_unpacked, &mallory, archive.clone()), 413).await;
    assert_eq!(problem["limit_bytes"], 50_000);
    let small_memory = TestApp::with_config(pool.clone(), |c| c.memory_max_bytes = 1000).await;
    let problem = expect_problem(import(&small_memory, &mallory, archive), 413).await;
    assert!(
        problem["member"]
            .as_str()
            .unwrap()
            .starts_with("mnemo_export/memories/")
    );
    let nothing = rows_of(&census(&pool).await, "t1", "mallory");
    assert!(nothing.values().all(|n| *n == 0), "{nothing:?}");
}

#[sqlx::test]
async fn deleting_a_task_deletes_everything_under_it(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t1", "bob");
    let id = rich_task(&app, &alice).await;
    let kept = rich_task(&app, &alice).await;
    let tables = tables_with(&pool, "task_id").await;
    let rows_of_task = |task: String| {
        let pool = pool.clone();
        let tables = tables.clone();
        async move {
            let mut total = 0i64;
            for table in &tables {
                let n: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM {table} WHERE task_id = $1::uuid"
                ))
                .bind(&task)
                .fetch_one(&pool)
                .await
                .unwrap();
                total += n;
            }
            total
        }
    };
    assert!(rows_of_task(id.clone()).await > 10);
    let kept_rows = rows_of_task(kept.clone()).await;

    expect_problem(app.delete(&format!("/api/tasks/{id}"), &bob), 404).await;
    let reader = scoped_token("t1", "alice", "memory:read");
    expect_problem(app.delete(&format!("/api/tasks/{id}"), &reader), 403).await;
    expect(app.get(&format!("/api/tasks/{id}"), &alice), 200).await;

    let response = app
        .delete(&format!("/api/tasks/{id}"), &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    expect_problem(app.get(&format!("/api/tasks/{id}"), &alice), 404).await;
    expect_problem(app.delete(&format!("/api/tasks/{id}"), &alice), 404).await;
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 0);
    assert_eq!(rows_of_task(id).await, 0);
    assert_eq!(rows_of_task(kept.clone()).await, kept_rows);
    expect(app.get(&format!("/api/tasks/{kept}"), &alice), 200).await;
}

#[sqlx::test]
async fn tenant_erase_needs_admin_and_reaches_only_its_tenant(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t1", "bob");
    let carol = app.token("t2", "carol");
    for (token, tag) in [(&alice, "a"), (&bob, "b"), (&carol, "c")] {
        seed(&app, token, tag).await;
    }
    let tenant_rows = |tenant: &'static str| {
        let pool = pool.clone();
        async move {
            let mut out = BTreeMap::new();
            for table in tables_with(&pool, "tenant_id").await {
                let n: i64 = sqlx::query_scalar(&format!(
                    "SELECT count(*) FROM {table} WHERE tenant_id = $1"
                ))
                .bind(tenant)
                .fetch_one(&pool)
                .await
                .unwrap();
                out.insert(table, n);
            }
            out
        }
    };
    let t1_before = tenant_rows("t1").await;
    let t2_before = tenant_rows("t2").await;
    assert!(t1_before["agent_memories"] >= 6);

    // Without admin: 403 in the own tenant; another tenant is never visible, whatever the scope.
    expect_problem(app.delete("/api/tenants/t1", &alice), 403).await;
    expect_problem(app.delete("/api/tenants/t2", &alice), 404).await;
    let admin_t2 = scoped_token("t2", "root", "admin");
    expect_problem(app.delete("/api/tenants/t1", &admin_t2), 404).await;
    expect_problem(app.delete("/api/tenants/nobody", &admin_t2), 404).await;
    assert_eq!(tenant_rows("t1").await, t1_before);

    let admin_t1 = scoped_token("t1", "root", "admin");
    let erased = expect(app.delete("/api/tenants/t1", &admin_t1), 200).await;
    assert_eq!(erased["tenant_id"], "t1");
    assert!(erased.get("user_id").is_none());
    assert_eq!(erased["total"], t1_before.values().sum::<i64>());
    for (table, n) in &t1_before {
        assert_eq!(erased["deleted"][table], *n, "{table}");
    }
    assert!(tenant_rows("t1").await.values().all(|n| *n == 0));
    assert_eq!(tenant_rows("t2").await, t2_before);
    expect(app.get("/api/memories/c-note", &carol), 200).await;
    expect_problem(app.get("/api/memories/b-note", &bob), 404).await;
}

#[sqlx::test]
async fn large_accounts_export_in_pages_and_segments(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let alice = app.token("t1", "alice");
    // More memories than one page of the export reads, more messages than one segment holds.
    for i in 0..130 {
        expect(
            app.put(&format!("/api/memories/m{i:03}"), &alice)
                .json(&json!({"content": format!("memory number {i}\n")})),
            201,
        )
        .await;
    }
    for b in 0..5 {
        let messages: Vec<Value> = (0..500)
            .map(|i| {
                json!({"id": format!("b{b}-{i}"), "text": format!("message {b}/{i}"),
                       "sender": if i % 2 == 0 { "user" } else { "ai" },
                       "timestamp": format!("2026-11-21T1{b}:{:02}:{:02}Z", i / 60, i % 60)})
            })
            .collect();
        expect(
            app.post(ARCHIVE, &alice)
                .json(&json!({"session_id": format!("s{b}"), "messages_batch": messages})),
            200,
        )
        .await;
    }
    let archive = export(&app, &alice).await;
    let all = members(&archive);
    let manifest = manifest_of(&all);
    assert_eq!(manifest["counts"]["memories"], 130);
    assert_eq!(manifest["counts"]["messages"], 2500);
    let segments: Vec<&str> = all
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| p.starts_with("mnemo_export/messages/"))
        .collect();
    assert_eq!(
        segments,
        [
            "mnemo_export/messages/000001.jsonl",
            "mnemo_export/messages/000002.jsonl",
            "mnemo_export/messages/000003.jsonl"
        ]
    );
    let lines: usize = all
        .iter()
        .filter(|(p, _)| p.starts_with("mnemo_export/messages/"))
        .map(|(_, b)| b.iter().filter(|c| **c == b'\n').count())
        .sum();
    assert_eq!(lines, 2500);
    let memory_members = all
        .iter()
        .filter(|(p, _)| p.starts_with("mnemo_export/memories/"))
        .count();
    assert_eq!(memory_members, 260);

    // Restored elsewhere, every message keeps its place in its session.
    let bob = app.token("t1", "bob");
    expect(import(&app, &bob, archive), 201).await;
    assert_same_members(&all, &members(&export(&app, &bob).await));
    let page = expect(
        app.get("/api/chat/sessions/s3/messages?limit=500", &bob),
        200,
    )
    .await;
    let ids: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().or(m["message_id"].as_str()).unwrap())
        .collect();
    let expected: Vec<String> = (0..500).map(|i| format!("b3-{i}")).collect();
    assert_eq!(ids, expected);
}

#[sqlx::test]
async fn exports_at_once_are_bounded(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.rights.account_exports_at_once = 1).await;
    let alice = app.token("t1", "alice");
    let held = app.state.exports.clone().try_acquire_owned().unwrap();
    let response = app.get("/api/me/export", &alice).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    drop(held);
    let archive = export(&app, &alice).await;
    assert_eq!(manifest_of(&members(&archive))["counts"]["memories"], 0);
    // The slot is free again once the export has streamed.
    export(&app, &alice).await;
}

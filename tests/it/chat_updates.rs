//! Conversation archives as upserts: a message sent again with other content is updated in place,
//! `edited_at` orders its states, `deleted: true` removes it; a request without a session id gets
//! one made by the server; and the alternative field names of memory writes and agent tools.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use mnemo::embed::Embedder;
use mnemo::search::indexer::{self, IndexerStats, Pass};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, message_ids};

const ARCHIVE: &str = "/api/chat/session/archive_messages";
const BEACON: &str = "/api/chat/session/archive_messages/beacon";

fn msg(id: &str, text: &str, sender: &str, minute: u32) -> Value {
    json!({"id": id, "text": text, "sender": sender,
           "timestamp": format!("2026-11-21T10:{minute:02}:00.000Z")})
}

fn edited(mut message: Value, at: &str) -> Value {
    message["edited_at"] = json!(at);
    message
}

fn batch(session: &str, messages: Vec<Value>) -> Value {
    json!({"session_id": session, "messages_batch": messages})
}

/// (new, updated, deleted, duplicates) of an archive answer.
fn counts(answer: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| answer[k].as_i64().unwrap_or(-1);
    (n("new"), n("updated"), n("deleted"), n("duplicates"))
}

/// (id, text) of every stored message of `session`, in session order.
async fn stored(app: &TestApp, token: &str, session: &str) -> Vec<(String, String)> {
    let page = expect(
        app.get(&format!("/api/chat/sessions/{session}/messages"), token),
        200,
    )
    .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The window part of a compiled context (after the system prompt and the notes).
fn window_texts(context: &Value) -> Vec<String> {
    context["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn seq_of(pool: &PgPool, message: &str) -> i64 {
    sqlx::query_scalar("SELECT seq FROM conversation_messages WHERE message_id = $1")
        .bind(message)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn is_uuid_v7(id: &str) -> bool {
    uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 7)
}

/// The scenario of a web app: the periodic archive catches an AI reply while it still streams,
/// the next one sends it complete.
#[sqlx::test]
async fn a_partial_reply_sent_again_complete_is_updated_in_place(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 3).await;
    let token = app.token("t1", "alice");
    let question = msg("u1", "which city should we visit?", "user", 1);
    let partial = msg("a1", "Lisbon is lovely in", "ai", 2);
    let full = msg(
        "a1",
        "Lisbon is lovely in spring: take the tram to the Belem tower.",
        "ai",
        2,
    );
    let later = msg("u2", "sounds good", "user", 3);

    let answer = expect(
        app.post(ARCHIVE, &token)
            .json(&batch("s", vec![question.clone(), partial])),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (2, 0, 0, 0));
    let seq = seq_of(&pool, "a1").await;
    // The window is cached now: the update must reach the cache too.
    let context = expect(
        app.post("/api/chat/context", &token)
            .json(&json!({"session_id": "s"})),
        200,
    )
    .await;
    assert_eq!(
        window_texts(&context),
        ["which city should we visit?", "Lisbon is lovely in"]
    );

    let resend = batch("s", vec![question.clone(), full.clone(), later.clone()]);
    let answer = expect(app.post(ARCHIVE, &token).json(&resend), 200).await;
    assert_eq!(counts(&answer), (1, 1, 0, 1), "{answer}");
    // Stored once, with the full text, in its place.
    assert_eq!(
        stored(&app, &token, "s").await,
        [
            ("u1".into(), "which city should we visit?".into()),
            (
                "a1".into(),
                "Lisbon is lovely in spring: take the tram to the Belem tower.".into()
            ),
            ("u2".into(), "sounds good".into()),
        ]
    );
    assert_eq!(seq_of(&pool, "a1").await, seq, "an update keeps the seq");
    // An identical resend is a duplicate and changes nothing.
    let answer = expect(app.post(ARCHIVE, &token).json(&resend), 200).await;
    assert_eq!(counts(&answer), (0, 0, 0, 3));

    let history: Vec<(i32, i32, i32, i32, i32)> = sqlx::query_as(
        "SELECT message_count, new_count, updated_count, deleted_count, duplicate_count
         FROM recent_conversation_history ORDER BY archived_at, id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(history, [(2, 2, 0, 0, 0), (3, 1, 1, 0, 1), (3, 0, 0, 0, 3)]);

    // The window shows the full text in its place, from the cache and from the database.
    for app in [
        &app,
        &TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 3).await,
    ] {
        let context = expect(
            app.post("/api/chat/context", &token)
                .json(&json!({"session_id": "s"})),
            200,
        )
        .await;
        assert_eq!(
            window_texts(&context),
            [
                "which city should we visit?",
                "Lisbon is lovely in spring: take the tram to the Belem tower.",
                "sounds good"
            ]
        );
    }

    // Search finds a word that only the full text has (the message after it follows).
    let found = expect(
        app.post("/api/chat/search", &token)
            .json(&json!({"query": "tram"})),
        200,
    )
    .await;
    assert_eq!(message_ids(&found), ["a1", "u2"], "{found}");
    assert!(
        found["hits"][0]["snippet"]
            .as_str()
            .unwrap()
            .contains("**tram**")
    );
}

/// An update sent with a turn's new messages shows in place in that turn's context.
#[sqlx::test]
async fn a_turn_that_completes_a_reply_shows_it_in_place(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![
                msg("u1", "tell me a joke", "user", 1),
                msg("a1", "Why did the", "ai", 2),
            ],
        )),
        200,
    )
    .await;
    let context = expect(
        app.post("/api/chat/context", &token).json(&json!({
            "session_id": "s",
            "new_messages": [
                msg("a1", "Why did the chicken cross the road?", "ai", 2),
                msg("u2", "why?", "user", 3),
            ]
        })),
        200,
    )
    .await;
    assert_eq!(
        (
            context["new"].as_i64(),
            context["updated"].as_i64(),
            context["duplicates"].as_i64()
        ),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(
        window_texts(&context),
        [
            "tell me a joke",
            "Why did the chicken cross the road?",
            "why?"
        ]
    );
}

#[sqlx::test]
async fn edited_at_orders_the_states_of_a_message(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let send = |messages: Vec<Value>| app.post(ARCHIVE, &token).json(&batch("s", messages));
    let text_of = |id: &'static str| {
        let app = &app;
        let token = &token;
        async move {
            stored(app, token, "s")
                .await
                .into_iter()
                .find(|(i, _)| i == id)
                .map(|(_, t)| t)
        }
    };

    let answer = expect(
        send(vec![edited(
            msg("m", "second draft", "user", 1),
            "2026-11-21T10:05:00Z",
        )]),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (1, 0, 0, 0));
    // An older state arriving late does not overwrite the newer one...
    let answer = expect(
        send(vec![edited(
            msg("m", "first draft", "user", 1),
            "2026-11-21T10:02:00Z",
        )]),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 0, 0, 1));
    assert_eq!(text_of("m").await.as_deref(), Some("second draft"));
    // ...nor does the message as first written (no edited_at: older than any edit).
    let answer = expect(send(vec![msg("m", "original", "user", 1)]), 200).await;
    assert_eq!(counts(&answer), (0, 0, 0, 1));
    assert_eq!(text_of("m").await.as_deref(), Some("second draft"));
    // A newer state wins, and the stored edited_at follows.
    let answer = expect(
        send(vec![edited(
            msg("m", "final text", "user", 1),
            "2026-11-21T10:09:00Z",
        )]),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 1, 0, 0));
    let page = expect(app.get("/api/chat/sessions/s/messages", &token), 200).await;
    assert_eq!(page["items"][0]["text"], "final text");
    assert_eq!(page["items"][0]["edited_at"], "2026-11-21T10:09:00Z");
    assert_eq!(page["items"][0]["timestamp"], "2026-11-21T10:01:00Z");

    // A deletion older than the stored state is ignored; a newer one deletes.
    let answer = expect(
        send(vec![
            json!({"id": "m", "deleted": true, "edited_at": "2026-11-21T10:08:00Z"}),
        ]),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 0, 0, 1));
    assert_eq!(text_of("m").await.as_deref(), Some("final text"));
    let answer = expect(
        send(vec![
            json!({"id": "m", "deleted": true, "edited_at": "2026-11-21T10:10:00Z"}),
        ]),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 0, 1, 0));
    assert_eq!(text_of("m").await, None);

    // Without edited_at on either side the later archive wins.
    expect(send(vec![msg("n", "one", "ai", 2)]), 200).await;
    let answer = expect(send(vec![msg("n", "two", "ai", 2)]), 200).await;
    assert_eq!(counts(&answer), (0, 1, 0, 0));
    assert_eq!(text_of("n").await.as_deref(), Some("two"));
    // A changed sender is a change too.
    let answer = expect(send(vec![msg("n", "two", "user", 2)]), 200).await;
    assert_eq!(counts(&answer), (0, 1, 0, 0));
}

#[sqlx::test]
async fn deleted_messages_leave_the_session_window_and_search(pool: PgPool) {
    let app = TestApp::with_config(pool.clone(), |c| c.conversations.window_messages = 2).await;
    let token = app.token("t1", "alice");
    let messages = vec![
        msg("1", "first words", "user", 1),
        msg("2", "a secret password hunter2", "ai", 2),
        msg("3", "third words", "user", 3),
    ];
    expect(app.post(ARCHIVE, &token).json(&batch("s", messages)), 200).await;
    let ctx = json!({"session_id": "s"});
    let context = expect(app.post("/api/chat/context", &token).json(&ctx), 200).await;
    assert_eq!(
        window_texts(&context),
        ["a secret password hunter2", "third words"]
    );

    // Only the id is needed; a deletion of a message not stored changes nothing.
    let answer = expect(
        app.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![
                json!({"id": "2", "deleted": true}),
                json!({"id": "never", "deleted": true}),
            ],
        )),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 0, 1, 1));
    assert_eq!(
        stored(&app, &token, "s").await,
        [
            ("1".into(), "first words".into()),
            ("3".into(), "third words".into())
        ]
    );
    // The full cached window lost a message: the one before it moves in.
    let context = expect(app.post("/api/chat/context", &token).json(&ctx), 200).await;
    assert_eq!(window_texts(&context), ["first words", "third words"]);
    let found = expect(
        app.post("/api/chat/search", &token)
            .json(&json!({"query": "hunter2 password"})),
        200,
    )
    .await;
    assert!(message_ids(&found).is_empty(), "{found}");

    // A deletion needs no text, but a message does; both at once for one id is refused.
    let problem = expect_problem(
        app.post(ARCHIVE, &token)
            .json(&batch("s", vec![json!({"id": "4", "sender": "user"})])),
        422,
    )
    .await;
    assert_eq!(problem["field"], "messages_batch[0].text");
    let problem = expect_problem(
        app.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![
                msg("1", "first words", "user", 1),
                json!({"id": "1", "deleted": true}),
            ],
        )),
        422,
    )
    .await;
    assert_eq!(problem["field"], "messages_batch[1].id");
    assert_eq!(stored(&app, &token, "s").await.len(), 2);
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

async fn vectors_of(pool: &PgPool, message: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM message_vectors WHERE message_id = $1")
        .bind(message)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn queued(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT DISTINCT message_id FROM embedding_outbox WHERE kind = 'message' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// With an embedder: an update queues the message (and the one after it, whose context vector
/// read the old text), the indexer replaces its vectors, and a deletion takes them along.
#[sqlx::test]
async fn updates_replace_vectors_and_deletions_drop_them(pool: PgPool) {
    let embedder = Embedder::hashing(64);
    indexer::prepare_schema(&mnemo::db::Db::new(pool.clone()), &embedder)
        .await
        .unwrap();
    let app = TestApp::with_embedder(pool.clone(), embedder).await;
    let token = app.token("t1", "alice");
    let first = vec![
        msg("1", "we talked about gardening", "user", 1),
        msg("2", "tomatoes need", "ai", 2),
        msg("3", "and what about roses", "user", 3),
    ];
    expect(app.post(ARCHIVE, &token).json(&batch("s", first)), 200).await;
    drain(&app).await;
    // Each message alone, and the later two with their context as well.
    assert_eq!(
        (
            vectors_of(&pool, "1").await,
            vectors_of(&pool, "2").await,
            vectors_of(&pool, "3").await
        ),
        (1, 2, 2)
    );
    let old: Vec<f32> = sqlx::query_scalar::<_, pgvector::Vector>(
        "SELECT embedding FROM message_vectors WHERE message_id = '2' AND NOT with_context",
    )
    .fetch_one(&pool)
    .await
    .unwrap()
    .to_vec();

    let answer = expect(
        app.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![msg(
                "2",
                "tomatoes need sun, deep watering and a sturdy cane",
                "ai",
                2,
            )],
        )),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 1, 0, 0));
    assert_eq!(queued(&pool).await, ["2", "3"]);
    drain(&app).await;
    let new: Vec<f32> = sqlx::query_scalar::<_, pgvector::Vector>(
        "SELECT embedding FROM message_vectors WHERE message_id = '2' AND NOT with_context",
    )
    .fetch_one(&pool)
    .await
    .unwrap()
    .to_vec();
    assert_ne!(old, new, "the vector was made again from the new text");
    assert_eq!(vectors_of(&pool, "2").await, 2);
    // Semantic search sees the new text.
    let found = expect(
        app.post("/api/chat/search", &token)
            .json(&json!({"query": "sturdy cane", "mode": "semantic"})),
        200,
    )
    .await;
    assert_eq!(message_ids(&found).first().map(String::as_str), Some("2"));

    // An identical resend queues nothing.
    expect(
        app.post(ARCHIVE, &token).json(&batch(
            "s",
            vec![msg(
                "2",
                "tomatoes need sun, deep watering and a sturdy cane",
                "ai",
                2,
            )],
        )),
        200,
    )
    .await;
    assert!(queued(&pool).await.is_empty());

    let answer = expect(
        app.post(ARCHIVE, &token)
            .json(&batch("s", vec![json!({"id": "2", "deleted": true})])),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 0, 1, 0));
    assert_eq!(vectors_of(&pool, "2").await, 0);
    assert_eq!(queued(&pool).await, ["3"]);
    drain(&app).await;
    assert_eq!(vectors_of(&pool, "3").await, 2);
}

/// Without an embedder nothing re-embeds an update: vectors of the old text are dropped (a later
/// embedder's backfill queues the message again).
#[sqlx::test]
async fn without_an_embedder_an_update_drops_stale_vectors(pool: PgPool) {
    let embedder = Embedder::hashing(64);
    indexer::prepare_schema(&mnemo::db::Db::new(pool.clone()), &embedder)
        .await
        .unwrap();
    let with = TestApp::with_embedder(pool.clone(), embedder.clone()).await;
    let token = with.token("t1", "alice");
    expect(
        with.post(ARCHIVE, &token)
            .json(&batch("s", vec![msg("1", "old words", "user", 1)])),
        200,
    )
    .await;
    drain(&with).await;
    assert_eq!(vectors_of(&pool, "1").await, 1);
    let without = TestApp::new(pool.clone()).await;
    let answer = expect(
        without
            .post(ARCHIVE, &token)
            .json(&batch("s", vec![msg("1", "new words", "user", 1)])),
        200,
    )
    .await;
    assert_eq!(counts(&answer), (0, 1, 0, 0));
    assert_eq!(vectors_of(&pool, "1").await, 0);
    assert!(queued(&pool).await.is_empty());
    assert_eq!(
        indexer::backfill(&mnemo::db::Db::new(pool.clone()), &embedder)
            .await
            .unwrap(),
        1
    );
}

#[sqlx::test]
async fn a_missing_session_id_is_made_by_the_server(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("t1", "alice");
    let answer = expect(
        app.post(ARCHIVE, &token)
            .json(&json!({"messages_batch": [msg("1", "hello", "user", 1)]})),
        200,
    )
    .await;
    let session = answer["session_id"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&session), "{session}");
    assert_eq!(counts(&answer), (1, 0, 0, 0));
    // Sent back, it appends to the same session.
    let answer = expect(
        app.post(ARCHIVE, &token)
            .json(&batch(&session, vec![msg("2", "again", "user", 2)])),
        200,
    )
    .await;
    assert_eq!(answer["session_id"], session.as_str());
    assert_eq!(stored(&app, &token, &session).await.len(), 2);
    let sessions = expect(app.get("/api/chat/sessions", &token), 200).await;
    assert_eq!(sessions["items"].as_array().unwrap().len(), 1);

    // Another request without one: another session. An explicit null is the same as absent.
    let answer = expect(
        app.post(ARCHIVE, &token)
            .json(&json!({"session_id": null, "messages_batch": [msg("1", "hello", "user", 1)]})),
        200,
    )
    .await;
    let other = answer["session_id"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&other) && other != session, "{other}");

    // The beacon answers the session it made.
    let body = json!({"access_token": token, "messages_batch": [msg("b", "bye", "user", 3)]});
    let answer = expect(
        app.client
            .post(app.url(BEACON))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(body.to_string()),
        200,
    )
    .await;
    let beaconed = answer["session_id"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&beaconed), "{answer}");
    assert_eq!(
        stored(&app, &token, &beaconed).await,
        [("b".into(), "bye".into())]
    );

    // So does the context route; the next turn with that id sees the first in its window.
    let context = expect(
        app.post("/api/chat/context", &token)
            .json(&json!({"new_messages": [msg("c1", "remember the blue door", "user", 4)]})),
        200,
    )
    .await;
    let made = context["session_id"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&made), "{context}");
    let context = expect(
        app.post("/api/chat/context", &token).json(
            &json!({"session_id": made, "new_messages": [msg("c2", "what colour?", "user", 5)]}),
        ),
        200,
    )
    .await;
    assert_eq!(
        window_texts(&context),
        ["remember the blue door", "what colour?"]
    );
    assert_eq!(
        expect(app.get("/api/chat/sessions", &token), 200).await["items"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

/// A model that asks for the tools named in `script`, one per call, then answers.
#[derive(Clone, Default)]
struct ScriptedModel {
    script: Arc<Vec<(&'static str, Value)>>,
    calls: Arc<Mutex<usize>>,
}

async fn scripted(
    State(model): State<ScriptedModel>,
    axum::Json(_body): axum::Json<Value>,
) -> axum::Json<Value> {
    let n = {
        let mut calls = model.calls.lock().unwrap();
        *calls += 1;
        *calls
    };
    match model.script.get(n - 1) {
        Some((name, arguments)) => {
            let call = json!({"id": format!("call_{n}"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}});
            axum::Json(
                json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]}),
            )
        }
        None => axum::Json(json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Done."}}]})),
    }
}

async fn app_with_model(pool: PgPool, script: Vec<(&'static str, Value)>) -> TestApp {
    let model = ScriptedModel {
        script: Arc::new(script),
        ..ScriptedModel::default()
    };
    let router = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(scripted))
        .with_state(model);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    TestApp::with_config(pool, |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("scripted".into());
    })
    .await
}

#[sqlx::test]
async fn chat_without_a_session_id_answers_the_one_it_made(pool: PgPool) {
    let app = app_with_model(pool, Vec::new()).await;
    let token = app.token("t1", "alice");
    let response = expect(
        app.post("/api/chat", &token)
            .json(&json!({"new_messages": [msg("q", "hi there", "user", 1)]})),
        200,
    )
    .await;
    let session = response["session_id"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&session), "{response}");
    assert_eq!(response["reply"]["text"], "Done.");
    let texts: Vec<String> = stored(&app, &token, &session)
        .await
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(texts, ["hi there", "Done."]);
}

/// `memory_key` for `key` in the agent tools; both at once is an error the model reads.
#[sqlx::test]
async fn agent_tools_take_memory_key_for_key(pool: PgPool) {
    let app = app_with_model(
        pool,
        vec![
            (
                "store_memory",
                json!({"memory_key": "recipe", "content": "flour\nwater\nsalt\n"}),
            ),
            (
                "retrieve_memory",
                json!({"memory_key": "recipe", "line_start": 2, "line_count": 1}),
            ),
            (
                "store_memory",
                json!({"key": "a", "memory_key": "b", "content": "x"}),
            ),
        ],
    )
    .await;
    let token = app.token("t1", "alice");
    let response = expect(
        app.post("/api/chat", &token).json(
            &json!({"session_id": "s", "new_messages": [msg("q", "keep my recipe", "user", 1)]}),
        ),
        200,
    )
    .await;
    let results: Vec<Value> = response["tool_messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"] == "tool")
        .map(|m| serde_json::from_str(m["text"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(results.len(), 3, "{response}");
    assert_eq!(results[0]["memory_key"], "recipe", "{}", results[0]);
    assert_eq!(results[1]["content"], "water\n", "{}", results[1]);
    let error = results[2]["error"].as_str().unwrap_or_default();
    assert!(error.contains("duplicate field `key`"), "{}", results[2]);
    let page = expect(app.get("/api/memories/recipe", &token), 200).await;
    assert_eq!(page["content"], "flour\nwater\nsalt\n");
    expect_problem(app.get("/api/memories/a", &token), 404).await;
    expect_problem(app.get("/api/memories/b", &token), 404).await;
}

/// `type` for `memory_type` and `content_metadata` for `metadata` on memory writes.
#[sqlx::test]
async fn memory_writes_take_type_and_content_metadata(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let stored = expect(
        app.post("/api/memories", &token).json(&json!({
            "key": "build-log", "content": "ok\n", "type": "command_output",
            "content_metadata": {"exit_code": 0}
        })),
        201,
    )
    .await;
    assert_eq!(stored["memory_type"], "command_output");
    let info = expect(
        app.get("/api/memories?memory_type=command_output", &token),
        200,
    )
    .await;
    assert_eq!(info["items"][0]["memory_key"], "build-log", "{info}");
    assert_eq!(info["items"][0]["metadata"], json!({"exit_code": 0}));
    // PUT takes them too.
    let replaced = expect(
        app.put("/api/memories/build-log", &token).json(&json!({
            "content": "failed\n", "type": "error_log", "content_metadata": {"exit_code": 2}
        })),
        200,
    )
    .await;
    assert_eq!(replaced["memory_type"], "error_log");

    // Both names at once: 422 naming the member, whichever comes first.
    for (body, field) in [
        (
            json!({"content": "x", "type": "a", "memory_type": "b"}),
            "memory_type",
        ),
        (
            json!({"content": "x", "memory_type": "a", "type": "a"}),
            "memory_type",
        ),
        (
            json!({"content": "x", "metadata": {}, "content_metadata": {}}),
            "metadata",
        ),
    ] {
        let problem = expect_problem(app.post("/api/memories", &token).json(&body), 422).await;
        assert_eq!(problem["field"], field, "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("name the same member"),
            "{problem}"
        );
        expect_problem(app.put("/api/memories/other", &token).json(&body), 422).await;
    }
    // Unknown members are still refused.
    expect_problem(
        app.post("/api/memories", &token)
            .json(&json!({"content": "x", "kind": "a"})),
        422,
    )
    .await;
    let list = expect(app.get("/api/memories", &token), 200).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

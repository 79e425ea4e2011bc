//! Task memory over HTTP.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{
    TestApp, expect, expect_problem, one_connection, rows_fetched_through_indexes,
};

const DEPLOY_PLAN: [&str; 4] = [
    "Build Docker image",
    "Push image to registry",
    "SSH into server",
    "Pull image and run container",
];

async fn register(app: &TestApp, token: &str, body: Value) -> Value {
    expect(app.post("/api/tasks", token).json(&body), 201).await
}

fn id_of(task: &Value) -> String {
    task["id"].as_str().expect("task id").to_owned()
}

fn ordinals(items: &Value) -> Vec<i64> {
    items
        .as_array()
        .expect("list")
        .iter()
        .map(|i| i["ordinal"].as_i64().expect("ordinal"))
        .collect()
}

/// After context compaction the agent asks where it was and gets an exact answer.
#[sqlx::test]
async fn where_was_i_after_context_compaction(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let task = register(
        &app,
        &token,
        json!({"name": "Deploy coursefolio", "plan": DEPLOY_PLAN,
               "original_user_task": "deploy coursefolio v1.2.3 to production"}),
    )
    .await;
    assert_eq!(task["status"], "active");
    assert_eq!(task["phase"], "PLANNING_COMPLETED");
    assert!(task["timestamps"]["plan_generated_at"].is_string());
    assert_eq!(task["plan"]["version"], 1);
    assert_eq!(ordinals(&task["plan"]["items"]), vec![1, 2, 3, 4]);
    let id = id_of(&task);

    let update = format!("/api/tasks/{id}/update");
    for (n, message) in [
        "Step 1 done — image built as v1.2.3",
        "Step 2 done — pushed to ghcr.io",
        "Step 3 done — SSH connected to server",
    ]
    .iter()
    .enumerate()
    {
        let body = expect(
            app.post(&update, &token)
                .json(&json!({"task_id": id, "message": message})),
            200,
        )
        .await;
        assert_eq!(body["message_seq"], n as i64 + 1);
        assert!(body.get("answer").is_none());
    }

    // [... context compaction happens ...]
    let body = expect(
        app.post(&update, &token)
            .json(&json!({"query": "where was I?"})),
        200,
    )
    .await;
    assert_eq!(body["source"], "digest");
    let digest = &body["digest"];
    assert_eq!(ordinals(&digest["completed"]), vec![1, 2, 3]);
    assert_eq!(digest["inferred"], json!([1, 2, 3]));
    assert_eq!(digest["next"]["ordinal"], 4);
    assert_eq!(digest["next"]["title"], "Pull image and run container");
    let details: Vec<&str> = digest["key_details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["value"].as_str().unwrap())
        .collect();
    assert!(details.contains(&"v1.2.3"), "{details:?}");
    assert!(details.contains(&"ghcr.io"), "{details:?}");
    assert_eq!(
        digest["recent_updates"].as_array().unwrap().len(),
        3,
        "{digest}"
    );
    let answer = body["answer"].as_str().unwrap();
    assert!(answer.contains("Completed steps 1-3"), "{answer}");
    assert!(
        answer.contains("Next: step 4 — Pull image and run container"),
        "{answer}"
    );
    assert!(answer.contains("inferred"), "{answer}");
    assert!(
        answer.contains("v1.2.3") && answer.contains("ghcr.io"),
        "{answer}"
    );

    // The dedicated route answers the same, and nothing was written by asking.
    let body = expect(
        app.post(&format!("/api/tasks/{id}/query"), &token)
            .json(&json!({"query": "what's next?"})),
        200,
    )
    .await;
    assert_eq!(body["source"], "digest");
    assert_eq!(body["digest"]["next"]["ordinal"], 4);
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["counts"]["messages"], 3);
    // Explicit item status is untouched: the inference lives in the digest only.
    assert_eq!(task["counts"]["pending"], 4);

    // Finishing through task_update completes the phase too.
    let body = expect(
        app.post(&update, &token)
            .json(&json!({"message": "Step 4 done — container running", "status": "completed"})),
        200,
    )
    .await;
    assert_eq!(body["status"], "completed");
    assert_eq!(body["phase"], "COMPLETED_SUCCESS");
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert!(task["timestamps"]["completed_at"].is_string());
}

#[sqlx::test]
async fn replan_keeps_versions_and_rebases_item_status(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let task = register(
        &app,
        &token,
        json!({"name": "Deploy", "plan": ["Build image", "Push image", "Restart service"]}),
    )
    .await;
    let id = id_of(&task);
    let item = expect(
        app.patch(&format!("/api/tasks/{id}/items/1"), &token)
            .json(&json!({"status": "active"})),
        200,
    )
    .await;
    assert!(item["started_at"].is_string());
    let item = expect(
        app.patch(&format!("/api/tasks/{id}/items/1"), &token)
            .json(&json!({"status": "completed"})),
        200,
    )
    .await;
    assert_eq!(item["status"], "completed");
    assert!(item["completed_at"].is_string());
    assert!(item["duration_seconds"].as_f64().unwrap() >= 0.0);
    expect(
        app.patch(&format!("/api/tasks/{id}/items/2"), &token)
            .json(&json!({"status": "active"})),
        200,
    )
    .await;
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(
        task["phase"], "EXECUTING_PLAN",
        "starting a step starts execution"
    );
    assert!(task["timestamps"]["execution_started_at"].is_string());

    // Mid-way the agent replans in the stage form.
    let plan = expect(
        app.put(&format!("/api/tasks/{id}/plan"), &token).json(&json!({
            "reason": "the service moved to Kubernetes",
            "plan": [
                {"stage": 1, "steps": [
                    {"stepDescription": "Build image", "toolName": "docker"},
                    {"stepDescription": "push image", "toolName": "docker"}]},
                {"stage": 2, "steps": [
                    {"stepDescription": "Apply manifests", "toolName": "kubectl",
                     "sub_task_input": {"file": "k8s/deploy.yaml"}, "narrative_step": "roll out"},
                    {"stepDescription": "Check rollout", "toolName": "kubectl"}]}
            ]
        })),
        200,
    )
    .await;
    assert_eq!(plan["version"], 2);
    assert_eq!(plan["reason"], "the service moved to Kubernetes");
    let items = plan["items"].as_array().unwrap();
    let states: Vec<(&str, Value)> = items
        .iter()
        .map(|i| (i["status"].as_str().unwrap(), i["rebased_from"].clone()))
        .collect();
    assert_eq!(
        states,
        vec![
            ("completed", json!(1)),
            ("active", json!(2)),
            ("pending", Value::Null),
            ("pending", Value::Null)
        ]
    );
    assert_eq!(items[0]["completed_at"], item["completed_at"]);
    assert_eq!(items[2]["stage"], 2);
    assert_eq!(items[2]["tool"], "kubectl");
    assert_eq!(items[2]["input"], json!({"file": "k8s/deploy.yaml"}));

    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["phase"], "EXECUTING_REPLAN");
    assert_eq!(task["plan_version"], 2);
    assert_eq!(task["counts"]["plan_versions"], 2);
    assert_eq!(task["counts"]["completed"], 1);
    assert_eq!(task["plan"]["items"][3]["title"], "Check rollout");

    // Both versions are kept; v1 still shows how its items stood.
    let versions = expect(app.get(&format!("/api/tasks/{id}/plans"), &token), 200).await;
    let versions = versions["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["active"], false);
    assert_eq!(versions[0]["steps"], 3);
    assert_eq!(versions[1]["active"], true);
    let v1 = expect(app.get(&format!("/api/tasks/{id}/plans/1"), &token), 200).await;
    assert_eq!(
        v1["plan"],
        json!(["Build image", "Push image", "Restart service"])
    );
    let v1_states: Vec<&str> = v1["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["status"].as_str().unwrap())
        .collect();
    assert_eq!(v1_states, vec!["completed", "active", "pending"]);
    expect_problem(app.get(&format!("/api/tasks/{id}/plans/3"), &token), 404).await;

    // The replan is part of the history, and the digest follows the active version.
    let messages = expect(app.get(&format!("/api/tasks/{id}/messages"), &token), 200).await;
    let contents: Vec<&str> = messages["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        contents
            .iter()
            .any(|c| c.contains("plan v2 (replan)") && c.contains("Kubernetes")),
        "{contents:?}"
    );
    let body = expect(
        app.post(&format!("/api/tasks/{id}/query"), &token)
            .json(&json!({"query": "where was I?"})),
        200,
    )
    .await;
    assert_eq!(body["digest"]["current"]["title"], "push image");
    assert_eq!(body["digest"]["next"]["title"], "Apply manifests");
}

#[sqlx::test]
async fn phases_set_timestamps_and_illegal_transitions_are_409(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let task = register(&app, &token, json!({"name": "Research"})).await;
    assert_eq!(task["phase"], "RECEIVED");
    assert!(task["plan"].is_null());
    let id = id_of(&task);
    let path = format!("/api/tasks/{id}");

    let body = expect_problem(
        app.patch(&path, &token)
            .json(&json!({"phase": "COMPLETED_SUCCESS"})),
        409,
    )
    .await;
    assert_eq!(body["current"], "RECEIVED");
    assert_eq!(
        body["allowed"],
        json!([
            "PLANNING",
            "PLANNING_COMPLETED",
            "EXECUTING_PLAN",
            "FAILED_PLANNING"
        ])
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("allowed: PLANNING"),
        "{body}"
    );

    let mut seen = Vec::new();
    for phase in [
        "PLANNING",
        "PLANNING_COMPLETED",
        "EXECUTING_PLAN",
        "SYNTHESIZING_ANSWER",
    ] {
        let task = expect(app.patch(&path, &token).json(&json!({"phase": phase})), 200).await;
        assert_eq!(task["phase"], phase);
        assert_eq!(task["status"], "active");
        seen.push(task);
    }
    assert!(seen[0]["timestamps"]["plan_generated_at"].is_null());
    assert!(seen[1]["timestamps"]["plan_generated_at"].is_string());
    assert!(seen[1]["timestamps"]["execution_started_at"].is_null());
    assert!(seen[2]["timestamps"]["execution_started_at"].is_string());
    assert!(seen[3]["timestamps"]["synthesis_started_at"].is_string());
    assert!(seen[3]["timestamps"]["completed_at"].is_null());
    assert!(
        seen[3]["timestamps"]["last_updated_at"].as_str()
            >= seen[0]["timestamps"]["last_updated_at"].as_str()
    );

    let done = expect(
        app.patch(&path, &token)
            .json(&json!({"phase": "COMPLETED_SUCCESS", "final_answer": "Three sources agree."})),
        200,
    )
    .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["final_answer"], "Three sources agree.");
    assert!(done["timestamps"]["completed_at"].is_string());

    // Final states stay final, whichever field asks.
    let body = expect_problem(
        app.patch(&path, &token).json(&json!({"phase": "PLANNING"})),
        409,
    )
    .await;
    assert_eq!(body["allowed"], json!([]));
    let body = expect_problem(
        app.post(&format!("{path}/update"), &token)
            .json(&json!({"status": "active"})),
        409,
    )
    .await;
    assert_eq!(body["field"], "status");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("completed is final")
    );
    expect_problem(
        app.put(&format!("{path}/plan"), &token)
            .json(&json!({"plan": ["again"]})),
        409,
    )
    .await;

    // Pause and resume follow the status machine; a bad value is 422 naming the field.
    let other = id_of(&register(&app, &token, json!({"name": "Other"})).await);
    let update = format!("/api/tasks/{other}/update");
    let body = expect(
        app.post(&update, &token).json(&json!({"status": "paused"})),
        200,
    )
    .await;
    assert_eq!(body["status"], "paused");
    let body = expect(
        app.post(&update, &token).json(&json!({"status": "active"})),
        200,
    )
    .await;
    assert_eq!(body["status"], "active");
    let body = expect_problem(
        app.post(&update, &token).json(&json!({"status": "done"})),
        422,
    )
    .await;
    assert_eq!(body["field"], "status");
    let body = expect_problem(app.post(&update, &token).json(&json!({})), 422).await;
    assert!(body["detail"].as_str().unwrap().contains("at least one"));

    // The lifecycle is recorded in the history.
    let messages = expect(
        app.get(&format!("/api/tasks/{other}/messages"), &token),
        200,
    )
    .await;
    let notes: Vec<&str> = messages["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["msg_type"] == "lifecycle")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        vec!["status: active → paused", "status: paused → active"]
    );
}

#[sqlx::test]
async fn failed_task_carries_its_error_summary(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");

    // Explicitly, in the shape.
    let id = id_of(&register(&app, &token, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await);
    expect(
        app.patch(&format!("/api/tasks/{id}"), &token)
            .json(&json!({"phase": "EXECUTING_PLAN"})),
        200,
    )
    .await;
    let task = expect(
        app.patch(&format!("/api/tasks/{id}"), &token).json(&json!({
            "phase": "FAILED_EXECUTION",
            "error_summary": {"failedAtStage": 2, "failedStepNarrative": "Push image to registry",
                              "errorMessage": "denied: permission_denied"}
        })),
        200,
    )
    .await;
    assert_eq!(task["status"], "failed");
    assert_eq!(task["phase"], "FAILED_EXECUTION");
    assert!(task["timestamps"]["completed_at"].is_string());
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(
        task["error_summary"],
        json!({"failedAtStage": 2, "failedStepNarrative": "Push image to registry",
               "errorMessage": "denied: permission_denied"})
    );
    let failed = expect(app.get("/api/tasks?status=failed", &token), 200).await;
    assert_eq!(failed["items"].as_array().unwrap().len(), 1);

    // Through task_update: the summary is taken from the failing step and the message.
    let id = id_of(
        &register(
            &app,
            &token,
            json!({"name": "Deploy 2", "plan": DEPLOY_PLAN}),
        )
        .await,
    );
    expect(
        app.patch(&format!("/api/tasks/{id}/items/3"), &token)
            .json(&json!({"status": "active"})),
        200,
    )
    .await;
    let body = expect(
        app.post(&format!("/api/tasks/{id}/update"), &token)
            .json(&json!({"status": "failed", "message": "ssh: connection refused on port 22"})),
        200,
    )
    .await;
    assert_eq!(body["status"], "failed");
    assert_eq!(body["phase"], "FAILED_EXECUTION");
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(
        task["error_summary"],
        json!({"failedAtStage": 3, "failedStepNarrative": "SSH into server",
               "errorMessage": "ssh: connection refused on port 22"})
    );
    let body = expect(
        app.post(&format!("/api/tasks/{id}/query"), &token)
            .json(&json!({"query": "what happened?"})),
        200,
    )
    .await;
    assert!(
        body["answer"]
            .as_str()
            .unwrap()
            .contains("is failed (FAILED_EXECUTION)")
    );
    assert!(
        body["digest"]["key_details"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "port" && d["value"] == "22")
    );
}

#[sqlx::test]
async fn another_user_or_tenant_gets_404(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("acme", "alice");
    let task = register(
        &app,
        &alice,
        json!({"name": "Secret", "plan": ["one", "two"]}),
    )
    .await;
    let id = id_of(&task);
    let action = expect(
        app.post(&format!("/api/tasks/{id}/items/1/actions"), &alice)
            .json(&json!({"action_type": "cli", "summary": "ls"})),
        201,
    )
    .await;
    let action_id = action["id"].as_str().unwrap();

    for intruder in [app.token("acme", "bob"), app.token("evil", "alice")] {
        let base = format!("/api/tasks/{id}");
        let requests = vec![
            app.get(&base, &intruder),
            app.patch(&base, &intruder).json(&json!({"name": "mine"})),
            app.post(&format!("{base}/update"), &intruder)
                .json(&json!({"message": "hi"})),
            app.post(&format!("{base}/update"), &intruder)
                .json(&json!({"query": "where?"})),
            app.post(&format!("{base}/query"), &intruder)
                .json(&json!({"query": "where?"})),
            app.put(&format!("{base}/plan"), &intruder)
                .json(&json!({"plan": ["x"]})),
            app.get(&format!("{base}/plans"), &intruder),
            app.get(&format!("{base}/plans/1"), &intruder),
            app.patch(&format!("{base}/items/1"), &intruder)
                .json(&json!({"status": "completed"})),
            app.get(&format!("{base}/items/1/actions"), &intruder),
            app.post(&format!("{base}/items/1/actions"), &intruder)
                .json(&json!({"action_type": "cli", "summary": "rm"})),
            app.post(&format!("{base}/actions/{action_id}/logs"), &intruder)
                .json(&json!({"log_type": "stdout", "content": "x"})),
            app.get(&format!("{base}/actions/{action_id}/logs"), &intruder),
            app.post(&format!("{base}/events"), &intruder)
                .json(&json!({"events": [{"step_narrative": "x", "status": "COMPLETED"}]})),
            app.get(&format!("{base}/events"), &intruder),
            app.get(&format!("{base}/messages"), &intruder),
            app.post(&format!("{base}/snapshots"), &intruder)
                .json(&json!({"label": "x", "content": "y"})),
            app.get(&format!("{base}/snapshots"), &intruder),
        ];
        for request in requests {
            let body = expect_problem(request, 404).await;
            assert!(
                body["detail"].as_str().unwrap().contains("no task"),
                "{body}"
            );
        }
        let list = expect(app.get("/api/tasks", &intruder), 200).await;
        assert_eq!(list["items"], json!([]));
    }
    // Nothing the intruders tried changed alice's task.
    let task = expect(app.get(&format!("/api/tasks/{id}"), &alice), 200).await;
    assert_eq!(task["name"], "Secret");
    assert_eq!(task["counts"]["messages"], 0);
    assert_eq!(task["counts"]["events"], 0);
    assert_eq!(task["counts"]["completed"], 0);
}

/// Concurrent batches to one task: every batch lands contiguous and in its own order, sequence
/// numbers are gap-free, and each client's batches keep the order it sent them in.
#[sqlx::test]
async fn events_stay_ordered_under_concurrent_appends(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Busy"})).await);
    const CLIENTS: usize = 8;
    const BATCHES: usize = 5;
    const PER_BATCH: usize = 10;

    let mut handles = Vec::new();
    for client in 0..CLIENTS {
        let http = app.client.clone();
        let url = app.url(&format!("/api/tasks/{id}/events"));
        let token = token.clone();
        handles.push(tokio::spawn(async move {
            let mut landed = Vec::new();
            for batch in 0..BATCHES {
                let events: Vec<Value> = (0..PER_BATCH)
                    .map(|i| {
                        json!({"stage": client, "sub_task_id": format!("c{client}"),
                               "step_narrative": format!("c{client} b{batch} e{i}"),
                               "tool_name": "bench", "status": "COMPLETED",
                               "result_data": {"i": i}, "duration_ms": i})
                    })
                    .collect();
                let response = http
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&json!({"events": events}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 201);
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["count"], PER_BATCH);
                let first = body["first_seq"].as_i64().unwrap();
                assert_eq!(
                    body["last_seq"].as_i64().unwrap(),
                    first + PER_BATCH as i64 - 1
                );
                landed.push(first);
            }
            landed
        }));
    }
    let mut firsts = Vec::new();
    for handle in handles {
        let landed = handle.await.unwrap();
        assert!(
            landed.windows(2).all(|w| w[0] < w[1]),
            "client order: {landed:?}"
        );
        firsts.extend(landed);
    }
    firsts.sort_unstable();
    let expected: Vec<i64> = (0..CLIENTS * BATCHES)
        .map(|b| (b * PER_BATCH) as i64 + 1)
        .collect();
    assert_eq!(firsts, expected, "batches tile the log without overlap");

    // Read it all back through the cursor.
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/tasks/{id}/events?limit=150&cursor={c}"),
            None => format!("/api/tasks/{id}/events?limit=150"),
        };
        let page = expect(app.get(&path, &token), 200).await;
        events.extend(page["items"].as_array().unwrap().clone());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let total = CLIENTS * BATCHES * PER_BATCH;
    assert_eq!(events.len(), total);
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=total as i64).collect::<Vec<_>>());
    for chunk in events.chunks(PER_BATCH) {
        let first = chunk[0]["step_narrative"].as_str().unwrap();
        let prefix = first.rsplit_once(' ').unwrap().0;
        for (i, event) in chunk.iter().enumerate() {
            assert_eq!(event["step_narrative"], format!("{prefix} e{i}"));
        }
    }
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["counts"]["events"], total);

    // Filters.
    let page = expect(
        app.get(
            &format!("/api/tasks/{id}/events?sub_task_id=c3&limit=500"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), BATCHES * PER_BATCH);
    assert!(page["next_cursor"].is_null());
    assert_eq!(page["items"][0]["stage"], 3);
    assert_eq!(page["items"][0]["tool_name"], "bench");
    let page = expect(
        app.get(&format!("/api/tasks/{id}/events?status=FAILED"), &token),
        200,
    )
    .await;
    assert_eq!(page["items"], json!([]));
}

#[sqlx::test]
async fn events_keep_the_execution_log_shape(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Shape"})).await);
    let body = expect(
        app.post(&format!("/api/tasks/{id}/events"), &token).json(&json!({"events": [
            {"timestamp": "2026-01-02T03:04:05Z", "stage": "System", "step_narrative": "summarized context",
             "tool_name": "System", "status": "SYSTEM_ACTION"},
            {"stage": 1, "sub_task_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "step_narrative": "search",
             "tool_name": "web", "status": "FAILED", "input_payload": {"q": "rust"},
             "error_info": {"message": "timeout", "details": {"after_ms": 3000}}, "duration_ms": 3001}
        ]})),
        201,
    )
    .await;
    assert_eq!(body, json!({"count": 2, "first_seq": 1, "last_seq": 2}));
    let page = expect(app.get(&format!("/api/tasks/{id}/events"), &token), 200).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items[0]["timestamp"], "2026-01-02T03:04:05Z");
    assert_eq!(items[0]["stage"], "System");
    assert_eq!(
        items[1]["error_info"],
        json!({"message": "timeout", "details": {"after_ms": 3000}})
    );
    assert_eq!(items[1]["input_payload"], json!({"q": "rust"}));
    assert_eq!(items[1]["duration_ms"], 3001);

    // Bad events name their path; nothing of a rejected batch is written.
    let cases = [
        (json!({"events": []}), "events"),
        (
            json!({"events": [{"step_narrative": "x", "status": "DONE"}]}),
            "events[0].status",
        ),
        (
            json!({"events": [{"step_narrative": "x", "status": "COMPLETED"}, {"status": "COMPLETED"}]}),
            "events[1]",
        ),
        (
            json!({"events": [{"step_narrative": "x", "status": "COMPLETED", "stage": [1]}]}),
            "events[0].stage",
        ),
        (
            json!({"events": [{"step_narrative": " ", "status": "COMPLETED"}]}),
            "events[0].step_narrative",
        ),
    ];
    for (body, field) in cases {
        let problem = expect_problem(
            app.post(&format!("/api/tasks/{id}/events"), &token)
                .json(&body),
            422,
        )
        .await;
        assert_eq!(problem["field"], field, "{problem}");
    }
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["counts"]["events"], 2);
    expect_problem(
        app.get(&format!("/api/tasks/{id}/events?cursor=nonsense!"), &token),
        422,
    )
    .await;
    let body = expect_problem(
        app.get(&format!("/api/tasks/{id}/events?limit=0"), &token),
        422,
    )
    .await;
    assert_eq!(body["field"], "limit");
}

#[sqlx::test]
async fn unknown_ordinal_is_404(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await);
    for ordinal in [0, 5, 99, -1] {
        let body = expect_problem(
            app.patch(&format!("/api/tasks/{id}/items/{ordinal}"), &token)
                .json(&json!({"status": "completed"})),
            404,
        )
        .await;
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("has no step {ordinal}")),
            "{body}"
        );
        expect_problem(
            app.post(&format!("/api/tasks/{id}/items/{ordinal}/actions"), &token)
                .json(&json!({"action_type": "cli", "summary": "x"})),
            404,
        )
        .await;
        expect_problem(
            app.get(&format!("/api/tasks/{id}/items/{ordinal}/actions"), &token),
            404,
        )
        .await;
    }
    let planless = id_of(&register(&app, &token, json!({"name": "No plan"})).await);
    let body = expect_problem(
        app.patch(&format!("/api/tasks/{planless}/items/1"), &token)
            .json(&json!({"status": "active"})),
        404,
    )
    .await;
    assert!(body["detail"].as_str().unwrap().contains("no plan yet"));
    let body = expect_problem(
        app.patch(&format!("/api/tasks/{id}/items/1"), &token)
            .json(&json!({"status": "finished"})),
        422,
    )
    .await;
    assert_eq!(body["field"], "status");
}

#[sqlx::test]
async fn malformed_plan_is_422_with_its_path(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let bad = json!([
        {"stage": 1, "steps": [{"stepDescription": "Search", "toolName": "web"}]},
        {"stage": 2, "steps": [{"stepDescription": "Write", "toolName": 42}]}
    ]);
    let body = expect_problem(
        app.post("/api/tasks", &token)
            .json(&json!({"name": "Research", "plan": bad})),
        422,
    )
    .await;
    assert_eq!(body["field"], "plan[1].steps[0].toolName");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("plan[1].steps[0].toolName")
    );
    let list = expect(app.get("/api/tasks", &token), 200).await;
    assert_eq!(list["items"], json!([]), "nothing was created");

    let id = id_of(&register(&app, &token, json!({"name": "Research", "plan": ["a"]})).await);
    for (plan, field) in [
        (bad.clone(), "plan[1].steps[0].toolName"),
        (json!("one step"), "plan"),
        (json!([]), "plan"),
        (
            json!(["a", {"stage": 1, "steps": [{"toolName": "x"}]}]),
            "plan[1].steps[0].stepDescription",
        ),
        (json!(["a", null]), "plan[1]"),
    ] {
        let body = expect_problem(
            app.put(&format!("/api/tasks/{id}/plan"), &token)
                .json(&json!({"plan": plan})),
            422,
        )
        .await;
        assert_eq!(body["field"], field, "{body}");
    }
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["plan_version"], 1, "rejected plans add no version");

    let body = expect_problem(
        app.post("/api/tasks", &token).json(&json!({"name": "  "})),
        422,
    )
    .await;
    assert_eq!(body["field"], "name");
    let body = expect_problem(
        app.post("/api/tasks", &token)
            .json(&json!({"name": "x", "metadata": [1]})),
        422,
    )
    .await;
    assert_eq!(body["field"], "metadata");
}

#[sqlx::test]
async fn oversized_payloads_are_413(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.max_body_bytes = 16 * 1024;
        c.tasks.max_batch_events = 3;
    })
    .await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Big"})).await);
    let big = "x".repeat(20 * 1024);
    for request in [
        app.post(&format!("/api/tasks/{id}/events"), &token)
            .json(&json!({"events": [{"step_narrative": big, "status": "COMPLETED"}]})),
        app.post(&format!("/api/tasks/{id}/update"), &token)
            .json(&json!({"message": big})),
        app.post(&format!("/api/tasks/{id}/snapshots"), &token)
            .json(&json!({"label": "initial", "content": big})),
        app.post("/api/tasks", &token)
            .json(&json!({"name": "x", "plan": [big]})),
    ] {
        let body = expect_problem(request, 413).await;
        assert_eq!(body["limit_bytes"], 16 * 1024, "{body}");
    }
    let events: Vec<Value> = (0..4)
        .map(|i| json!({"step_narrative": format!("e{i}"), "status": "COMPLETED"}))
        .collect();
    let body = expect_problem(
        app.post(&format!("/api/tasks/{id}/events"), &token)
            .json(&json!({"events": events})),
        422,
    )
    .await;
    assert_eq!(body["field"], "events");
    assert_eq!(body["limit"], 3);
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert_eq!(task["counts"]["events"], 0);
    assert_eq!(task["counts"]["messages"], 0);
}

#[sqlx::test]
async fn list_filters_and_pages(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(id_of(
            &register(&app, &token, json!({"name": format!("task {n}")})).await,
        ));
    }
    expect(
        app.post(&format!("/api/tasks/{}/update", ids[1]), &token)
            .json(&json!({"status": "paused"})),
        200,
    )
    .await;
    expect(
        app.patch(&format!("/api/tasks/{}", ids[3]), &token)
            .json(&json!({"phase": "PLANNING"})),
        200,
    )
    .await;

    let mut names = Vec::new();
    let mut path = "/api/tasks?limit=2".to_owned();
    loop {
        let page = expect(app.get(&path, &token), 200).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        names.extend(items.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/api/tasks?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(
        names,
        vec!["task 4", "task 3", "task 2", "task 1", "task 0"]
    );

    let paused = expect(app.get("/api/tasks?status=paused", &token), 200).await;
    assert_eq!(paused["items"].as_array().unwrap().len(), 1);
    assert_eq!(paused["items"][0]["id"], ids[1].as_str());
    let planning = expect(app.get("/api/tasks?phase=PLANNING", &token), 200).await;
    assert_eq!(planning["items"][0]["id"], ids[3].as_str());
    let active = expect(
        app.get("/api/tasks?status=active&phase=RECEIVED", &token),
        200,
    )
    .await;
    assert_eq!(active["items"].as_array().unwrap().len(), 3);

    let body = expect_problem(app.get("/api/tasks?status=sleeping", &token), 422).await;
    assert_eq!(body["field"], "status");
    let body = expect_problem(app.get("/api/tasks?limit=1000", &token), 422).await;
    assert_eq!(body["field"], "limit");
    let body = expect_problem(app.get("/api/tasks?cursor=abc", &token), 422).await;
    assert_eq!(body["field"], "cursor");
}

#[sqlx::test]
async fn actions_logs_snapshots_and_metadata(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("acme", "agent");
    let task = register(
        &app,
        &token,
        json!({"name": "GUI task", "plan": ["Open browser", "Fill form"],
               "metadata": {"display": ":100", "display_num": 100}}),
    )
    .await;
    assert_eq!(
        task["metadata"],
        json!({"display": ":100", "display_num": 100})
    );
    let id = id_of(&task);

    let action = expect(
        app.post(&format!("/api/tasks/{id}/items/2/actions"), &token)
            .json(&json!({
                "action_type": "gui", "summary": "click submit", "status": "started",
                "input_data": {"x": 10, "y": 20}
            })),
        201,
    )
    .await;
    assert_eq!(action["ordinal"], 2);
    assert_eq!(action["plan_version"], 1);
    assert_eq!(action["status"], "started");
    let action_id = action["id"].as_str().unwrap().to_owned();
    let patched = expect(
        app.patch(&format!("/api/tasks/{id}/actions/{action_id}"), &token)
            .json(&json!({"status": "completed", "output_data": {"ok": true}})),
        200,
    )
    .await;
    assert_eq!(patched["status"], "completed");
    assert_eq!(patched["output_data"], json!({"ok": true}));
    assert_eq!(patched["input_data"], json!({"x": 10, "y": 20}));
    expect(
        app.post(&format!("/api/tasks/{id}/items/2/actions"), &token)
            .json(&json!({"action_type": "vision", "summary": "read screen"})),
        201,
    )
    .await;
    let body = expect_problem(
        app.post(&format!("/api/tasks/{id}/items/2/actions"), &token)
            .json(&json!({"action_type": "telepathy", "summary": "x"})),
        422,
    )
    .await;
    assert_eq!(body["field"], "action_type");

    for n in 0..3 {
        expect(
            app.post(&format!("/api/tasks/{id}/actions/{action_id}/logs"), &token)
                .json(&json!({"log_type": "stdout", "content": format!("line {n}")})),
            201,
        )
        .await;
    }
    let page = expect(
        app.get(
            &format!("/api/tasks/{id}/actions/{action_id}/logs?limit=2"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = expect(
        app.get(
            &format!("/api/tasks/{id}/actions/{action_id}/logs?limit=2&cursor={cursor}"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(rest["items"][0]["content"], "line 2");
    assert!(rest["next_cursor"].is_null());
    let actions = expect(
        app.get(&format!("/api/tasks/{id}/items/2/actions"), &token),
        200,
    )
    .await;
    let summaries: Vec<&str> = actions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["summary"].as_str().unwrap())
        .collect();
    assert_eq!(summaries, vec!["click submit", "read screen"]);
    let missing = uuid::Uuid::now_v7();
    expect_problem(
        app.post(&format!("/api/tasks/{id}/actions/{missing}/logs"), &token)
            .json(&json!({"log_type": "stdout", "content": "x"})),
        404,
    )
    .await;

    for (label, summarized) in [("initial_context", false), ("after_summarization", true)] {
        let snapshot = expect(
            app.post(&format!("/api/tasks/{id}/snapshots"), &token)
                .json(&json!({"label": label, "content": format!("ctx {label}"),
                              "is_summarized": summarized})),
            201,
        )
        .await;
        assert_eq!(snapshot["label"], label);
    }
    let snapshots = expect(app.get(&format!("/api/tasks/{id}/snapshots"), &token), 200).await;
    let got: Vec<(i64, &str, bool)> = snapshots["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["seq"].as_i64().unwrap(),
                s["label"].as_str().unwrap(),
                s["is_summarized"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "initial_context", false),
            (2, "after_summarization", true)
        ]
    );

    let message = expect(
        app.post(&format!("/api/tasks/{id}/messages"), &token)
            .json(&json!({"role": "system", "msg_type": "wait", "content": "[Wait resolved] page loaded → ok"})),
        201,
    )
    .await;
    assert_eq!(message["seq"], 1);
    assert!(message["created_at"].is_string());
    expect(
        app.post(&format!("/api/tasks/{id}/messages"), &token)
            .json(&json!({"content": "note to self"})),
        201,
    )
    .await;
    let body = expect_problem(
        app.post(&format!("/api/tasks/{id}/messages"), &token)
            .json(&json!({"role": "robot", "content": "x"})),
        422,
    )
    .await;
    assert_eq!(body["field"], "role");
    let messages = expect(
        app.get(&format!("/api/tasks/{id}/messages?limit=1"), &token),
        200,
    )
    .await;
    assert_eq!(messages["items"][0]["msg_type"], "wait");
    assert_eq!(messages["items"][0]["role"], "system");
    let cursor = messages["next_cursor"].as_str().unwrap();
    let rest = expect(
        app.get(
            &format!("/api/tasks/{id}/messages?limit=1&cursor={cursor}"),
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(rest["items"][0]["role"], "agent");
    assert_eq!(rest["items"][0]["msg_type"], "text");
    assert!(rest["next_cursor"].is_null());

    let task = expect(
        app.patch(&format!("/api/tasks/{id}"), &token)
            .json(&json!({"metadata": {"display": null, "last_wait_state": "watching"}})),
        200,
    )
    .await;
    assert_eq!(
        task["metadata"],
        json!({"display_num": 100, "last_wait_state": "watching"})
    );
    assert_eq!(task["counts"]["snapshots"], 2);
}

/// Every few messages the running summary is refreshed in the background, off the write path.
#[sqlx::test]
async fn running_summary_refreshes_in_the_background(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| c.tasks.summary_every = 3).await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await);
    let update = format!("/api/tasks/{id}/update");
    for message in ["Step 1 done — built v2.0.0", "Step 2 done"] {
        expect(
            app.post(&update, &token).json(&json!({"message": message})),
            200,
        )
        .await;
    }
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert!(
        task["running_summary"].is_null(),
        "two messages are not enough"
    );
    expect(
        app.post(&update, &token)
            .json(&json!({"message": "Step 3 done — on host deploy.example.com"})),
        200,
    )
    .await;

    // The refresh runs after the response; wait for the background work to finish.
    app.state.settle().await;
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert!(
        !task["running_summary"].is_null(),
        "summary refreshed: {task}"
    );
    assert_eq!(task["summary_message_count"], 3);
    let summary = task["running_summary"].as_str().unwrap();
    assert!(summary.contains("Completed steps 1-3"), "{summary}");
    assert!(summary.contains("Next: step 4"), "{summary}");
    assert!(
        summary.contains("v2.0.0") && summary.contains("deploy.example.com"),
        "{summary}"
    );
    assert!(task["summary_updated_at"].is_string());
}

/// A fake OpenAI-compatible endpoint: records each request; answers questions and summaries
/// differently so a test can tell which prompt it got.
#[derive(Clone, Default)]
struct FakeModel {
    requests: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    broken: bool,
}

async fn fake_completions(
    axum::extract::State(fake): axum::extract::State<FakeModel>,
    axum::Json(body): axum::Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    fake.requests.lock().unwrap().push(body.clone());
    if fake.broken {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "model exploded",
        )
            .into_response();
    }
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    let content = if user.contains("Question:") {
        "MODEL ANSWER: steps 1-3 are done; next, pull the image and run the container."
    } else {
        "MODEL SUMMARY: built v1.2.3, pushed it, connected to the server."
    };
    axum::Json(json!({"choices": [{"message": {"role": "assistant", "content": content}}]}))
        .into_response()
}

async fn start_fake(fake: FakeModel) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(fake_completions),
        )
        .with_state(fake);
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/v1")
}

fn prompts(fake: &FakeModel) -> Vec<String> {
    fake.requests
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

/// With a model, the running summary is the model's (refreshed in the background) and the answer
/// is the model's, grounded on that summary plus only the messages since it.
#[sqlx::test]
async fn model_answer_is_grounded_on_the_running_summary(pool: PgPool) {
    let fake = FakeModel::default();
    let url = start_fake(fake.clone()).await;
    let app = TestApp::with_config(pool, |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("fake-model".into());
        c.tasks.summary_every = 3;
    })
    .await;
    let token = app.token("acme", "agent");
    let id = id_of(
        &register(
            &app,
            &token,
            json!({"name": "Deploy coursefolio", "plan": DEPLOY_PLAN}),
        )
        .await,
    );
    let update = format!("/api/tasks/{id}/update");
    for message in [
        "Step 1 done — image built as v1.2.3",
        "Step 2 done — pushed to ghcr.io",
        "Step 3 done — SSH connected to server",
    ] {
        expect(
            app.post(&update, &token).json(&json!({"message": message})),
            200,
        )
        .await;
    }
    app.state.settle().await;
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    assert!(
        !task["running_summary"].is_null(),
        "summary refreshed: {task}"
    );
    assert_eq!(
        task["running_summary"],
        "MODEL SUMMARY: built v1.2.3, pushed it, connected to the server."
    );
    assert_eq!(task["summary_message_count"], 3);
    let sent = prompts(&fake);
    assert_eq!(sent.len(), 1, "one summary request: {sent:?}");
    assert!(
        sent[0].contains("Previous summary:\nNo summary yet."),
        "{}",
        sent[0]
    );
    assert!(
        sent[0].contains("#3 [agent progress] Step 3 done"),
        "{}",
        sent[0]
    );
    assert_eq!(fake.requests.lock().unwrap()[0]["model"], "fake-model");

    expect(
        app.post(&update, &token)
            .json(&json!({"message": "Step 4 started — pulling the image on the server"})),
        200,
    )
    .await;
    let body = expect(
        app.post(&update, &token)
            .json(&json!({"query": "where was I?"})),
        200,
    )
    .await;
    assert_eq!(
        body["answer"],
        "MODEL ANSWER: steps 1-3 are done; next, pull the image and run the container."
    );
    assert_eq!(
        body["digest"]["next"]["ordinal"], 4,
        "the exact digest comes along"
    );
    assert_eq!(body["source"], "model");
    let sent = prompts(&fake);
    let question = sent.last().unwrap();
    assert!(
        question.contains("Summary (as of message #3):\nMODEL SUMMARY: built v1.2.3"),
        "{question}"
    );
    assert!(
        question.contains("#4 [agent progress] Step 4 started"),
        "{question}"
    );
    assert!(
        !question.contains("#1 [agent progress]"),
        "covered messages are not resent: {question}"
    );
    assert!(question.contains("Question: where was I?"), "{question}");
    let body = expect(
        app.post(&format!("/api/tasks/{id}/query"), &token)
            .json(&json!({"query": "what's next?"})),
        200,
    )
    .await;
    assert_eq!(body["source"], "model");
    assert!(body.get("model_error").is_none());
}

/// A failing model never fails the request: the digest answers and says why the model did not;
/// writes never wait for the model.
#[sqlx::test]
async fn broken_model_falls_back_to_the_digest(pool: PgPool) {
    let fake = FakeModel {
        broken: true,
        ..FakeModel::default()
    };
    let url = start_fake(fake.clone()).await;
    let app = TestApp::with_config(pool, |c| {
        c.llm.base_url = Some(url);
        c.llm.model = Some("fake-model".into());
        c.tasks.summary_every = 0;
    })
    .await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await);
    for message in ["Step 1 done — v1.2.3", "Step 2 done"] {
        expect(
            app.post(&format!("/api/tasks/{id}/update"), &token)
                .json(&json!({"message": message})),
            200,
        )
        .await;
    }
    assert!(prompts(&fake).is_empty(), "no model call on the write path");
    let body = expect(
        app.post(&format!("/api/tasks/{id}/query"), &token)
            .json(&json!({"query": "where was I?"})),
        200,
    )
    .await;
    assert_eq!(body["source"], "digest");
    assert!(
        body["model_error"].as_str().unwrap().contains("500"),
        "{body}"
    );
    assert!(
        body["answer"].as_str().unwrap().contains("Next: step 3"),
        "{body}"
    );
    assert_eq!(prompts(&fake).len(), 1);
}

async fn stuck(app: &TestApp, token: &str, id: &str, status: u16) -> Value {
    expect(
        app.post(&format!("/api/tasks/{id}/messages"), token)
            .json(&json!({"content": "no progress on step 2 for 10 min", "msg_type": "stuck"})),
        status,
    )
    .await
}

async fn stuck_messages(app: &TestApp, token: &str, id: &str) -> usize {
    expect(app.get(&format!("/api/tasks/{id}/messages"), token), 200).await["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|m| m["msg_type"] == "stuck")
        .count()
}

/// A second stuck alert inside `MNEMO_TASKS_STUCK_COOLDOWN_SECS` stores nothing and says it was
/// suppressed and until when; once the cooldown has passed, the next one is stored again.
#[sqlx::test]
async fn stuck_alerts_have_a_cooldown(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("acme", "agent");
    let id = id_of(&register(&app, &token, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await);
    let first = stuck(&app, &token, &id, 201).await;
    assert_eq!(first["msg_type"], "stuck");
    let task = expect(app.get(&format!("/api/tasks/{id}"), &token), 200).await;
    let at = task["metadata"]["last_stuck_alert_at"]
        .as_f64()
        .expect("recorded");
    let created = chrono::DateTime::parse_from_rfc3339(first["created_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis() as f64
        / 1000.0;
    assert!((at - created).abs() < 0.002, "{at} vs {created}");

    let second = stuck(&app, &token, &id, 200).await;
    assert_eq!(second["suppressed"], true);
    assert_eq!(second["cooldown_seconds"], 300);
    let last =
        chrono::DateTime::parse_from_rfc3339(second["last_stuck_alert_at"].as_str().unwrap())
            .unwrap();
    let ends =
        chrono::DateTime::parse_from_rfc3339(second["cooldown_ends_at"].as_str().unwrap()).unwrap();
    assert_eq!((ends - last).num_seconds(), 300);
    assert!((last.timestamp_millis() as f64 / 1000.0 - at).abs() < 0.002);
    assert_eq!(stuck_messages(&app, &token, &id).await, 1, "nothing stored");
    // Other messages are not held back, and another task has a cooldown of its own.
    expect(
        app.post(&format!("/api/tasks/{id}/messages"), &token)
            .json(&json!({"content": "trying another mirror"})),
        201,
    )
    .await;
    let other =
        id_of(&register(&app, &token, json!({"name": "Backup", "plan": DEPLOY_PLAN})).await);
    stuck(&app, &token, &other, 201).await;

    // Past the cooldown (the last alert aged by 301 s) the next alert is stored and restarts it.
    sqlx::query(
        "UPDATE tasks SET metadata = jsonb_set(metadata, '{last_stuck_alert_at}',
             to_jsonb((metadata->>'last_stuck_alert_at')::float8 - 301))
         WHERE id = $1::uuid",
    )
    .bind(&id)
    .execute(&pool)
    .await
    .unwrap();
    let third = stuck(&app, &token, &id, 201).await;
    assert_eq!(third["msg_type"], "stuck");
    assert_eq!(stuck_messages(&app, &token, &id).await, 2);
    let fourth = stuck(&app, &token, &id, 200).await;
    assert_eq!(fourth["suppressed"], true);
    let millis = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    assert!((millis(&fourth["last_stuck_alert_at"]) - millis(&third["created_at"])).abs() <= 1);

    // A cooldown of 0 stores every alert.
    let eager = TestApp::with_config(pool, |c| c.tasks.stuck_cooldown_secs = 0).await;
    stuck(&eager, &token, &id, 201).await;
    stuck(&eager, &token, &id, 201).await;
    assert_eq!(stuck_messages(&eager, &token, &id).await, 4);
}

/// The digest of the one task in `pool` folded from every message at once, with `served`'s
/// status and phase (the plan `DEPLOY_PLAN`, every item pending).
async fn digest_of_every_message(pool: &PgPool, served: &Value) -> Value {
    use mnemo::tasks::digest::{self, Item, Message, TaskFacts};
    use mnemo::tasks::model::ItemStatus;

    let messages: Vec<(i32, String, String, String, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as(
            "SELECT seq, role, msg_type, content, created_at FROM task_messages ORDER BY seq",
        )
        .fetch_all(pool)
        .await
        .unwrap();
    let messages: Vec<Message> = messages
        .into_iter()
        .map(|(seq, role, msg_type, content, created_at)| Message {
            seq,
            role,
            msg_type,
            content,
            created_at,
        })
        .collect();
    let items: Vec<Item> = DEPLOY_PLAN
        .iter()
        .enumerate()
        .map(|(i, title)| Item {
            ordinal: i as i32 + 1,
            title: (*title).to_owned(),
            stage: None,
            status: ItemStatus::Pending,
        })
        .collect();
    let facts = TaskFacts {
        name: "Deploy coursefolio".into(),
        status: served["status"].as_str().unwrap().into(),
        phase: served["phase"].as_str().unwrap().into(),
        plan_version: 1,
    };
    serde_json::to_value(digest::build(&facts, &items, &messages, 5)).unwrap()
}

/// "Where was I?" asked of task `id`: the answer.
async fn where_was_i(app: &TestApp, token: &str, id: &str) -> Value {
    expect(
        app.post(&format!("/api/tasks/{id}/query"), token)
            .json(&json!({"query": "where was I?"})),
        200,
    )
    .await
}

/// Of the one digest state in `pool`: whether it holds its detail hashes as a list, how many
/// details it has seen, and the rows of `task_digest_seen`.
async fn seen_details(pool: &PgPool) -> (bool, i64, i64) {
    sqlx::query_as(
        "SELECT state ? 'seen', (state ->> 'details_seen')::int8,
                (SELECT count(*) FROM task_digest_seen)
         FROM task_digests",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// "Where was I?" on a long history reads the digest's stored state and the few messages written
/// since, and answers exactly what folding every message would.
#[sqlx::test]
async fn a_long_history_is_digested_from_its_checkpoint(pool: PgPool) {
    let app = TestApp::new(pool.clone()).await;
    let token = app.token("acme", "agent");
    let task = register(
        &app,
        &token,
        json!({"name": "Deploy coursefolio", "plan": DEPLOY_PLAN}),
    )
    .await;
    let id = id_of(&task);
    let update = format!("/api/tasks/{id}/update");
    let mut texts = vec![
        "Step 1 done: built ghcr.io/acme/app:v9.9.9".to_owned(),
        "pushed the image to the registry, done".to_owned(),
    ];
    for n in 0..146 {
        texts.push(format!(
            "checked the logs again, quiet round {n} on port 80{:02}",
            n % 7
        ));
    }
    texts.push("SSH into server: finished".to_owned());
    texts.push("waiting on the health check".to_owned());
    for text in &texts {
        expect(
            app.post(&update, &token).json(&json!({"message": text})),
            200,
        )
        .await;
    }
    let through: i32 = sqlx::query_scalar("SELECT through_seq FROM task_digests")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(through, 128, "a checkpoint every 64 messages");

    let body = where_was_i(&app, &token, &id).await;
    let served = &body["digest"];
    assert_eq!(served["inferred"], json!([1, 2, 3]), "{served}");
    assert_eq!(served["message_count"], 150);
    assert_eq!(served["next"]["ordinal"], 4);
    assert_eq!(
        served["recent_updates"].as_array().unwrap().len(),
        5,
        "{served}"
    );

    // The same digest, folded from every message at once.
    assert_eq!(served, &digest_of_every_message(&pool, served).await);
    assert!(
        served["key_details_omitted"].as_u64().unwrap() == 0
            && served["key_details"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["value"] == "ghcr.io/acme/app:v9.9.9"),
        "{served}"
    );

    // The details seen are rows of their own, one per distinct detail, not part of the state.
    let (has_list, details_seen, rows) = seen_details(&pool).await;
    assert!(!has_list);
    assert!(details_seen > 2, "{details_seen}");
    assert_eq!(rows, details_seen);

    // A state stored before the rows existed holds its hashes as a list (numbers, oldest
    // first): it is read as it is, and its next checkpoint turns the list into rows.
    sqlx::query(
        "UPDATE task_digests d SET state = d.state || jsonb_build_object('seen', (
             SELECT jsonb_agg(CASE WHEN s.hash < 0 THEN s.hash::numeric + 18446744073709551616
                                   ELSE s.hash::numeric END ORDER BY s.n)
             FROM task_digest_seen s))",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM task_digest_seen")
        .execute(&pool)
        .await
        .unwrap();
    for text in ["back on port 8003 again", "moved to port 9099"] {
        expect(
            app.post(&update, &token).json(&json!({"message": text})),
            200,
        )
        .await;
    }
    let body = where_was_i(&app, &token, &id).await;
    let served = &body["digest"];
    assert_eq!(served["message_count"], 152);
    assert_eq!(served, &digest_of_every_message(&pool, served).await);
    for n in 152..192 {
        expect(
            app.post(&update, &token)
                .json(&json!({"message": format!("quiet round {n}")})),
            200,
        )
        .await;
    }
    let (has_list, details_seen, rows) = seen_details(&pool).await;
    assert!(
        !has_list,
        "the checkpoint at 192 wrote the state without its list"
    );
    assert_eq!(rows, details_seen, "port 9099 is new, port 8003 was seen");
}

/// A task read costs a few index entries whoever called first on the connection. Its
/// statements find the task by id under row-level security, and each connection plans them once
/// for every caller after five calls; a plan made for a user the statistics do not know must
/// still reach the task through its key, not through all of a later caller's tasks.
#[sqlx::test]
async fn a_task_read_planned_for_a_new_user_reads_one_task(pool: PgPool) {
    let one = one_connection(&pool).await;
    let app = TestApp::new(one.clone()).await;
    let alice = app.token("acme", "alice");
    let task = register(&app, &alice, json!({"name": "Deploy", "plan": DEPLOY_PLAN})).await;
    sqlx::query(
        "INSERT INTO tasks (tenant_id, user_id, id, name)
         SELECT 'acme', 'alice', gen_random_uuid(), 'bulk ' || i FROM generate_series(1, 400) i",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE tasks").execute(&pool).await.unwrap();
    let newcomer = app.token("acme", "newcomer");
    let theirs = register(
        &app,
        &newcomer,
        json!({"name": "Theirs", "plan": DEPLOY_PLAN}),
    )
    .await;
    for _ in 0..8 {
        expect(
            app.get(&format!("/api/tasks/{}", id_of(&theirs)), &newcomer),
            200,
        )
        .await;
    }
    let fetched = || rows_fetched_through_indexes(&one, &pool, "tasks");
    let before = fetched().await;
    let read = expect(
        app.get(&format!("/api/tasks/{}", id_of(&task)), &alice),
        200,
    )
    .await;
    assert_eq!(read["name"], "Deploy", "{read}");
    let after = fetched().await;
    assert!(
        after - before <= 2,
        "the read fetched {} task rows to find one",
        after - before
    );
}

//! The tool registry: `GET /api/tools`, `POST /api/tools/call`, the MCP server at `/mcp`, and
//! the chat loop's use of the same tools.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, expect, expect_problem, hs256, now};

const NAMES: [&str; 13] = [
    "store_memory",
    "retrieve_memory",
    "grep_memory",
    "search_memory",
    "capture_output",
    "manage_long_term_memory",
    "task_register",
    "task_update",
    "task_query",
    "append_step",
    "memory_search",
    "artifact_read",
    "recall",
];

fn read_only(tenant: &str, user: &str) -> String {
    hs256(&json!({"sub": user, "tenant_id": tenant, "scope": "memory:read", "exp": now() + 3600}))
}

async fn call(app: &TestApp, token: &str, name: &str, arguments: Value) -> Value {
    expect(
        app.post("/api/tools/call", token)
            .json(&json!({"name": name, "arguments": arguments})),
        200,
    )
    .await
}

/// A minimal MCP client over the streamable HTTP transport: JSON-RPC posts, answers read from
/// JSON or from the server-sent events of the response.
struct Mcp<'a> {
    app: &'a TestApp,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl<'a> Mcp<'a> {
    async fn connect(app: &'a TestApp, token: &str) -> Mcp<'a> {
        let mut mcp = Mcp {
            app,
            token: token.to_owned(),
            session: None,
            next_id: 1,
        };
        let info = mcp
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "mnemo-tests", "version": "1"}}),
            )
            .await;
        assert_eq!(info["result"]["serverInfo"]["name"], "mnemo", "{info}");
        assert!(mcp.session.is_some(), "a session id is issued");
        mcp.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        mcp
    }

    async fn post(&mut self, body: Value) -> reqwest::Response {
        let mut request = self
            .app
            .post("/mcp", &self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.unwrap();
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = Some(session.to_str().unwrap().to_owned());
        }
        response
    }

    /// Sends one request and returns its JSON-RPC answer (`result` or `error`).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let response = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "{method}: {text}");
        let answers: Vec<Value> = if text.trim_start().starts_with('{') {
            vec![serde_json::from_str(&text).unwrap()]
        } else {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str(data.trim()).ok())
                .collect()
        };
        answers
            .into_iter()
            .find(|answer| answer["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"))
    }

    async fn call(&mut self, name: &str, arguments: Value) -> Value {
        let answer = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        answer["result"].clone()
    }
}

#[sqlx::test]
async fn tools_are_listed_in_every_format(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = read_only("t1", "alice");
    let openai = expect(app.get("/api/tools", &token), 200).await;
    assert_eq!(openai["format"], "openai");
    let names: Vec<&str> = openai["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);
    for tool in openai["tools"].as_array().unwrap() {
        assert_eq!(tool["type"], "function");
        let parameters = &tool["function"]["parameters"];
        assert_eq!(parameters["type"], "object", "{tool}");
        assert!(!parameters.to_string().contains("$ref"), "{tool}");
        assert!(
            tool["function"]["description"]
                .as_str()
                .unwrap()
                .contains("Example: {"),
            "{tool}"
        );
    }
    let anthropic = expect(app.get("/api/tools?format=anthropic", &token), 200).await;
    let tools = anthropic["tools"].as_array().unwrap();
    assert_eq!(tools.len(), NAMES.len());
    assert_eq!(tools[0]["name"], "store_memory");
    assert_eq!(tools[0]["input_schema"]["required"], json!(["content"]));
    assert!(tools[0].get("type").is_none());

    let mcp = expect(app.get("/api/tools?format=mcp", &token), 200).await;
    let tools = mcp["tools"].as_array().unwrap();
    let retrieve = tools
        .iter()
        .find(|t| t["name"] == "retrieve_memory")
        .unwrap();
    assert_eq!(retrieve["annotations"]["readOnlyHint"], true);
    assert_eq!(retrieve["inputSchema"]["required"], json!(["key"]));
    let store = tools.iter().find(|t| t["name"] == "store_memory").unwrap();
    assert_eq!(store["annotations"]["readOnlyHint"], false);

    let problem = expect_problem(app.get("/api/tools?format=gemini", &token), 422).await;
    assert_eq!(problem["field"], "format");
}

#[sqlx::test]
async fn every_example_fits_its_schema_and_its_tool(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    for tool in mnemo::tools::all() {
        let schema = tool.input_schema();
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{}: invalid schema: {e}", tool.name));
        assert!(!tool.examples.is_empty(), "{} has examples", tool.name);
        for example in tool.examples {
            let arguments: Value = serde_json::from_str(example)
                .unwrap_or_else(|e| panic!("{}: example is not JSON: {e}", tool.name));
            let errors: Vec<String> = validator
                .iter_errors(&arguments)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {example}: {errors:?}", tool.name);
            // The tool takes it too: it runs, or answers about the data (no such task), never
            // about the arguments.
            let result = call(&app, &token, tool.name, arguments).await;
            assert!(
                !result["is_error"].as_bool().unwrap() || result["status"] == 404,
                "{}: {example}: {result}",
                tool.name
            );
        }
        // And the schema refuses what the tool refuses: an unknown argument.
        let mut wrong = serde_json::from_str::<Value>(tool.examples[0]).unwrap();
        wrong["no_such_argument"] = json!(1);
        assert!(!validator.is_valid(&wrong), "{}", tool.name);
        let problem = expect_problem(
            app.post("/api/tools/call", &token)
                .json(&json!({"name": tool.name, "arguments": wrong})),
            422,
        )
        .await;
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("no_such_argument"),
            "{}: {problem}",
            tool.name
        );
    }
}

#[sqlx::test]
async fn a_tool_call_answers_what_its_rest_route_answers(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let content: String = (1..=300)
        .map(|i| format!("line {i} of the log\n"))
        .collect();
    expect(
        app.put("/api/memories/build-log", &token)
            .json(&json!({"content": content, "description": "a build log"})),
        201,
    )
    .await;

    let rest = expect(
        app.get(
            "/api/memories/build-log?line_start=120&line_count=3",
            &token,
        ),
        200,
    )
    .await;
    assert_eq!(
        rest["content"],
        "line 120 of the log\nline 121 of the log\nline 122 of the log\n"
    );
    let arguments = json!({"key": "build-log", "line_start": 120, "line_count": 3});
    let tool = call(&app, &token, "retrieve_memory", arguments.clone()).await;
    assert_eq!(tool["is_error"], false);
    assert_eq!(tool["status"], 200);
    assert_eq!(tool["structured"], rest);
    assert_eq!(
        serde_json::from_str::<Value>(tool["content"].as_str().unwrap()).unwrap(),
        rest
    );

    let mut mcp = Mcp::connect(&app, &token).await;
    let over_mcp = mcp.call("retrieve_memory", arguments.clone()).await;
    assert_eq!(over_mcp["isError"], false, "{over_mcp}");
    assert_eq!(over_mcp["structuredContent"], rest);

    // The chat loop runs the same registry (with the session's agent filled in).
    let chat_call: mnemo::llm::ToolCall = serde_json::from_value(json!({"id": "c1",
        "type": "function", "function": {"name": "retrieve_memory",
        "arguments": arguments.to_string()}}))
    .unwrap();
    let principal = mnemo::auth::Principal {
        tenant_id: "t1".into(),
        user_id: "alice".into(),
        scopes: vec![mnemo::auth::Scope::Read, mnemo::auth::Scope::Write],
    };
    let in_chat =
        mnemo::conversations::tools::execute(&app.state, &principal, "assistant", &chat_call).await;
    assert_eq!(serde_json::from_str::<Value>(&in_chat).unwrap(), rest);

    // Search and grep agree as well.
    let rest = expect(
        app.get(
            "/api/memories/build-log/grep?pattern=line%2020%20&context=0",
            &token,
        ),
        200,
    )
    .await;
    let tool = call(
        &app,
        &token,
        "grep_memory",
        json!({"key": "build-log", "pattern": "line 20 ", "context": 0}),
    )
    .await;
    assert_eq!(tool["structured"], rest);
    assert_eq!(rest["matches"].as_array().unwrap().len(), 1, "{rest}");
}

#[sqlx::test]
async fn calls_that_cannot_run_are_http_errors(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let problem = expect_problem(
        app.post("/api/tools/call", &token)
            .json(&json!({"name": "drop_database", "arguments": {}})),
        404,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("store_memory"));

    let problem = expect_problem(
        app.post("/api/tools/call", &token)
            .json(&json!({"name": "store_memory", "arguments": {"content": 42}})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "arguments.content");
    assert!(
        !problem["detail"].as_str().unwrap().contains("column"),
        "{problem}"
    );
    let problem = expect_problem(
        app.post("/api/tools/call", &token)
            .json(&json!({"name": "store_memory", "arguments": ["x"]})),
        422,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("object"));
    let problem = expect_problem(
        app.post("/api/tools/call", &token)
            .json(&json!({"name": "task_update",
            "arguments": {"task_id": "not-a-uuid", "message": "x"}})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "arguments.task_id");
    let problem = expect_problem(
        app.post("/api/tools/call", &token)
            .json(&json!({"name": "store_memory", "arguments": {"content": "a\u{0}b"}})),
        422,
    )
    .await;
    assert_eq!(problem["field"], "arguments.content");

    // A read-only token reads, but cannot run a writing tool (nor write notes through one).
    let reader = read_only("t1", "alice");
    expect_problem(
        app.post("/api/tools/call", &reader)
            .json(&json!({"name": "store_memory", "arguments": {"content": "x"}})),
        403,
    )
    .await;
    let notes = call(
        &app,
        &reader,
        "manage_long_term_memory",
        json!({"operation": "read"}),
    )
    .await;
    assert_eq!(notes["is_error"], false, "{notes}");
    expect_problem(
        app.post("/api/tools/call", &reader)
            .json(&json!({"name": "manage_long_term_memory",
            "arguments": {"operation": "append", "content": "x"}})),
        403,
    )
    .await;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_memories")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing was stored");
}

#[sqlx::test]
async fn another_users_data_is_an_error_not_data(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let alice = app.token("t1", "alice");
    let bob = app.token("t1", "bob");
    let stored = call(
        &app,
        &alice,
        "store_memory",
        json!({"key": "secret", "content": "alice's secret plan"}),
    )
    .await;
    assert_eq!(stored["status"], 201);
    assert!(
        stored["content"]
            .as_str()
            .unwrap()
            .contains("[MemoryRef: secret - ")
    );

    let theirs = call(&app, &bob, "retrieve_memory", json!({"key": "secret"})).await;
    assert_eq!(theirs["is_error"], true);
    assert_eq!(theirs["status"], 404);
    assert!(!theirs.to_string().contains("secret plan"));
    let found = call(&app, &bob, "search_memory", json!({"query": "secret plan"})).await;
    assert_eq!(found["structured"]["hits"], json!([]), "{found}");

    let mut mcp = Mcp::connect(&app, &bob).await;
    let theirs = mcp.call("retrieve_memory", json!({"key": "secret"})).await;
    assert_eq!(theirs["isError"], true);
    assert!(!theirs.to_string().contains("secret plan"));
    let resource = mcp
        .request("resources/read", json!({"uri": "mnemo://memories/secret"}))
        .await;
    assert!(resource["error"].is_object(), "{resource}");
    assert!(!resource.to_string().contains("secret plan"));

    // Bob's session cannot be used with Alice's token, nor the other way round.
    let mut hijack = Mcp {
        app: &app,
        token: alice.clone(),
        session: mcp.session.clone(),
        next_id: 10,
    };
    let answer = hijack
        .request(
            "tools/call",
            json!({"name": "retrieve_memory", "arguments": {"key": "secret"}}),
        )
        .await;
    assert!(answer["error"].is_object(), "{answer}");
    assert!(!answer.to_string().contains("secret plan"));

    // In another tenant, the same user id sees nothing either.
    let other = app.token("t2", "alice");
    let theirs = call(&app, &other, "retrieve_memory", json!({"key": "secret"})).await;
    assert_eq!(theirs["status"], 404);
}

#[sqlx::test]
async fn mcp_serves_tools_and_resources(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.token("t1", "alice");
    let mut mcp = Mcp::connect(&app, &token).await;

    let listed = mcp.request("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);

    let output: String = (1..=5000).map(|i| format!("row {i}: ok\n")).collect();
    let stored = mcp
        .call(
            "store_memory",
            json!({"content": output, "description": "a long listing"}),
        )
        .await;
    let key = stored["structuredContent"]["memory_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stored["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("[MemoryRef: {key} - a long listing"))
    );

    let page = mcp
        .request(
            "resources/read",
            json!({"uri": format!("mnemo://memories/{key}?line_start=2500&line_count=2")}),
        )
        .await;
    assert_eq!(
        page["result"]["contents"][0]["text"], "row 2500: ok\nrow 2501: ok\n",
        "{page}"
    );

    let appended = mcp
        .call(
            "manage_long_term_memory",
            json!({"agent_name": "coder", "operation": "append", "content": "- uses vim"}),
        )
        .await;
    assert_eq!(appended["isError"], false, "{appended}");
    let notes = mcp
        .request("resources/read", json!({"uri": "mnemo://notes/coder"}))
        .await;
    assert_eq!(notes["result"]["contents"][0]["text"], "- uses vim\n");
    assert_eq!(notes["result"]["contents"][0]["mimeType"], "text/markdown");

    let task = mcp
        .call(
            "task_register",
            json!({"name": "Deploy", "plan": ["Build image", "Push image", "Run it"]}),
        )
        .await;
    let task_id = task["structuredContent"]["id"].as_str().unwrap().to_owned();
    mcp.call(
        "task_update",
        json!({"task_id": task_id, "message": "Step 1 done: built v1.2.3"}),
    )
    .await;
    let where_was_i = mcp
        .request(
            "resources/read",
            json!({"uri": format!("mnemo://tasks/{task_id}")}),
        )
        .await;
    let answer = where_was_i["result"]["contents"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        answer.contains("v1.2.3") && answer.contains("Push image"),
        "{answer}"
    );

    let templates = mcp.request("resources/templates/list", json!({})).await;
    let uris: Vec<&str> = templates["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(uris.contains(&"mnemo://notes/{agent}"), "{templates}");

    let missing = mcp
        .request("resources/read", json!({"uri": "mnemo://elsewhere/x"}))
        .await;
    assert!(missing["error"].is_object());

    // Ending the session: 204, and the session is gone.
    let session = mcp.session.clone().unwrap();
    let ended = app
        .delete("/mcp", &token)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 204);
    let gone = app
        .post("/mcp", &token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

#[sqlx::test]
async fn mcp_needs_a_token_and_names_its_metadata(pool: PgPool) {
    let app = TestApp::with_config(pool, |c| {
        c.jwt_issuer = Some("https://auth.example.com".into());
        c.public_url = Some("https://mnemo.example.com".into());
    })
    .await;
    let response = app
        .client
        .post(app.url("/mcp"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains(
            "resource_metadata=\"https://mnemo.example.com/.well-known/oauth-protected-resource\""
        ),
        "{challenge}"
    );
    let response = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("invalid_token") && challenge.contains("resource_metadata="));

    let metadata = expect(
        app.client
            .get(app.url("/.well-known/oauth-protected-resource")),
        200,
    )
    .await;
    assert_eq!(metadata["resource"], "https://mnemo.example.com/mcp");
    assert_eq!(
        metadata["authorization_servers"],
        json!(["https://auth.example.com"])
    );
    assert_eq!(
        metadata["scopes_supported"],
        json!(["memory:read", "memory:write"])
    );
}

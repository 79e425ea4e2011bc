//! The `mnemo` binary: bad configuration stops the start with one clear line; `mnemo token` prints a
//! token the service accepts.

use std::process::Command;

use serde_json::Value;
use sqlx::PgPool;

use crate::common::{SECRET, TestApp, expect};

fn mnemo() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    // Only what each test sets: no developer MNEMO_* variables leak in.
    for (key, _) in std::env::vars() {
        if key.starts_with("MNEMO_") || key == "DATABASE_URL" {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn invalid_config_fails_with_one_clear_line() {
    let cases = [
        (
            vec![("MNEMO_JWT_SECRET", "short")],
            "MNEMO_JWT_SECRET is 5 bytes; HS256 needs at least 32",
        ),
        (
            vec![("MNEMO_JWT_SECRET", SECRET)],
            "DATABASE_URL is not set",
        ),
        (
            vec![("DATABASE_URL", "postgres://x@127.0.0.1:1/x")],
            "no token key",
        ),
        (
            vec![
                ("DATABASE_URL", "postgres://x@127.0.0.1:1/x"),
                ("MNEMO_JWT_SECRET", SECRET),
                ("MNEMO_LLM_MODEL", "m"),
            ],
            "set both MNEMO_LLM_BASE_URL and MNEMO_LLM_MODEL",
        ),
        (
            vec![
                ("DATABASE_URL", "postgres://x@127.0.0.1:1/x"),
                ("MNEMO_JWT_SECRET", SECRET),
                ("MNEMO_SEARCH_CROWD_WEIGHT", "1.5"),
            ],
            "MNEMO_SEARCH_CROWD_WEIGHT must be between 0 and 1",
        ),
    ];
    for (env, expected) in cases {
        let output = mnemo()
            .arg("serve")
            .envs(env.clone())
            .output()
            .expect("runs");
        assert!(!output.status.success(), "{env:?} must fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line for {env:?}: {stderr}");
        assert!(
            lines[0].starts_with("mnemo: ") && lines[0].contains(expected),
            "{env:?}: {stderr}"
        );
        assert!(!stderr.contains(SECRET), "the secret is never printed");
    }
}

#[sqlx::test]
async fn token_command_mints_a_token_the_service_accepts(pool: PgPool) {
    let output = mnemo()
        .args([
            "token",
            "--sub",
            "ops",
            "--tenant",
            "acme",
            "--scope",
            "memory:read",
            "--ttl",
            "10m",
        ])
        .env("MNEMO_JWT_SECRET", SECRET)
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let token = String::from_utf8(output.stdout)
        .expect("utf8")
        .trim()
        .to_owned();
    let app = TestApp::new(pool).await;
    let me: Value = expect(app.get("/api/me", &token), 200).await;
    assert_eq!(me["tenant_id"], "acme");
    assert_eq!(me["user_id"], "ops");
    assert_eq!(me["scopes"], serde_json::json!(["memory:read"]));
}

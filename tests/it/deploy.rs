//! The container files stay consistent with the code (there is no Docker engine to run them here).

use std::path::Path;

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).expect(name)
}

#[test]
fn compose_runs_pgvector_healthy_before_mnemo() {
    let compose: serde_yaml::Value =
        serde_yaml::from_str(&read("docker-compose.yml")).expect("yaml");
    let db = &compose["services"]["db"];
    assert!(
        db["image"]
            .as_str()
            .expect("image")
            .starts_with("pgvector/pgvector:pg17")
    );
    assert!(
        db["healthcheck"]["test"].is_sequence(),
        "db has a healthcheck"
    );
    let volume = db["volumes"][0].as_str().expect("volume");
    let name = volume.split(':').next().expect("name");
    assert!(
        compose["volumes"].get(name).is_some(),
        "named volume {name} is declared"
    );

    let mnemo = &compose["services"]["mnemo"];
    assert_eq!(mnemo["depends_on"]["db"]["condition"], "service_healthy");
    let config = read("src/config.rs");
    let env = mnemo["environment"].as_mapping().expect("environment");
    for key in env.keys() {
        let key = key.as_str().expect("key");
        assert!(
            config.contains(&format!("env = \"{key}\"")),
            "{key} is not a setting mnemo reads"
        );
    }
    let db_user = db["environment"]["POSTGRES_USER"].as_str().expect("user");
    let url = env[&serde_yaml::Value::from("DATABASE_URL")]
        .as_str()
        .expect("url");
    assert!(
        url.starts_with(&format!("postgres://{db_user}:")),
        "DATABASE_URL uses the db's user"
    );
    assert!(
        url.contains("@db:5432/"),
        "DATABASE_URL points at the db service"
    );
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_healthcheck() {
    let dockerfile = read("Dockerfile");
    let stages = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert!(stages >= 2, "multi-stage build");
    assert!(dockerfile.contains("AS build"), "a build stage");
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert_ne!(user.trim(), "root");
    assert!(dockerfile.contains("HEALTHCHECK") && dockerfile.contains("/healthz"));
    assert!(dockerfile.contains("MNEMO_LISTEN=0.0.0.0:8080") && dockerfile.contains("EXPOSE 8080"));
    let ignore = read(".dockerignore");
    for excluded in ["target", ".data", "node_modules"] {
        assert!(
            ignore.contains(excluded),
            ".dockerignore keeps out {excluded}"
        );
    }
}

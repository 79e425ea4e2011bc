//! The checked-in spec must equal what the code generates.

#[test]
fn checked_in_spec_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let generated = mnemo::openapi::json();
    if std::env::var_os("MNEMO_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write spec");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "openapi/openapi.json is stale; regenerate it with `cargo run -q -- openapi > openapi/openapi.json` \
         (or MNEMO_UPDATE_OPENAPI=1 cargo test openapi)"
    );
}

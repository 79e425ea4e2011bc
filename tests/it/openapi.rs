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

/// Every `$ref` in the document names a schema or response it defines.
#[test]
fn every_reference_resolves() {
    let spec: serde_json::Value = serde_json::from_str(&mnemo::openapi::json()).unwrap();
    let text = spec.to_string();
    let refs = regex::Regex::new(r##""#/components/(schemas|responses)/([^"]+)""##).unwrap();
    for found in refs.captures_iter(&text) {
        let (kind, name) = (&found[1], &found[2]);
        assert!(
            spec["components"][kind].get(name).is_some(),
            "#/components/{kind}/{name} is referenced but not defined"
        );
    }
}

/// utoipa keys schemas by name and the last one registered wins, so two types documented under
/// one name would describe one of them wrongly. Every type with a schema has a name of its own.
#[test]
fn schema_names_are_unique() {
    let derive = regex::Regex::new(r"#\[derive\(([^)]*)\)\]").unwrap();
    let item = regex::Regex::new(r"(?:struct|enum)\s+(\w+)").unwrap();
    let rename = regex::Regex::new(r"#\[schema\([^\]]*\bas = (\w+)").unwrap();
    let manual = regex::Regex::new(r"impl (?:utoipa::)?ToSchema for (\w+)").unwrap();
    let text_enum = regex::Regex::new(r"text_enum!\(\s*(?:///[^\n]*\n\s*)*(\w+)").unwrap();
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut check = |name: String, at: String| {
        if let Some(first) = seen.insert(name.clone(), at.clone()) {
            panic!("schema name {name} is used by {first} and {at}");
        }
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let file = path.display().to_string();
            for found in derive.find_iter(&source) {
                if !found.as_str().contains("ToSchema") {
                    continue;
                }
                let rest = &source[found.end()..];
                let Some(decl) = item.captures(rest) else {
                    continue;
                };
                let attrs = &rest[..decl.get(0).unwrap().start()];
                let name = rename
                    .captures(attrs)
                    .map_or_else(|| decl[1].to_owned(), |r| r[1].to_owned());
                check(name, file.clone());
            }
            for found in manual.captures_iter(&source) {
                check(found[1].to_owned(), file.clone());
            }
            for found in text_enum.captures_iter(&source) {
                if &found[1] != "ToSchema" {
                    check(found[1].to_owned(), file.clone());
                }
            }
        }
    }
    assert!(seen.len() > 100, "found only {} schema types", seen.len());
}

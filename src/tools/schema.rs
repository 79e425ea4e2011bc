//! JSON Schemas of tool arguments, derived from the request types the REST handlers use.
//!
//! utoipa describes those types for the OpenAPI document, with `$ref`s into
//! `components/schemas`. A function-calling schema must stand alone, so the references are
//! inlined (the argument types are not recursive) and `allOf` wrappers of one object are merged:
//! what a model sees is one flat object of properties.

use serde_json::{Map, Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::schema::Schema;
use utoipa::{IntoParams, ToSchema};

/// The standalone schema of a request body type.
pub fn body<T: ToSchema>() -> Value {
    let mut components = Vec::<(String, RefOr<Schema>)>::new();
    T::schemas(&mut components);
    let defs: Map<String, Value> = components
        .into_iter()
        .map(|(name, schema)| (name, to_value(&schema)))
        .collect();
    let mut root = to_value(&T::schema());
    inline(&mut root, &defs, 0);
    unwrap_single(&mut root);
    let mut root = flatten(root);
    // The type's own doc comment speaks of the REST route; the tool's description says more.
    // Its example is the REST body's; the tool's description carries its own.
    if let Some(object) = root.as_object_mut() {
        object.remove("description");
        object.remove("example");
    }
    root
}

/// The standalone object schema of a query-parameter type: one property per parameter.
pub fn params<T: IntoParams>() -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for parameter in T::into_params(|| Some(ParameterIn::Query)) {
        let value = to_value(&parameter);
        let name = value["name"].as_str().unwrap_or_default().to_owned();
        let mut schema = value.get("schema").cloned().unwrap_or_else(|| json!({}));
        if let (Some(object), Some(description)) =
            (schema.as_object_mut(), value.get("description"))
        {
            object.insert("description".into(), description.clone());
        }
        if value["required"] == Value::Bool(true) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name, schema);
    }
    let mut object = Map::new();
    object.insert("type".into(), json!("object"));
    object.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        object.insert("required".into(), Value::Array(required));
    }
    object.insert("additionalProperties".into(), json!(false));
    Value::Object(object)
}

/// Adds a property (an identifier the REST route takes in its path) in front of `schema`'s own.
pub fn with_property(schema: Value, name: &str, property: Value, required: bool) -> Value {
    let Value::Object(mut object) = schema else {
        return schema;
    };
    let mut properties = Map::new();
    properties.insert(name.to_owned(), property);
    if let Some(Value::Object(own)) = object.remove("properties") {
        properties.extend(own.into_iter().filter(|(key, _)| key != name));
    }
    object.insert("properties".into(), Value::Object(properties));
    let mut names: Vec<Value> = match object.remove("required") {
        Some(Value::Array(names)) => names.into_iter().filter(|n| n != name).collect(),
        _ => Vec::new(),
    };
    if required {
        names.insert(0, Value::String(name.to_owned()));
    }
    if !names.is_empty() {
        object.insert("required".into(), Value::Array(names));
    }
    Value::Object(object)
}

/// `schema` without the property `name` (one the caller's context fills in).
pub fn without_property(schema: &Value, name: &str) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            properties.remove(name);
        }
        if let Some(Value::Array(required)) = object.get_mut("required") {
            required.retain(|n| n != name);
            if required.is_empty() {
                object.remove("required");
            }
        }
    }
    schema
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Replaces every `{"$ref": "#/components/schemas/X"}` with X's schema. Depth-bounded so that a
/// recursive type could never loop; the argument types have no recursion.
fn inline(value: &mut Value, defs: &Map<String, Value>, depth: usize) {
    match value {
        Value::Object(object) => {
            let target = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .and_then(|name| defs.get(name));
            if let (Some(target), true) = (target, depth < 16) {
                let mut replacement = target.clone();
                inline(&mut replacement, defs, depth + 1);
                // Siblings of the reference (a description, a default) stay beside it.
                object.remove("$ref");
                if let Value::Object(fields) = replacement {
                    for (key, field) in fields {
                        object.entry(key).or_insert(field);
                    }
                }
                return;
            }
            for field in object.values_mut() {
                inline(field, defs, depth);
            }
        }
        Value::Array(items) => {
            for item in items {
                inline(item, defs, depth);
            }
        }
        _ => {}
    }
}

/// Replaces every `oneOf` / `anyOf` / `allOf` of one schema (utoipa wraps a reference that has a
/// default or a description that way) by that schema, merged into its parent.
fn unwrap_single(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for combinator in ["oneOf", "anyOf", "allOf"] {
                let single =
                    matches!(object.get(combinator), Some(Value::Array(items)) if items.len() == 1);
                if single
                    && let Some(Value::Array(mut items)) = object.remove(combinator)
                    && let Some(Value::Object(inner)) = items.pop()
                {
                    for (key, field) in inner {
                        object.entry(key).or_insert(field);
                    }
                }
            }
            for field in object.values_mut() {
                unwrap_single(field);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_single),
        _ => {}
    }
}

/// Merges an `allOf` of objects (serde `flatten`) into one object schema.
fn flatten(schema: Value) -> Value {
    let Value::Object(mut object) = schema else {
        return schema;
    };
    let Some(Value::Array(parts)) = object.remove("allOf") else {
        return Value::Object(object);
    };
    let mut properties = match object.remove("properties") {
        Some(Value::Object(own)) => own,
        _ => Map::new(),
    };
    let mut required = match object.remove("required") {
        Some(Value::Array(own)) => own,
        _ => Vec::new(),
    };
    for part in parts {
        let Value::Object(mut part) = flatten(part) else {
            continue;
        };
        if let Some(Value::Object(more)) = part.remove("properties") {
            properties.extend(more);
        }
        if let Some(Value::Array(more)) = part.remove("required") {
            required.extend(more);
        }
    }
    object.insert("type".into(), json!("object"));
    object.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        object.insert("required".into(), Value::Array(required));
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, ToSchema)]
    #[allow(dead_code)]
    struct Inner {
        /// A word.
        word: String,
    }

    #[derive(serde::Deserialize, ToSchema)]
    #[allow(dead_code)]
    struct Outer {
        inner: Inner,
        maybe: Option<Inner>,
        count: Option<u32>,
    }

    #[test]
    fn references_are_inlined() {
        let schema = body::<Outer>();
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "{text}");
        assert_eq!(schema["type"], "object");
        assert_eq!(
            schema["properties"]["inner"]["properties"]["word"]["description"],
            "A word."
        );
        assert_eq!(schema["required"], json!(["inner"]));
    }

    #[test]
    fn added_and_removed_properties() {
        let schema = with_property(body::<Inner>(), "id", json!({"type": "string"}), true);
        assert_eq!(schema["required"], json!(["id", "word"]));
        let keys: Vec<_> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["id", "word"]);
        let schema = without_property(&schema, "id");
        assert_eq!(schema["required"], json!(["word"]));
        assert!(schema["properties"].get("id").is_none());
    }

    #[test]
    fn allof_objects_merge() {
        let merged = flatten(json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}}
        ]}));
        assert_eq!(merged["properties"]["b"]["type"], "integer");
        assert_eq!(merged["required"], json!(["a"]));
    }
}

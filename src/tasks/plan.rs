//! Plans: parsing both accepted forms into steps (errors name the JSON path), and re-basing item
//! status from one plan version onto the next. Pure logic.

use serde_json::Value;

/// One step of a plan, whichever form it came in.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub stage: Option<i32>,
    pub title: String,
    pub tool: Option<String>,
    pub input: Option<Value>,
    pub narrative: Option<String>,
}

/// A malformed plan: the JSON path of the offending value and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    pub path: String,
    pub detail: String,
}

fn err(path: String, detail: impl Into<String>) -> PlanError {
    PlanError {
        path,
        detail: detail.into(),
    }
}

/// Parses a plan given under `root` (the JSON path used in errors, e.g. `plan`).
///
/// Accepted: a list of step titles (`["Build image", "Push"]`), or the stages
/// (`[{stage, steps: [{stepDescription, toolName, sub_task_input?, narrative_step?}]}]`). Elements
/// of the first kind may also be objects `{title}` or step objects, so a list can mix both.
pub fn parse(plan: &Value, root: &str, max_steps: usize) -> Result<Vec<Step>, PlanError> {
    let Value::Array(elements) = plan else {
        return Err(err(
            root.to_owned(),
            "a plan is a list of step titles or of stages `{stage, steps}`",
        ));
    };
    let mut steps = Vec::new();
    for (i, element) in elements.iter().enumerate() {
        let path = format!("{root}[{i}]");
        match element {
            Value::String(title) => steps.push(Step {
                stage: None,
                title: title_of(title, &path)?,
                tool: None,
                input: None,
                narrative: None,
            }),
            Value::Object(map) if map.contains_key("steps") => {
                let stage = match map.get("stage") {
                    None | Some(Value::Null) => None,
                    Some(value) => Some(
                        value
                            .as_i64()
                            .and_then(|n| i32::try_from(n).ok())
                            .ok_or_else(|| {
                                err(format!("{path}.stage"), "`stage` must be an integer")
                            })?,
                    ),
                };
                let Some(Value::Array(stage_steps)) = map.get("steps") else {
                    return Err(err(format!("{path}.steps"), "`steps` must be a list"));
                };
                for (j, step) in stage_steps.iter().enumerate() {
                    steps.push(parse_step(step, &format!("{path}.steps[{j}]"), stage)?);
                }
            }
            Value::Object(_) => steps.push(parse_step(element, &path, None)?),
            _ => {
                return Err(err(
                    path,
                    "a plan element is a step title (string) or a stage `{stage, steps}`",
                ));
            }
        }
        if steps.len() > max_steps {
            return Err(err(path, format!("a plan has at most {max_steps} steps")));
        }
    }
    if steps.is_empty() {
        return Err(err(root.to_owned(), "a plan needs at least one step"));
    }
    Ok(steps)
}

fn title_of(text: &str, path: &str) -> Result<String, PlanError> {
    let title = text.trim();
    if title.is_empty() {
        return Err(err(path.to_owned(), "a step title must not be empty"));
    }
    Ok(title.to_owned())
}

fn optional_string(
    map: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, PlanError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(err(
            format!("{path}.{key}"),
            format!("`{key}` must be a string"),
        )),
    }
}

/// A step object: the `{stepDescription, toolName, sub_task_input, narrative_step}`, or
/// `{title, tool?, input?, narrative?}`.
fn parse_step(step: &Value, path: &str, stage: Option<i32>) -> Result<Step, PlanError> {
    let Value::Object(map) = step else {
        return Err(err(
            path.to_owned(),
            "a step is an object `{stepDescription, toolName, sub_task_input, narrative_step}`",
        ));
    };
    let staged = stage.is_some() || map.contains_key("stepDescription");
    let (title_key, tool_key, input_key, narrative_key) = if staged {
        (
            "stepDescription",
            "toolName",
            "sub_task_input",
            "narrative_step",
        )
    } else {
        ("title", "tool", "input", "narrative")
    };
    let title = match map.get(title_key) {
        Some(Value::String(s)) => title_of(s, &format!("{path}.{title_key}"))?,
        Some(_) => {
            return Err(err(
                format!("{path}.{title_key}"),
                format!("`{title_key}` must be a string"),
            ));
        }
        None => {
            return Err(err(
                format!("{path}.{title_key}"),
                format!("`{title_key}` is required"),
            ));
        }
    };
    let tool = optional_string(map, tool_key, path)?;
    if staged && tool.is_none() {
        return Err(err(
            format!("{path}.{tool_key}"),
            format!("`{tool_key}` is required and must be a string"),
        ));
    }
    Ok(Step {
        stage,
        title,
        tool,
        input: map.get(input_key).filter(|v| !v.is_null()).cloned(),
        narrative: optional_string(map, narrative_key, path)?,
    })
}

/// The state an item of the previous version had, as far as re-basing cares.
#[derive(Debug, Clone, PartialEq)]
pub struct Previous<S> {
    pub ordinal: i32,
    pub title: String,
    pub state: S,
}

/// For each new step (by index), the previous item whose state it takes over.
///
/// A new step takes the state of the earliest unused previous item with the same title (compared
/// case- and whitespace-insensitively); steps that match nothing start pending. So a replan that
/// keeps "Build image" and "Push image" and replaces the rest keeps both as completed.
pub fn rebase<'a, S>(new: &[Step], previous: &'a [Previous<S>]) -> Vec<Option<&'a Previous<S>>> {
    let mut used = vec![false; previous.len()];
    new.iter()
        .map(|step| {
            let key = normalize(&step.title);
            let found = previous
                .iter()
                .enumerate()
                .find(|(i, p)| !used[*i] && normalize(&p.title) == key)?;
            used[found.0] = true;
            Some(found.1)
        })
        .collect()
}

fn normalize(title: &str) -> String {
    title
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn titles_and_stages_both_parse() {
        let steps = parse(&json!(["Build image", " Push "]), "plan", 10).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].title, "Push");
        let steps = parse(
            &json!([
                {"stage": 1, "steps": [{"stepDescription": "Search", "toolName": "web",
                                         "sub_task_input": {"q": "x"}, "narrative_step": "look"}]},
                {"stage": 2, "steps": [{"stepDescription": "Write", "toolName": "llm"},
                                        {"stepDescription": "Check", "toolName": "llm"}]}
            ]),
            "plan",
            10,
        )
        .unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].stage, Some(1));
        assert_eq!(steps[0].input, Some(json!({"q": "x"})));
        assert_eq!(steps[0].narrative.as_deref(), Some("look"));
        assert_eq!(steps[2].stage, Some(2));
        assert_eq!(steps[2].tool.as_deref(), Some("llm"));
    }

    #[test]
    fn errors_name_the_path() {
        let cases = [
            (json!({"a": 1}), "plan"),
            (json!([]), "plan"),
            (json!(["ok", 3]), "plan[1]"),
            (json!(["ok", "  "]), "plan[1]"),
            (
                json!([{"stage": 1, "steps": []},
                       {"stage": 2, "steps": [{"stepDescription": "x", "toolName": 7}]}]),
                "plan[1].steps[0].toolName",
            ),
            (
                json!([{"stage": 1, "steps": [{"stepDescription": "x"}]}]),
                "plan[0].steps[0].toolName",
            ),
            (json!([{"stage": "one", "steps": []}]), "plan[0].stage"),
            (json!([{"stage": 1, "steps": {}}]), "plan[0].steps"),
            (
                json!([{"stage": 1, "steps": [{"toolName": "x"}]}]),
                "plan[0].steps[0].stepDescription",
            ),
            (json!([{"title": "x", "narrative": 1}]), "plan[0].narrative"),
        ];
        for (plan, path) in cases {
            let got = parse(&plan, "plan", 10).unwrap_err();
            assert_eq!(got.path, path, "{plan}: {}", got.detail);
        }
        let got = parse(&json!(["a", "b", "c"]), "plan", 2).unwrap_err();
        assert_eq!(got.path, "plan[2]");
        assert!(got.detail.contains("at most 2"));
    }

    #[test]
    fn rebase_matches_titles_once_each() {
        let new = parse(
            &json!(["Build image", "push IMAGE", "Deploy", "Build image"]),
            "p",
            10,
        )
        .unwrap();
        let previous = vec![
            Previous {
                ordinal: 1,
                title: "Build  image".into(),
                state: "completed",
            },
            Previous {
                ordinal: 2,
                title: "Push image".into(),
                state: "completed",
            },
            Previous {
                ordinal: 3,
                title: "SSH".into(),
                state: "failed",
            },
        ];
        let got: Vec<Option<i32>> = rebase(&new, &previous)
            .into_iter()
            .map(|p| p.map(|p| p.ordinal))
            .collect();
        assert_eq!(got, vec![Some(1), Some(2), None, None]);
    }
}

//! Hand-written schemas of request values that take several forms: a plan (titles, steps or
//! stages) and an event's stage (a number or a label).

use serde_json::Value;
use utoipa::ToSchema;

/// Schema of a plan as a request gives it: a list of step titles, steps or stages.
pub struct PlanInput;

impl PlanInput {
    pub fn json() -> Value {
        let title = serde_json::json!({"type": "string", "minLength": 1, "pattern": "\\S"});
        let staged_step = serde_json::json!({
            "type": "object",
            "description": "A step of a stage; `sub_task_input` (any JSON) may come with it.",
            "required": ["stepDescription", "toolName"],
            "properties": {
                "stepDescription": title,
                "toolName": {"type": "string"},
                "narrative_step": {"type": ["string", "null"]}
            }
        });
        serde_json::json!({
            "type": "array",
            "description": "A list of step titles (`[\"Build image\", \"Push\"]`), of steps \
                `{title, tool?, input?, narrative?}`, or of stages `{stage, steps: [{stepDescription, \
                toolName, sub_task_input?, narrative_step?}]}`; forms may be mixed. At least one step, \
                at most `MNEMO_TASKS_MAX_PLAN_STEPS` (default 500) in all.",
            "minItems": 1,
            "maxItems": 500,
            "items": {"anyOf": [
                title,
                {
                    "type": "object",
                    "description": "A step; `input` (any JSON) may come with it.",
                    "required": ["title"],
                    "properties": {
                        "title": title,
                        "tool": {"type": ["string", "null"]},
                        "narrative": {"type": ["string", "null"]}
                    }
                },
                {
                    "type": "object",
                    "description": "A stage and its steps.",
                    "required": ["steps"],
                    "properties": {
                        "stage": {
                            "type": ["integer", "null"],
                            "format": "int32",
                            "minimum": i32::MIN,
                            "maximum": i32::MAX
                        },
                        "steps": {"type": "array", "minItems": 1, "items": staged_step}
                    }
                }
            ]}
        })
    }
}

impl utoipa::PartialSchema for PlanInput {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::openapi::json_schema(Self::json())
    }
}

impl ToSchema for PlanInput {}

/// Schema of an event's stage: a number, or a label such as `"Initial"` or `"System"`.
pub struct StageLabel;

impl StageLabel {
    pub fn json() -> Value {
        serde_json::json!({
            "type": ["number", "string"],
            "description": "A stage number, or a label such as `\"Initial\"` or `\"System\"`."
        })
    }
}

impl utoipa::PartialSchema for StageLabel {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::openapi::json_schema(Self::json())
    }
}

impl ToSchema for StageLabel {}

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    /// The hand-written schemas read back exactly as written (nothing dropped on the way).
    #[test]
    fn schema_json_reads_back() {
        for (json, schema) in [
            (super::PlanInput::json(), super::PlanInput::schema()),
            (super::StageLabel::json(), super::StageLabel::schema()),
        ] {
            let written = serde_json::to_value(schema).unwrap();
            assert_eq!(written, json);
        }
    }
}

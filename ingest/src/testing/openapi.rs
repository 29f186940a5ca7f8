//! Checks responses against ingest's OpenAPI document (`ingest/openapi.json`, served at
//! `/api/openapi.json`), with a small validator for the subset of JSON Schema the
//! document uses: `$ref`, `oneOf`, `type`, `enum`, `required`, `properties`,
//! `additionalProperties`, `items`, `maxLength`.

use serde_json::Value;

/// The document, as ingest serves it.
pub fn document() -> Value {
    serde_json::from_str(include_str!("../../openapi.json")).expect("the OpenAPI document is JSON")
}

/// Panics unless `status` is documented for `POST path` and `body` matches its schema.
pub fn assert_documented(doc: &Value, path: &str, status: u16, body: &Value) {
    let op = &doc["paths"][path]["post"]["responses"][status.to_string()];
    assert!(op.is_object(), "POST {path} {status} is not documented");
    let schema = &op["content"]["application/json"]["schema"];
    if let Err(e) = check(doc, schema, body) {
        panic!("POST {path} {status}: body {body} does not match the OpenAPI schema: {e}");
    }
}

fn check(doc: &Value, schema: &Value, v: &Value) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        let target = &doc["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("unresolved {r}"));
        }
        return check(doc, target, v);
    }
    if let Some(alts) = schema["oneOf"].as_array() {
        let matched = alts.iter().filter(|s| check(doc, s, v).is_ok()).count();
        return match matched {
            1 => Ok(()),
            n => Err(format!("{n} of the oneOf alternatives matched {v}")),
        };
    }
    let ok = match schema["type"].as_str() {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("boolean") => v.is_boolean(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        _ => true,
    };
    if !ok {
        return Err(format!("{v} is not of type {}", schema["type"]));
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            return Err(format!("{v} not in {e:?}"));
        }
    }
    if let (Some(max), Some(s)) = (schema["maxLength"].as_u64(), v.as_str()) {
        if s.chars().count() as u64 > max {
            return Err(format!("{s:?} is longer than {max}"));
        }
    }
    for req in schema["required"].as_array().into_iter().flatten() {
        if v.get(req.as_str().unwrap_or_default()).is_none() {
            return Err(format!("missing required {req}"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema["properties"].as_object();
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(doc, s, val).map_err(|e| format!("{k}: {e}"))?,
                None => match &schema["additionalProperties"] {
                    Value::Bool(false) => return Err(format!("{k} is not a documented property")),
                    s @ Value::Object(_) => check(doc, s, val).map_err(|e| format!("{k}: {e}"))?,
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for item in arr {
            check(doc, items, item)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;
    use serde_json::json;

    #[test]
    fn the_validator_rejects_what_the_schema_forbids() {
        let doc = json!({"components": {"schemas": {"E": {
            "type": "object", "required": ["success"], "additionalProperties": false,
            "properties": {"success": {"type": "boolean", "enum": [false]},
                           "m": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                           "s": {"type": "string", "maxLength": 3}}}}}});
        let e = json!({"$ref": "#/components/schemas/E"});
        assert!(check(
            &doc,
            &e,
            &json!({"success": false, "m": {"a": ["x"]}, "s": "abc"})
        )
        .is_ok());
        assert!(check(&doc, &e, &json!({"success": true})).is_err());
        assert!(check(&doc, &e, &json!({})).is_err());
        assert!(check(&doc, &e, &json!({"success": false, "extra": 1})).is_err());
        assert!(check(&doc, &e, &json!({"success": false, "m": {"a": [1]}})).is_err());
        assert!(check(&doc, &e, &json!({"success": false, "s": "abcd"})).is_err());
        assert!(check(
            &doc,
            &json!({"$ref": "#/components/schemas/Nope"}),
            &json!({})
        )
        .is_err());
        let one_of = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
        assert!(check(&doc, &one_of, &json!(1)).is_ok());
        assert!(check(&doc, &one_of, &json!(true)).is_err());
    }
}

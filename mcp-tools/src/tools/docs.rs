//! The Markdown page of a tool set (its JSON document is the server's contract).

use std::fmt::Write as _;

use serde_json::Value;

use crate::tools::set::ToolSet;

impl ToolSet {
    /// A Markdown page documenting every tool: description, annotations, parameters and the
    /// input and output schemas.
    pub fn markdown(&self) -> String {
        let mut out = String::from("# Tools\n");
        let Value::Array(tools) = self.definitions() else {
            return out;
        };
        if tools.is_empty() {
            out.push_str("\nThis server has no tools.\n");
            return out;
        }
        out.push('\n');
        for tool in &tools {
            let name = tool["name"].as_str().unwrap_or_default();
            let _ = writeln!(out, "- [`{name}`](#{})", anchor(name));
        }
        for tool in &tools {
            render_tool(&mut out, tool);
        }
        out
    }
}

fn anchor(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn render_tool(out: &mut String, tool: &Value) {
    let name = tool["name"].as_str().unwrap_or_default();
    let _ = writeln!(out, "\n## `{name}`\n");
    if let Some(title) = tool["title"].as_str() {
        let _ = writeln!(out, "**{title}**\n");
    }
    let _ = writeln!(
        out,
        "{}",
        tool["description"].as_str().unwrap_or_default().trim()
    );
    if let Some(Value::Object(annotations)) = tool.get("annotations") {
        let hints: Vec<String> = annotations
            .iter()
            .map(|(key, value)| format!("`{key}: {value}`"))
            .collect();
        if !hints.is_empty() {
            let _ = writeln!(out, "\nAnnotations: {}", hints.join(", "));
        }
    }
    match tool
        .get("_meta")
        .and_then(|meta| meta.get(crate::protocol::framework::TASK_SUPPORT_META_KEY))
        .and_then(Value::as_str)
    {
        Some("required") => {
            let _ = writeln!(
                out,
                "\nRuns only as a task: clients must take the Tasks extension."
            );
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "\nRuns as a task for clients that take the Tasks extension."
            );
        }
        None => {}
    }
    if let Some(Value::Array(scopes)) = tool
        .get("_meta")
        .and_then(|meta| meta.get(crate::protocol::framework::SCOPES_META_KEY))
    {
        let scopes: Vec<String> = scopes
            .iter()
            .filter_map(Value::as_str)
            .map(|scope| format!("`{scope}`"))
            .collect();
        let _ = writeln!(out, "\nRequires the OAuth scopes: {}", scopes.join(", "));
    }
    render_parameters(out, &tool["inputSchema"]);
    if let Some(contract) = tool
        .get("_meta")
        .and_then(|meta| meta.get(crate::protocol::framework::STATE_META_KEY))
    {
        render_state_contract(out, contract);
    }
    let _ = writeln!(out, "\n### Input schema\n");
    code_block(out, &tool["inputSchema"]);
    if let Some(output) = tool.get("outputSchema") {
        let _ = writeln!(out, "\n### Output schema\n");
        code_block(out, output);
    }
}

fn render_parameters(out: &mut String, schema: &Value) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        let _ = writeln!(out, "\nNo parameters.");
        return;
    };
    if properties.is_empty() {
        let _ = writeln!(out, "\nNo parameters.");
        return;
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let _ = writeln!(out, "\n### Parameters\n");
    let _ = writeln!(out, "| Name | Type | Required | Description |");
    let _ = writeln!(out, "| --- | --- | --- | --- |");
    for (name, property) in properties {
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {} |",
            type_label(property),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                "no"
            },
            property["description"]
                .as_str()
                .unwrap_or_default()
                .replace('\n', " ")
                .replace('|', "\\|"),
        );
    }
}

/// The concurrency contract of a stateful tool, and every code its outcomes can carry with what
/// to do about it.
fn render_state_contract(out: &mut String, contract: &Value) {
    let text = |key: &str| contract[key].as_str().unwrap_or_default();
    let _ = writeln!(out, "\n### State contract\n");
    let mut facts = vec![format!(
        "{} a `{}`",
        capitalized(text("tool")),
        text("resource")
    )];
    if let Some(handle) = contract["handle"].as_str() {
        facts.push(format!("handle argument `{handle}`"));
    }
    if let Some(conflict) = contract["conflict"].as_str() {
        facts.push(format!("on conflict `{conflict}`"));
    }
    if let Some(touches) = contract["touches"].as_array() {
        let touches: Vec<String> = touches
            .iter()
            .filter_map(Value::as_str)
            .map(|field| format!("`{field}`"))
            .collect();
        facts.push(format!("touches {}", touches.join(", ")));
    }
    if contract["terminal"] == true {
        facts.push("terminal: the resource accepts no change afterwards".to_owned());
    }
    match contract["precondition"].as_str() {
        Some(argument) => facts.push(format!("precondition `{argument}`")),
        None => facts.push("no precondition".to_owned()),
    }
    match contract["idempotency"].as_str() {
        Some(argument) => facts.push(format!("idempotency key `{argument}`")),
        None => facts.push("no idempotency key".to_owned()),
    }
    let _ = writeln!(out, "{}.", facts.join("; "));
    let _ = writeln!(out, "\n| Code | Recovery | Meaning |");
    let _ = writeln!(out, "| --- | --- | --- |");
    for code in contract["codes"].as_array().into_iter().flatten() {
        let recovery = code["recovery"]
            .as_str()
            .map_or_else(|| "-".to_owned(), |recovery| format!("`{recovery}`"));
        let _ = writeln!(
            out,
            "| `{}` | {recovery} | {} |",
            code["code"].as_str().unwrap_or_default(),
            code["description"]
                .as_str()
                .unwrap_or_default()
                .replace('\n', " ")
                .replace('|', "\\|"),
        );
    }
    if contract["codes_open"] == true {
        let _ = writeln!(
            out,
            "\nThe tool's own error codes are not declared: other codes may appear."
        );
    }
}

fn type_label(property: &Value) -> String {
    match &property["type"] {
        Value::String(t) => format!("`{t}`"),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(" or "),
        _ => match property["$ref"].as_str() {
            Some(reference) => format!("`{}`", reference.rsplit('/').next().unwrap_or(reference)),
            None => "any".to_owned(),
        },
    }
}

fn code_block(out: &mut String, value: &Value) {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    let _ = writeln!(out, "```json\n{pretty}\n```");
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

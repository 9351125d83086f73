//! Documentation renderings of a tool set: one JSON document and one Markdown page.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::ToolSet;

impl ToolSet {
    /// A JSON document describing every tool: name, title, description, input and output
    /// schemas and annotations, in `tools/list` order, under `"tools"`.
    pub fn schema_document(&self) -> Value {
        json!({
            "protocolVersion": crate::protocol::PROTOCOL_VERSION,
            "tools": self.definitions(),
        })
    }

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
    render_parameters(out, &tool["inputSchema"]);
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

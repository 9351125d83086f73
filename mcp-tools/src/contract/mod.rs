//! A server's published contract as a file, and the classified differences between two of them.
//!
//! The contract is everything a server publishes, unfiltered: its tools exactly as `tools/list`
//! shows them, its prompts, resources and resource templates. Committed to a repository, it lets
//! a check tell whether a code change broke what the agents using the server were prompted with:
//! [`Contract::diff`] classifies every difference as [`Severity::Breaking`],
//! [`Severity::Compatible`] or [`Severity::Cosmetic`].
//!
//! ```
//! use mcp_tools::contract::{Contract, Severity};
//! use serde_json::json;
//!
//! let tool = |required: serde_json::Value| {
//!     json!({
//!         "name": "echo",
//!         "inputSchema": {
//!             "type": "object",
//!             "properties": { "text": { "type": "string" }, "loud": { "type": "boolean" } },
//!             "required": required,
//!         },
//!     })
//! };
//! let old = Contract::new("2026-07-28", vec![tool(json!(["text"]))], vec![], vec![], vec![]);
//! let new = Contract::new("2026-07-28", vec![tool(json!(["text", "loud"]))], vec![], vec![], vec![]);
//!
//! let diff = old.diff(&new);
//! assert_eq!(diff.max_severity(), Some(Severity::Breaking));
//! assert_eq!(
//!     diff.to_string(),
//!     "breaking: tool echo: inputSchema.properties.loud: input argument \"loud\" made required\n\
//!      1 change: 1 breaking, 0 compatible, 0 cosmetic"
//! );
//! assert_eq!(Contract::parse(&old.to_json_string()).unwrap(), old);
//! ```

mod diff;
mod schema;
mod sink;

use std::fmt;

use serde_json::{Map, Value, json};

/// The version of the contract file format this build writes, and the only one it reads.
pub const FORMAT_VERSION: u64 = 1;

/// What a server publishes: the entries of `tools/list`, `prompts/list`, `resources/list` and
/// `resources/templates/list`, each list sorted by its identifying member.
#[derive(Debug, Clone, PartialEq)]
pub struct Contract {
    protocol_version: String,
    tools: Vec<Value>,
    prompts: Vec<Value>,
    resources: Vec<Value>,
    resource_templates: Vec<Value>,
}

/// Each list of the file: its member and the member that identifies an entry.
const LISTS: [(&str, &str); 4] = [
    ("tools", "name"),
    ("prompts", "name"),
    ("resources", "uri"),
    ("resourceTemplates", "uriTemplate"),
];

impl Contract {
    /// A contract from the published entries, in any order: each list is sorted (tools and
    /// prompts by `name`, resources by `uri`, templates by `uriTemplate`) so that the file it
    /// writes does not depend on registration order.
    ///
    /// Entries are taken as they are; [`parse`](Contract::parse) is the one that refuses
    /// unnamed or duplicate entries.
    pub fn new(
        protocol_version: impl Into<String>,
        tools: Vec<Value>,
        prompts: Vec<Value>,
        resources: Vec<Value>,
        resource_templates: Vec<Value>,
    ) -> Contract {
        let sorted = |mut entries: Vec<Value>, key: &str| {
            entries.sort_by(|a, b| name_of(a, key).cmp(name_of(b, key)));
            entries
        };
        Contract {
            protocol_version: protocol_version.into(),
            tools: sorted(tools, "name"),
            prompts: sorted(prompts, "name"),
            resources: sorted(resources, "uri"),
            resource_templates: sorted(resource_templates, "uriTemplate"),
        }
    }

    /// Reads a contract file written by [`to_json_string`](Contract::to_json_string) (or by
    /// hand). The lists may be left out when empty; anything else missing, misnamed, of the
    /// wrong type, unnamed or duplicated is an error saying what to fix.
    pub fn parse(text: &str) -> Result<Contract, ContractError> {
        let value: Value = serde_json::from_str(text).map_err(|source| ContractError::Json {
            line: source.line(),
            column: source.column(),
            source,
        })?;
        let Value::Object(mut file) = value else {
            return Err(ContractError::NotAnObject {
                found: kind_of(&value),
            });
        };
        match file.remove("formatVersion") {
            None => return Err(ContractError::MissingFormatVersion),
            Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
            Some(Value::Number(n)) => {
                return Err(ContractError::UnsupportedFormatVersion {
                    found: n.to_string(),
                });
            }
            Some(other) => {
                return Err(ContractError::WrongType {
                    member: "formatVersion".into(),
                    expected: "an integer",
                    found: kind_of(&other),
                });
            }
        }
        let protocol_version = match file.remove("protocolVersion") {
            None => return Err(ContractError::MissingProtocolVersion),
            Some(Value::String(version)) => version,
            Some(other) => {
                return Err(ContractError::WrongType {
                    member: "protocolVersion".into(),
                    expected: "a string",
                    found: kind_of(&other),
                });
            }
        };
        let mut lists = Vec::with_capacity(LISTS.len());
        for (member, key) in LISTS {
            lists.push(take_list(&mut file, member, key)?);
        }
        if let Some(member) = file.keys().next() {
            return Err(ContractError::UnknownMember {
                member: member.clone(),
            });
        }
        let [tools, prompts, resources, templates] =
            <[Vec<Value>; 4]>::try_from(lists).expect("one list per member");
        Ok(Contract::new(
            protocol_version,
            tools,
            prompts,
            resources,
            templates,
        ))
    }

    /// The contract file: pretty-printed JSON, object keys sorted, lists sorted, ending with a
    /// newline, so the same contract always gives the same bytes.
    pub fn to_json_string(&self) -> String {
        let file = json!({
            "formatVersion": FORMAT_VERSION,
            "protocolVersion": self.protocol_version,
            "tools": self.tools,
            "prompts": self.prompts,
            "resources": self.resources,
            "resourceTemplates": self.resource_templates,
        });
        let mut text = serde_json::to_string_pretty(&file).expect("a JSON value always serializes");
        text.push('\n');
        text
    }

    /// The protocol revision the contract was published under.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The tools, as `tools/list` shows them, sorted by name.
    pub fn tools(&self) -> &[Value] {
        &self.tools
    }

    /// The prompts, as `prompts/list` shows them, sorted by name.
    pub fn prompts(&self) -> &[Value] {
        &self.prompts
    }

    /// The resources, as `resources/list` shows them, sorted by URI.
    pub fn resources(&self) -> &[Value] {
        &self.resources
    }

    /// The resource templates, as `resources/templates/list` shows them, sorted by URI template.
    pub fn resource_templates(&self) -> &[Value] {
        &self.resource_templates
    }

    /// Every difference from this contract to `newer`, classified from the point of view of a
    /// caller built against this one.
    pub fn diff(&self, newer: &Contract) -> ContractDiff {
        ContractDiff {
            changes: diff::contracts(self, newer),
        }
    }
}

fn take_list(
    file: &mut Map<String, Value>,
    member: &'static str,
    key: &'static str,
) -> Result<Vec<Value>, ContractError> {
    let entries = match file.remove(member) {
        None => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            return Err(ContractError::WrongType {
                member: member.into(),
                expected: "an array",
                found: kind_of(&other),
            });
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for (index, entry) in entries.iter().enumerate() {
        if !entry.is_object() {
            return Err(ContractError::WrongType {
                member: format!("{member}[{index}]"),
                expected: "an object",
                found: kind_of(entry),
            });
        }
        let Some(name) = entry.get(key).and_then(Value::as_str) else {
            return Err(ContractError::Unnamed {
                list: member,
                index,
                key,
            });
        };
        if !seen.insert(name) {
            return Err(ContractError::Duplicate {
                list: member,
                key,
                name: name.to_owned(),
            });
        }
    }
    Ok(entries)
}

fn name_of<'v>(entry: &'v Value, key: &str) -> &'v str {
    entry.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a contract file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The text is not JSON.
    #[error("the contract is not valid JSON: {source}")]
    Json {
        /// The line of the first error, from 1.
        line: usize,
        /// The column of the first error, from 1.
        column: usize,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The JSON is not an object.
    #[error(
        "the contract must be a JSON object with `formatVersion`, `protocolVersion`, `tools`, \
         `prompts`, `resources` and `resourceTemplates`; found {found}"
    )]
    NotAnObject {
        /// What the JSON is instead.
        found: &'static str,
    },
    /// `formatVersion` is missing.
    #[error(
        "the contract has no `formatVersion`: add `\"formatVersion\": {FORMAT_VERSION}` \
         (this build reads format version {FORMAT_VERSION} only)"
    )]
    MissingFormatVersion,
    /// `formatVersion` is a number this build does not read.
    #[error(
        "contract format version {found} is not supported: this build reads format version \
         {FORMAT_VERSION} only; regenerate the file with this build or use a build that reads it"
    )]
    UnsupportedFormatVersion {
        /// The version the file declares.
        found: String,
    },
    /// `protocolVersion` is missing.
    #[error(
        "the contract has no `protocolVersion`: add the protocol revision the server speaks, \
         e.g. `\"protocolVersion\": \"2026-07-28\"`"
    )]
    MissingProtocolVersion,
    /// A member holds the wrong type of value.
    #[error("`{member}` must be {expected}, found {found}")]
    WrongType {
        /// The member, e.g. `tools` or `tools[2]`.
        member: String,
        /// What it must be.
        expected: &'static str,
        /// What it is.
        found: &'static str,
    },
    /// A member the format does not have, often a misspelling.
    #[error(
        "unknown member `{member}`: a format {FORMAT_VERSION} contract has only `formatVersion`, \
         `protocolVersion`, `tools`, `prompts`, `resources` and `resourceTemplates`"
    )]
    UnknownMember {
        /// The member's name.
        member: String,
    },
    /// An entry of a list lacks the string that identifies it.
    #[error("`{list}[{index}]` has no `{key}` string: every entry of `{list}` is identified by it")]
    Unnamed {
        /// The list.
        list: &'static str,
        /// The entry's position in the file, from 0.
        index: usize,
        /// The identifying member (`name`, `uri` or `uriTemplate`).
        key: &'static str,
    },
    /// Two entries of a list have the same identifier.
    #[error("`{list}` has more than one entry with `{key}` {name:?}: keep one")]
    Duplicate {
        /// The list.
        list: &'static str,
        /// The identifying member.
        key: &'static str,
        /// The repeated identifier.
        name: String,
    },
}

/// How much a change matters to callers built against the older contract; ordered from least
/// to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Wording only (descriptions, titles, examples, icons): nothing a caller sends or receives
    /// changes.
    Cosmetic,
    /// Existing callers keep working: something was added or widened where they send, or
    /// narrowed where they receive.
    Compatible,
    /// Existing callers may fail, or act on a promise that no longer holds.
    Breaking,
}

impl Severity {
    /// The lower-case name: `breaking`, `compatible` or `cosmetic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Cosmetic => "cosmetic",
            Severity::Compatible => "compatible",
            Severity::Breaking => "breaking",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One classified difference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    severity: Severity,
    location: String,
    message: String,
}

impl Change {
    /// How much it matters.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// Where: the entry (`tool basket_get`), then, when the change is inside it, a path such as
    /// `inputSchema.properties.basket_id` or `outputSchema.$defs.Basket.properties.notes`.
    /// Schema paths through a `$ref` start at the definition.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// One sentence saying what changed, with the old and new values when they are short.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.severity, self.location, self.message)
    }
}

/// Every difference between two contracts, breaking ones first, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractDiff {
    changes: Vec<Change>,
}

impl ContractDiff {
    /// The changes: breaking first, then compatible, then cosmetic; within a severity in the
    /// order of the contract (tools, prompts, resources, templates, each by name).
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Whether any change is breaking.
    pub fn is_breaking(&self) -> bool {
        self.max_severity() == Some(Severity::Breaking)
    }

    /// The severity of the most serious change; `None` when nothing changed.
    pub fn max_severity(&self) -> Option<Severity> {
        self.changes.iter().map(Change::severity).max()
    }

    fn count(&self, severity: Severity) -> usize {
        self.changes
            .iter()
            .filter(|change| change.severity == severity)
            .count()
    }

    /// The report for tools: `{"breaking": n, "compatible": n, "cosmetic": n, "changes":
    /// [{"severity", "location", "message"}]}`, changes in the order of
    /// [`changes`](ContractDiff::changes).
    pub fn to_json(&self) -> Value {
        json!({
            "breaking": self.count(Severity::Breaking),
            "compatible": self.count(Severity::Compatible),
            "cosmetic": self.count(Severity::Cosmetic),
            "changes": self.changes.iter().map(|change| json!({
                "severity": change.severity.as_str(),
                "location": change.location,
                "message": change.message,
            })).collect::<Vec<_>>(),
        })
    }
}

/// One line per change (`breaking: tool basket_get: …`), breaking first, then a line counting
/// them; `no changes` when there are none.
impl fmt::Display for ContractDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return f.write_str("no changes");
        }
        for change in &self.changes {
            writeln!(f, "{change}")?;
        }
        let total = self.changes.len();
        write!(
            f,
            "{total} change{}: {} breaking, {} compatible, {} cosmetic",
            if total == 1 { "" } else { "s" },
            self.count(Severity::Breaking),
            self.count(Severity::Compatible),
            self.count(Severity::Cosmetic),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_lists_are_sorted_by_their_identifying_member() {
        let contract = Contract::new(
            "2026-07-28",
            vec![json!({"name": "b"}), json!({"name": "a"})],
            vec![],
            vec![json!({"uri": "z:1"}), json!({"uri": "a:1"})],
            vec![],
        );
        assert_eq!(contract.tools()[0]["name"], "a");
        assert_eq!(contract.resources()[0]["uri"], "a:1");
    }

    #[test]
    fn contract_parse_error_names_the_offending_entry() {
        let error = Contract::parse(
            r#"{"formatVersion": 1, "protocolVersion": "x", "prompts": [{"name": "a"}, {}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "`prompts[1]` has no `name` string: every entry of `prompts` is identified by it"
        );
    }
}

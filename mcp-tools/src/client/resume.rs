//! Resuming from a record: what the harness has seen, as records to save; a saved record taken
//! back; and a record revalidated against the server before anything acts on it.

use serde_json::{Value, json};

use super::api::ToolCall;
use super::catalog::ListedTool;
use super::error::{ClientError, RecordError, ToolFailure};
use super::harness::{Harness, Outcome};
use super::records::ResumptionRecord;
use super::result::ToolResult;
use crate::protocol::framework::code;
use crate::store::{FieldChange, Rejected, Snapshot};
use crate::sync::lock;

/// What a resource became since a record's basis.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Resumed {
    /// Still at the record's version: the plan made at it holds.
    Unchanged(Snapshot),
    /// Changed since the record's version: what changed (in the entity's view; `None` once the
    /// server no longer keeps that version's history) and the resource now.
    Changed {
        /// The record's version.
        since: u64,
        /// What changed since, when the server still knows.
        delta: Option<Vec<FieldChange>>,
        /// The resource now.
        current: Snapshot,
    },
    /// The resource outlived its time to live.
    Expired(Rejected),
    /// The resource is gone, or not available to this caller (`NOT_FOUND`).
    Gone(Rejected),
}

impl Harness {
    /// What the caller last saw of the resource `handle`, as a record to save.
    pub fn record(&self, handle: &str) -> Option<ResumptionRecord> {
        lock(&self.inner.seen).get(handle).cloned()
    }

    /// Every resource the caller has seen, as records to save, ordered by handle.
    pub fn records(&self) -> Vec<ResumptionRecord> {
        let mut records: Vec<ResumptionRecord> = lock(&self.inner.seen).values().cloned().collect();
        records.sort_by(|a, b| a.handle.cmp(&b.handle));
        records
    }

    /// Takes a saved record as what the caller has seen of its resource (unless it has seen a
    /// newer version), so a change it makes without a basis is based on the record's. A record
    /// of another server is refused.
    pub fn remember(&self, record: ResumptionRecord) -> Result<(), ClientError> {
        self.check_server(&record)?;
        let mut seen = lock(&self.inner.seen);
        match seen.get(&record.handle) {
            Some(known) if known.basis_version > record.basis_version => {}
            _ => {
                seen.insert(record.handle.clone(), record);
            }
        }
        Ok(())
    }

    fn check_server(&self, record: &ResumptionRecord) -> Result<(), RecordError> {
        if record.server != self.inner.server {
            return Err(RecordError::OtherServer {
                recorded: record.server.clone(),
                connected: self.inner.server.clone(),
            });
        }
        Ok(())
    }

    /// Revalidates a record: reads its resource since the record's basis (the server's
    /// `reads` tool for that kind, with `basis_version`, the validator when the record has
    /// one) and says whether it is [`Unchanged`](Resumed::Unchanged),
    /// [`Changed`](Resumed::Changed) with what changed, [`Expired`](Resumed::Expired) or
    /// [`Gone`](Resumed::Gone). What it shows is then what the caller has seen.
    ///
    /// A record of another server, or one whose basis the server refuses (a validator it did
    /// not issue, a version the resource never reached), is [`ClientError::Record`]; nothing is
    /// sent for a record of another server.
    pub async fn resume(&self, record: &ResumptionRecord) -> Result<Resumed, ClientError> {
        self.check_server(record)?;
        let tool = self.reading_tool(&record.resource).await?;
        let handle_argument = tool
            .state_rules()
            .and_then(|rules| rules.handle_argument())
            .unwrap_or_default()
            .to_owned();
        let basis = match &record.validator {
            Some(validator) => Value::String(validator.clone()),
            None => record.basis_version.into(),
        };
        let arguments = json!({ handle_argument: record.handle, "basis_version": basis });
        let outcome = self
            .call_with(ToolCall::new(tool.name(), arguments))
            .await?;
        match outcome {
            Outcome::Current(current) if current.version == record.basis_version => {
                Ok(Resumed::Unchanged(current))
            }
            Outcome::Current(current) => {
                let delta = current
                    .changes
                    .as_ref()
                    .filter(|changes| {
                        changes.delta_available && changes.since_version == record.basis_version
                    })
                    .map(|changes| changes.delta.clone());
                Ok(Resumed::Changed {
                    since: record.basis_version,
                    delta,
                    current,
                })
            }
            Outcome::Expired(rejected) => Ok(Resumed::Expired(rejected)),
            Outcome::Rejected(rejected) if rejected.code == code::NOT_FOUND => {
                // A store may have swept an expired resource away: the record says why.
                if record.expired() {
                    Ok(Resumed::Expired(rejected))
                } else {
                    Ok(Resumed::Gone(rejected))
                }
            }
            Outcome::Rejected(rejected)
                if matches!(
                    rejected.code.as_str(),
                    code::INVALID_VALIDATOR | code::FUTURE_VERSION
                ) =>
            {
                Err(RecordError::BasisRefused {
                    code: rejected.code,
                    message: rejected.message,
                }
                .into())
            }
            Outcome::Rejected(rejected) | Outcome::Terminal(rejected) => {
                Err(ClientError::Tool(Box::new(ToolFailure {
                    tool: tool.name().to_owned(),
                    code: Some(rejected.code),
                    message: rejected.message,
                    recovery: rejected.recovery,
                    details: rejected.details,
                    result: ToolResult::default(),
                })))
            }
            other => Err(ClientError::Protocol(format!(
                "{} answered a read since a basis with {other:?}",
                tool.name()
            ))),
        }
    }

    /// The tool that reads `resource` since a basis: a `reads` tool of that kind whose only
    /// required arguments are the handle and `basis_version`; one that runs as a task, then one
    /// with more arguments, only when there is no other.
    async fn reading_tool(&self, resource: &str) -> Result<ListedTool, ClientError> {
        let tools = self.client().list_tools().await?;
        let usable = |tool: &&ListedTool| {
            let Some(rules) = tool.state_rules() else {
                return false;
            };
            let Some(handle) = rules.handle_argument() else {
                return false;
            };
            let schema = tool.input_schema();
            let required_ok = schema["required"].as_array().is_none_or(|required| {
                required
                    .iter()
                    .all(|name| name == handle || name == "basis_version")
            });
            rules.reads()
                && rules.resource() == resource
                && schema["properties"].get("basis_version").is_some()
                && required_ok
        };
        tools
            .iter()
            .filter(usable)
            .min_by_key(|tool| {
                let properties = tool.input_schema()["properties"]
                    .as_object()
                    .map_or(0, |properties| properties.len());
                (tool.task_support().is_some(), properties)
            })
            .cloned()
            .ok_or_else(|| {
                RecordError::NoRead {
                    resource: resource.to_owned(),
                }
                .into()
            })
    }
}

//! The server's contract: everything it publishes, whoever asks.

use serde_json::Value;

use super::McpServer;
use crate::contract::Contract;

impl McpServer {
    /// The contract of this server: every tool as `tools/list` shows it, every prompt, resource
    /// and resource template, unfiltered by any caller's scopes, in a deterministic order.
    ///
    /// Commit it next to the code ([`Contract::to_json_string`]) and compare it in CI
    /// ([`assert_contract`](crate::testing::assert_contract), or `contract check` of the
    /// command line, `mcp_tools::cli` with the `cli` feature): a renamed argument, a new
    /// required field or a removed outcome code then shows up as a breaking change before
    /// agents prompted with the old contract meet it.
    pub fn contract(&self) -> Contract {
        let snapshot = self.shared.snapshot.load();
        let tools = snapshot
            .catalog
            .tools
            .iter()
            .map(|tool| serde_json::to_value(&tool.definition).expect("definitions serialize"))
            .collect();
        let offer = &snapshot.offer;
        let descriptors =
            |descriptors: &mut dyn Iterator<Item = &serde_json::Map<String, Value>>| {
                descriptors
                    .map(|descriptor| Value::Object(descriptor.clone()))
                    .collect()
            };
        let prompts = descriptors(&mut offer.prompts.prompts.iter().map(|p| &p.descriptor));
        let resources = descriptors(&mut offer.resources.resources.iter().map(|r| &r.descriptor));
        let templates = descriptors(&mut offer.resources.templates.iter().map(|t| &t.descriptor));
        Contract::new(
            crate::protocol::PROTOCOL_VERSION,
            tools,
            prompts,
            resources,
            templates,
        )
    }

    /// The Markdown page of the server's tools (as `docs` of the command line prints it).
    pub fn docs(&self) -> String {
        self.shared.snapshot.load().offer.tools.markdown()
    }
}

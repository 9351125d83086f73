//! The compiled catalog: one consistent version of what the server offers, with its listing
//! pages serialized once, cursors included.

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use super::BuildError;
use super::builder::ListSettings;
use crate::completion::Completions;
use crate::prompts::PromptSet;
use crate::protocol::result::Results;
use crate::protocol::seal::Seal;
use crate::resources::ResourceSet;
use crate::tools::set::{Catalog, ToolSet};

/// Everything the server offers: tools, resources, prompts, completions. Replaced whole when it
/// changes at run time, so a request sees one consistent version.
#[derive(Clone, Default)]
pub(crate) struct Offer {
    pub(crate) tools: ToolSet,
    pub(crate) resources: ResourceSet,
    pub(crate) prompts: PromptSet,
    pub(crate) completions: Completions,
}

/// What does not change when the offer changes.
pub(crate) struct Base {
    /// Every version served: the current one, then the legacy ones when that era is on.
    pub(crate) supported_versions: Vec<&'static str>,
    /// Finishes every result body.
    pub(crate) results: Results,
    pub(crate) instructions: Option<String>,
    pub(crate) settings: ListSettings,
    /// Seals cursors and request state.
    pub(crate) seal: Seal,
    pub(crate) logging: bool,
    /// How many snapshots were compiled, for the test that requests compile none.
    #[cfg(feature = "test-hooks")]
    pub(crate) snapshots_compiled: std::sync::atomic::AtomicUsize,
}

/// One listing, serialized page by page, cursors included.
pub(crate) struct Listing {
    pub(crate) kind: &'static str,
    pub(crate) pages: Vec<Bytes>,
    pub(crate) fingerprint: u64,
}

impl Base {
    pub(crate) fn snapshot(&self, offer: Offer) -> Result<Snapshot, BuildError> {
        #[cfg(feature = "test-hooks")]
        self.snapshots_compiled
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let catalog = offer.tools.compile()?;
        if let Some(name) = first_repeated(offer.prompts.prompts.iter().map(|p| p.name.as_str())) {
            return Err(BuildError::DuplicatePrompt(name.to_owned()));
        }
        let uris = offer.resources.resources.iter().map(|r| r.uri.as_str());
        let templates = offer
            .resources
            .templates
            .iter()
            .filter_map(|t| t.descriptor.get("uriTemplate").and_then(Value::as_str));
        if let Some(uri) = first_repeated(uris).or_else(|| first_repeated(templates)) {
            return Err(BuildError::DuplicateResource(uri.to_owned()));
        }
        let definitions = catalog
            .tools
            .iter()
            .map(|tool| serde_json::to_value(&tool.definition).expect("definitions serialize"))
            .collect();
        let tools = self.listing("tools/list", "tools", definitions);
        let resources = self.listing(
            "resources/list",
            "resources",
            offer
                .resources
                .resources
                .iter()
                .map(|r| Value::Object(r.descriptor.clone()))
                .collect(),
        );
        let templates = self.listing(
            "resources/templates/list",
            "resourceTemplates",
            offer
                .resources
                .templates
                .iter()
                .map(|t| Value::Object(t.descriptor.clone()))
                .collect(),
        );
        let prompts = self.listing(
            "prompts/list",
            "prompts",
            offer
                .prompts
                .prompts
                .iter()
                .map(|p| Value::Object(p.descriptor.clone()))
                .collect(),
        );
        let mut capabilities = serde_json::Map::new();
        if !catalog.tools.is_empty() {
            capabilities.insert("tools".into(), json!({ "listChanged": true }));
        }
        if !offer.resources.is_empty() {
            capabilities.insert(
                "resources".into(),
                json!({ "subscribe": true, "listChanged": true }),
            );
        }
        if !offer.prompts.is_empty() {
            capabilities.insert("prompts".into(), json!({ "listChanged": true }));
        }
        if !offer.completions.is_empty() {
            capabilities.insert("completions".into(), json!({}));
        }
        if self.logging {
            capabilities.insert("logging".into(), json!({}));
        }
        let mut discover = Map::new();
        discover.insert("supportedVersions".into(), json!(self.supported_versions));
        discover.insert("capabilities".into(), Value::Object(capabilities.clone()));
        if let Some(instructions) = &self.instructions {
            discover.insert("instructions".into(), json!(instructions));
        }
        let discover = self.results.cacheable(discover);
        Ok(Snapshot {
            discover: Bytes::from(discover.to_string()),
            capabilities: Value::Object(capabilities),
            catalog,
            tools,
            resources,
            templates,
            prompts,
            offer,
        })
    }

    /// Serializes every page of a listing once.
    fn listing(&self, kind: &'static str, member: &str, items: Vec<Value>) -> Listing {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(Value::Array(items.clone()).to_string().as_bytes())
            .chain_update(self.settings.page_size.to_be_bytes())
            .finalize();
        let fingerprint = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        let chunks: Vec<&[Value]> = if items.is_empty() {
            vec![&[]]
        } else {
            items.chunks(self.settings.page_size).collect()
        };
        let count = chunks.len();
        let pages = chunks
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut page = Map::new();
                page.insert(member.into(), json!(chunk));
                if i + 1 < count {
                    let position = u32::try_from(i + 1).expect("fewer than 2^32 pages");
                    page.insert(
                        "nextCursor".into(),
                        json!(self.seal.cursor(kind, position, fingerprint)),
                    );
                }
                Bytes::from(self.results.cacheable(page).to_string())
            })
            .collect();
        Listing {
            kind,
            pages,
            fingerprint,
        }
    }
}

/// One consistent version of what the server offers, with its serialized listings.
pub(crate) struct Snapshot {
    pub(crate) discover: Bytes,
    pub(crate) capabilities: Value,
    pub(crate) catalog: Catalog,
    pub(crate) tools: Listing,
    pub(crate) resources: Listing,
    pub(crate) templates: Listing,
    pub(crate) prompts: Listing,
    pub(crate) offer: Offer,
}

/// The first item that appears twice.
fn first_repeated<'a>(items: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    items.into_iter().find(|item| !seen.insert(*item))
}

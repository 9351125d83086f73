//! The compiled catalog: one consistent version of what the server offers, with its listing
//! pages serialized once, cursors included.

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::BuildError;
use super::builder::ListSettings;
use crate::auth::scope::Required;
use crate::completion::Completions;
use crate::prompts::PromptSet;
use crate::protocol::result::Results;
use crate::protocol::seal::Seal;
use crate::resources::ResourceSet;
use crate::server::access::Access;
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
    /// Whether listings are filtered by the caller's scopes (the server is an OAuth resource
    /// server), so each keeps what it is made of.
    pub(crate) filter_listings: bool,
    /// How many snapshots were compiled, for the test that requests compile none.
    #[cfg(feature = "test-hooks")]
    pub(crate) snapshots_compiled: std::sync::atomic::AtomicUsize,
}

/// One listing, serialized page by page, cursors included.
pub(crate) struct Listing {
    pub(crate) kind: &'static str,
    pub(crate) pages: Vec<Bytes>,
    pub(crate) fingerprint: u64,
    /// What the listing is made of, to list only what a caller's scopes allow; absent from
    /// the listings made that way.
    scoped: Option<Box<Scoped>>,
}

/// The items of a listing with the scopes each requires, and the listings already made for
/// the sets of visible items seen so far.
struct Scoped {
    member: &'static str,
    items: Vec<Value>,
    scopes: Vec<Required>,
    made: Mutex<HashMap<Vec<bool>, Arc<Listing>>>,
}

/// At most this many filtered listings are kept per listing; past it they are made per request.
/// Each distinct set of granted scopes that sees a different subset adds one.
const MAX_FILTERED_LISTINGS: usize = 64;

/// A listing as one caller may see it.
pub(crate) enum Visible<'a> {
    All(&'a Listing),
    Some(Arc<Listing>),
}

impl std::ops::Deref for Visible<'_> {
    type Target = Listing;
    fn deref(&self) -> &Listing {
        match self {
            Visible::All(listing) => listing,
            Visible::Some(listing) => listing,
        }
    }
}

impl Listing {
    /// The listing with only the items whose scopes `granted` covers.
    pub(crate) fn visible_to<'a>(&'a self, base: &Base, access: Access<'_>) -> Visible<'a> {
        let Some(scoped) = &self.scoped else {
            return Visible::All(self);
        };
        let visible: Vec<bool> = scoped
            .scopes
            .iter()
            .map(|own| access.granted.satisfies(access.oauth.requirement(own)))
            .collect();
        if visible.iter().all(|&shown| shown) {
            return Visible::All(self);
        }
        let mut made = scoped.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(listing) = made.get(&visible) {
            return Visible::Some(listing.clone());
        }
        let items = scoped
            .items
            .iter()
            .zip(&visible)
            .filter(|(_, shown)| **shown)
            .map(|(item, _)| item.clone())
            .collect();
        let listing = Arc::new(base.listing(self.kind, scoped.member, items));
        if made.len() < MAX_FILTERED_LISTINGS {
            made.insert(visible, listing.clone());
        }
        Visible::Some(listing)
    }
}

impl Offer {
    /// Every scope a tool, resource, template or prompt requires.
    pub(crate) fn declared_scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = self
            .tools
            .scopes()
            .chain(
                self.resources
                    .resources
                    .iter()
                    .flat_map(|r| r.scopes.iter()),
            )
            .chain(
                self.resources
                    .templates
                    .iter()
                    .flat_map(|t| t.scopes.iter()),
            )
            .chain(self.prompts.prompts.iter().flat_map(|p| p.scopes.iter()))
            .map(str::to_owned)
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }
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
        let owners = offer
            .resources
            .resources
            .iter()
            .map(|r| (&r.scopes, format!("resource {:?}", r.uri)))
            .chain(offer.resources.templates.iter().map(|t| {
                let template = t.descriptor.get("uriTemplate").and_then(Value::as_str);
                (
                    &t.scopes,
                    format!("resource template {:?}", template.unwrap_or("")),
                )
            }))
            .chain(
                offer
                    .prompts
                    .prompts
                    .iter()
                    .map(|p| (&p.scopes, format!("prompt {:?}", p.name))),
            );
        for (scopes, owner) in owners {
            if let Some(scope) = scopes.first_invalid() {
                return Err(BuildError::InvalidScope {
                    owner,
                    scope: scope.to_owned(),
                });
            }
        }
        let definitions = catalog
            .tools
            .iter()
            .map(|tool| serde_json::to_value(&tool.definition).expect("definitions serialize"))
            .collect();
        let tools = self.scoped_listing(
            "tools/list",
            "tools",
            definitions,
            catalog
                .tools
                .iter()
                .map(|t| t.definition.scopes.clone())
                .collect(),
        );
        let resources = self.scoped_listing(
            "resources/list",
            "resources",
            offer
                .resources
                .resources
                .iter()
                .map(|r| Value::Object(r.descriptor.clone()))
                .collect(),
            offer
                .resources
                .resources
                .iter()
                .map(|r| r.scopes.clone())
                .collect(),
        );
        let templates = self.scoped_listing(
            "resources/templates/list",
            "resourceTemplates",
            offer
                .resources
                .templates
                .iter()
                .map(|t| Value::Object(t.descriptor.clone()))
                .collect(),
            offer
                .resources
                .templates
                .iter()
                .map(|t| t.scopes.clone())
                .collect(),
        );
        let prompts = self.scoped_listing(
            "prompts/list",
            "prompts",
            offer
                .prompts
                .prompts
                .iter()
                .map(|p| Value::Object(p.descriptor.clone()))
                .collect(),
            offer
                .prompts
                .prompts
                .iter()
                .map(|p| p.scopes.clone())
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
        let tasks = catalog
            .tools
            .iter()
            .any(|tool| tool.definition.task_support != crate::tools::TaskSupport::Forbidden);
        if tasks {
            capabilities.insert(
                "extensions".into(),
                json!({ crate::tasks::TASKS_EXTENSION: {} }),
            );
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

    /// [`listing`](Self::listing), keeping the items and their scopes to make the listings of
    /// callers who may see fewer of them.
    fn scoped_listing(
        &self,
        kind: &'static str,
        member: &'static str,
        items: Vec<Value>,
        scopes: Vec<Required>,
    ) -> Listing {
        if !self.filter_listings {
            return self.listing(kind, member, items);
        }
        let mut listing = self.listing(kind, member, items.clone());
        listing.scoped = Some(Box::new(Scoped {
            member,
            items,
            scopes,
            made: Mutex::default(),
        }));
        listing
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
            scoped: None,
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

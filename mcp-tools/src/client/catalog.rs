//! The tools a server lists, kept as long as the server's `ttlMs` allows, with what a call
//! needs of each: the `Mcp-Param-*` headers its input schema declares, and the concurrency rules
//! a stateful tool publishes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::error::ClientError;
use crate::protocol::framework::{STATE_META_KEY, TASK_SUPPORT_META_KEY};
use crate::protocol::param_headers::{ParamHeader, declarations};
use crate::sync::lock;

/// The most pages one listing may take: a server whose cursors never end is refused.
pub(super) const MAX_PAGES: usize = 1000;

/// A tool as the server lists it. Cheap to clone: clones share the definition.
#[derive(Debug, Clone)]
pub struct ListedTool {
    inner: Arc<Listed>,
}

#[derive(Debug)]
struct Listed {
    /// The tool's definition, exactly as listed.
    definition: Value,
    /// Its `x-mcp-header` declarations.
    params: Vec<ParamHeader>,
    /// Its concurrency rules, when it publishes them.
    rules: Option<StateRules>,
}

impl ListedTool {
    /// Reads a listed definition; `Err` says why a client must not call it.
    pub(super) fn new(definition: Value) -> Result<ListedTool, String> {
        if !definition.get("name").is_some_and(Value::is_string) {
            return Err("a tool without a name".into());
        }
        let schema = definition
            .get("inputSchema")
            .filter(|schema| schema.is_object())
            .ok_or("no inputSchema object")?;
        let params = declarations(schema)?;
        let rules = definition
            .get("_meta")
            .and_then(|meta| meta.get(STATE_META_KEY))
            .and_then(StateRules::parse);
        Ok(ListedTool {
            inner: Arc::new(Listed {
                definition,
                params,
                rules,
            }),
        })
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        self.inner.definition["name"].as_str().unwrap_or_default()
    }

    /// Its description, when it has one.
    pub fn description(&self) -> Option<&str> {
        self.inner.definition["description"].as_str()
    }

    /// Its input schema.
    pub fn input_schema(&self) -> &Value {
        &self.inner.definition["inputSchema"]
    }

    /// Its output schema, when it has one.
    pub fn output_schema(&self) -> Option<&Value> {
        self.inner.definition.get("outputSchema")
    }

    /// Whether it runs as a task, as this framework's servers publish it (`"optional"` or
    /// `"required"`).
    pub fn task_support(&self) -> Option<&str> {
        self.inner.definition["_meta"][TASK_SUPPORT_META_KEY].as_str()
    }

    /// The concurrency rules of a stateful tool, as it publishes them under
    /// `_meta["io.github.mcp-tools/state"]`.
    pub fn state_rules(&self) -> Option<&StateRules> {
        self.inner.rules.as_ref()
    }

    /// The whole definition, exactly as listed.
    pub fn definition(&self) -> &Value {
        &self.inner.definition
    }

    pub(super) fn params(&self) -> &[ParamHeader] {
        &self.inner.params
    }
}

/// The machine-readable concurrency rules a stateful tool publishes in `tools/list`
/// (`_meta["io.github.mcp-tools/state"]`): what kind of resource it acts on, how, through
/// which arguments, and with which codes. Cheap to clone.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRules {
    raw: Arc<Value>,
}

impl StateRules {
    fn parse(raw: &Value) -> Option<StateRules> {
        let well_formed = raw["resource"].is_string() && raw["tool"].is_string();
        well_formed.then(|| StateRules {
            raw: Arc::new(raw.clone()),
        })
    }

    /// The kind of resource (the entity), e.g. `basket`.
    pub fn resource(&self) -> &str {
        self.raw["resource"].as_str().unwrap_or_default()
    }

    /// `creates`, `reads` or `mutates`.
    pub fn kind(&self) -> &str {
        self.raw["tool"].as_str().unwrap_or_default()
    }

    /// Whether the tool makes new resources.
    pub fn creates(&self) -> bool {
        self.kind() == "creates"
    }

    /// Whether the tool only reads.
    pub fn reads(&self) -> bool {
        self.kind() == "reads"
    }

    /// Whether the tool changes a resource.
    pub fn mutates(&self) -> bool {
        self.kind() == "mutates"
    }

    /// The argument that names the resource, e.g. `basket_id` (none for `creates`).
    pub fn handle_argument(&self) -> Option<&str> {
        self.raw["handle"].as_str()
    }

    /// The argument that carries the version a change is based on (`expected_version`), when
    /// the tool checks one.
    pub fn precondition_argument(&self) -> Option<&str> {
        self.raw["precondition"].as_str()
    }

    /// The argument that carries the operation id (`operation_id`), when the tool records one.
    pub fn idempotency_argument(&self) -> Option<&str> {
        self.raw["idempotency"].as_str()
    }

    /// How a `mutates` tool answers a stale view: `reject`, `rebase` or `reconfirm`.
    pub fn conflict(&self) -> Option<&str> {
        self.raw["conflict"].as_str()
    }

    /// The rules as published.
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

/// A listing: the tools, and until when it may be used.
struct Listing {
    tools: Arc<[ListedTool]>,
    by_name: HashMap<String, usize>,
    fresh_until: Option<Instant>,
}

/// The tools listed last, shared by every clone of a client.
pub(super) struct Catalog {
    // Each critical section replaces or reads the listing whole: consistent after a panic.
    listing: Mutex<Option<Arc<Listing>>>,
}

impl Catalog {
    pub(super) fn new() -> Catalog {
        Catalog {
            listing: Mutex::new(None),
        }
    }

    /// A tool of the last listing while the server's `ttlMs` lasts: `Some(None)` for a tool it
    /// does not list, `None` when there is no fresh listing.
    pub(super) fn fresh_tool(&self, name: &str) -> Option<Option<ListedTool>> {
        let listing = lock(&self.listing).clone()?;
        let fresh = listing
            .fresh_until
            .is_some_and(|until| Instant::now() < until);
        fresh.then(|| {
            listing
                .by_name
                .get(name)
                .map(|index| listing.tools[*index].clone())
        })
    }

    /// The tools of the last listing while the server's `ttlMs` lasts.
    pub(super) fn fresh(&self) -> Option<Arc<[ListedTool]>> {
        let listing = lock(&self.listing).clone()?;
        let fresh = listing
            .fresh_until
            .is_some_and(|until| Instant::now() < until);
        fresh.then(|| Arc::clone(&listing.tools))
    }

    /// A tool of the last listing, fresh or not, for what rarely changes (its `Mcp-Param-*`
    /// headers): a server that disagrees answers `-32020` and the client lists again.
    pub(super) fn known(&self, name: &str) -> Option<ListedTool> {
        let listing = lock(&self.listing).clone()?;
        listing
            .by_name
            .get(name)
            .map(|index| listing.tools[*index].clone())
    }

    /// Marks the listing stale (the server said the tools changed): the next listing asks.
    pub(super) fn invalidate(&self) {
        let mut slot = lock(&self.listing);
        let stale = slot.as_ref().map(|listing| Listing {
            tools: Arc::clone(&listing.tools),
            by_name: listing.by_name.clone(),
            fresh_until: None,
        });
        *slot = stale.map(Arc::new);
    }

    /// Keeps a new listing, fresh for `ttl`.
    pub(super) fn store(&self, tools: Vec<ListedTool>, ttl: Option<Duration>) -> Arc<[ListedTool]> {
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(index, tool)| (tool.name().to_owned(), index))
            .collect();
        let tools: Arc<[ListedTool]> = tools.into();
        let fresh_until = ttl
            .filter(|ttl| !ttl.is_zero())
            .and_then(|ttl| Instant::now().checked_add(ttl));
        *lock(&self.listing) = Some(Arc::new(Listing {
            tools: Arc::clone(&tools),
            by_name,
            fresh_until,
        }));
        tools
    }
}

/// One page of `tools/list`.
pub(super) struct Page {
    /// Its tools, those a client may call.
    pub(super) tools: Vec<ListedTool>,
    /// Where the next page starts, if there is one.
    pub(super) next_cursor: Option<String>,
    /// How long it may be kept, in milliseconds.
    pub(super) ttl_ms: u64,
    /// `public` or `private`.
    pub(super) cache_scope: Option<String>,
}

/// Reads one page of `tools/list`.
pub(super) fn page(result: &Map<String, Value>) -> Result<Page, ClientError> {
    let Some(Value::Array(listed)) = result.get("tools") else {
        return Err(ClientError::Protocol(
            "a tools/list result without a tools array".into(),
        ));
    };
    let mut tools = Vec::with_capacity(listed.len());
    for definition in listed {
        match ListedTool::new(definition.clone()) {
            Ok(tool) => tools.push(tool),
            Err(why) => tracing::warn!(
                tool = definition["name"].as_str().unwrap_or("?"),
                why,
                "a listed tool the client cannot call is left out"
            ),
        }
    }
    let cursor = match result.get("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor.clone()),
        Some(_) => {
            return Err(ClientError::Protocol(
                "a nextCursor that is not a string".into(),
            ));
        }
    };
    let ttl = result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
    let scope = result
        .get("cacheScope")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Page {
        tools,
        next_cursor: cursor,
        ttl_ms: ttl,
        cache_scope: scope,
    })
}

//! A server with tools of varied argument types and a stateful `counter` entity (create, read, a
//! rejecting mutation, a rebasing one, a reconfirmed terminal one, one without precondition),
//! on a fresh `MemoryStore` per input; a model of what the store holds; and the check of every
//! answer against it. The `arguments` and `validators` targets drive it.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::sync::Arc;

use mcp_tools::store::{
    Claim, ClaimedEffect, EffectStatus, Outbox, Settlement, StepOutcome, StepRequest, StepTransition,
    CreateRequest, Entity, Lifecycle, MutationOutcome, MutationRequest, PruneReport, ReadOutcome,
    ReadRequest, Store, StoreFuture, Transition,
};
use mcp_tools::tasks::{TaskChange, TaskInsert, TaskRecord, TaskStore};
use mcp_tools::tools::ToolSet;
use mcp_tools::{IntoToolError, McpServer, MemoryStore, tool, tools};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::answer;

// ---------------------------------------------------------------------------------------------
// Stateless tools with arguments of many types.

/// A colour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Red,
    Green,
    Blue,
}

/// A point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Across.
    pub x: i32,
    /// Down.
    pub y: i32,
    /// A label.
    #[serde(default)]
    pub label: Option<String>,
}

/// A shape, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Shape {
    /// A circle.
    Circle {
        /// Its radius.
        radius: u32,
    },
    /// A square.
    Square {
        /// Its side.
        side: u16,
    },
    /// A dot.
    Dot,
}

/// What `kinds` received, decoded.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Received {
    pub small: u8,
    pub signed: i16,
    pub big: u64,
    pub wide: i64,
    pub ratio: f64,
    pub colour: Colour,
    pub maybe: Option<u32>,
    pub fallback: u16,
    pub point: Point,
    pub tags: Vec<String>,
    pub shape: Option<Shape>,
    pub flag: bool,
}

/// Answers with every argument it decoded.
#[tool(read_only)]
#[allow(clippy::too_many_arguments)]
pub fn kinds(
    /// A byte.
    small: u8,
    /// A short.
    signed: i16,
    /// An unsigned 64-bit integer.
    big: u64,
    /// A signed 64-bit integer.
    wide: i64,
    /// A float.
    ratio: f64,
    /// A colour.
    colour: Colour,
    /// Maybe a number.
    maybe: Option<u32>,
    /// A number with a default.
    #[arg(default = 7)]
    fallback: u16,
    /// A point.
    point: Point,
    /// Tags, none by default.
    #[arg(default)]
    tags: Vec<String>,
    /// Maybe a shape.
    shape: Option<Shape>,
    /// A flag, off by default.
    #[arg(default)]
    flag: bool,
) -> Received {
    Received {
        small,
        signed,
        big,
        wide,
        ratio,
        colour,
        maybe,
        fallback,
        point,
        tags,
        shape,
        flag,
    }
}

/// Why `scale` refuses.
#[derive(Debug, IntoToolError)]
pub enum ScaleError {
    /// The product leaves the range of a 64-bit integer.
    #[recovery(custom = "fix_the_arguments")]
    Overflow,
}

impl std::fmt::Display for ScaleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the product overflows")
    }
}

/// Multiplies `factor` by `times` (default 1).
#[tool]
pub fn scale(
    /// The factor.
    factor: i32,
    /// How many times.
    #[arg(default = 1)]
    times: u8,
    /// A unit.
    unit: Option<Colour>,
) -> Result<String, ScaleError> {
    let product = i64::from(factor)
        .checked_mul(i64::from(times))
        .ok_or(ScaleError::Overflow)?;
    Ok(format!("{product} {unit:?}"))
}

// ---------------------------------------------------------------------------------------------
// The stateful entity.

/// A counter several callers share by handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(kind = "counter", prefix = "ctr", lifecycle = lifecycle)]
pub struct Counter {
    /// The count.
    pub count: i64,
    /// A label.
    pub label: String,
    /// Closed counters accept no change.
    pub closed: bool,
    /// Notes, in order.
    pub notes: Vec<String>,
}

impl Counter {
    fn lifecycle(&self) -> Lifecycle {
        if self.closed {
            Lifecycle::Terminal
        } else {
            Lifecycle::Active
        }
    }
}

/// Why a counter refuses a change.
#[derive(Debug, IntoToolError)]
pub enum CounterError {
    /// The count would leave the range of a 64-bit integer.
    #[recovery = "refresh_and_replan"]
    Overflow,
    /// A step of zero changes nothing.
    #[code = "ZERO_STEP"]
    #[recovery(custom = "fix_the_arguments")]
    Zero,
}

impl std::fmt::Display for CounterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CounterError::Overflow => f.write_str("the count would overflow"),
            CounterError::Zero => f.write_str("a step of zero changes nothing"),
        }
    }
}

/// Creates a counter.
#[tool(creates = Counter)]
pub fn counter_create(
    /// A label (default "counter").
    label: Option<String>,
    /// The first count.
    #[arg(default = 0)]
    start: i64,
) -> Counter {
    Counter {
        count: start,
        label: label.unwrap_or_else(|| "counter".to_owned()),
        closed: false,
        notes: Vec::new(),
    }
}

/// Reads a counter.
#[tool(reads = Counter)]
pub fn counter_get(counter: &Counter) -> Counter {
    counter.clone()
}

/// Adds `step` to a counter.
#[tool(mutates = Counter)]
pub fn counter_add(
    counter: &mut Counter,
    /// The step, not zero.
    step: i64,
) -> Result<i64, CounterError> {
    if step == 0 {
        return Err(CounterError::Zero);
    }
    counter.count = counter
        .count
        .checked_add(step)
        .ok_or(CounterError::Overflow)?;
    Ok(counter.count)
}

/// Renames a counter; other changes since do not block it.
#[tool(mutates = Counter, on_conflict = rebase, touches = [label])]
pub fn counter_rename(
    counter: &mut Counter,
    /// The new label.
    label: String,
) -> String {
    counter.label = label;
    counter.label.clone()
}

/// Closes a counter: consequential, so a conflict asks to reconfirm.
#[tool(mutates = Counter, on_conflict = reconfirm, terminal)]
pub fn counter_close(counter: &mut Counter) -> i64 {
    counter.closed = true;
    counter.count
}

/// Adds a note; notes commute, so no precondition.
#[tool(mutates = Counter, expected_version = false)]
pub fn counter_note(
    counter: &mut Counter,
    /// The note.
    text: String,
) -> usize {
    counter.notes.push(text);
    counter.notes.len()
}

/// Every tool of the server.
pub fn tool_set() -> ToolSet {
    tools![
        kinds,
        scale,
        counter_create,
        counter_get,
        counter_add,
        counter_rename,
        counter_close,
        counter_note
    ]
}

/// A store that delegates to a `MemoryStore` replaced by a fresh one for every input: the
/// server (whose catalog of compiled schemas costs more to build than most inputs cost to run)
/// is built once, and no input sees what another left.
#[derive(Default)]
pub struct FreshStore(std::sync::RwLock<Arc<MemoryStore>>);

impl FreshStore {
    /// Drops everything stored: a new, empty memory store.
    pub fn reset(&self) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(MemoryStore::default());
    }

    fn current(&self) -> Arc<MemoryStore> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Store for FreshStore {
    fn create<'a>(&'a self, request: CreateRequest<'a>) -> StoreFuture<'a, MutationOutcome> {
        let store = self.current();
        Box::pin(async move { store.create(request).await })
    }

    fn read(&self, request: ReadRequest) -> StoreFuture<'_, ReadOutcome> {
        let store = self.current();
        Box::pin(async move { store.read(request).await })
    }

    fn mutate(&self, request: MutationRequest, transition: Transition) -> StoreFuture<'_, MutationOutcome> {
        let store = self.current();
        Box::pin(async move { store.mutate(request, transition).await })
    }

    fn mutate_step(&self, request: StepRequest, transition: StepTransition) -> StoreFuture<'_, StepOutcome> {
        let store = self.current();
        Box::pin(async move { store.mutate_step(request, transition).await })
    }

    fn prune(&self) -> StoreFuture<'_, PruneReport> {
        let store = self.current();
        Box::pin(async move { store.prune().await })
    }
}

impl Outbox for FreshStore {
    fn claim_effects(&self, claim: Claim) -> StoreFuture<'_, Vec<ClaimedEffect>> {
        let store = self.current();
        Box::pin(async move { store.claim_effects(claim).await })
    }

    fn settle_effect<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        settlement: Settlement,
    ) -> StoreFuture<'a, bool> {
        let store = self.current();
        Box::pin(async move { store.settle_effect(key, owner, settlement).await })
    }

    fn effect_statuses<'a>(&'a self, handle: &'a str, limit: usize) -> StoreFuture<'a, Vec<EffectStatus>> {
        let store = self.current();
        Box::pin(async move { store.effect_statuses(handle, limit).await })
    }

    fn outbox_signal(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.current().outbox_signal()
    }
}

impl TaskStore for FreshStore {
    fn insert_task(&self, task: TaskRecord) -> StoreFuture<'_, TaskInsert> {
        let store = self.current();
        Box::pin(async move { store.insert_task(task).await })
    }

    fn load_task<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        let store = self.current();
        Box::pin(async move { store.load_task(id).await })
    }

    fn update_task<'a>(&'a self, id: &'a str, change: TaskChange) -> StoreFuture<'a, Option<TaskRecord>> {
        let store = self.current();
        Box::pin(async move { store.update_task(id, change).await })
    }

    fn purge_tasks(&self, now_ms: u64) -> StoreFuture<'_, u64> {
        let store = self.current();
        Box::pin(async move { store.purge_tasks(now_ms).await })
    }
}

/// The server, on a store emptied for every input.
pub fn server(store: Arc<FreshStore>) -> McpServer {
    McpServer::builder("fuzz-counter", "0.0.0")
        .tools(tool_set())
        .store(store)
        .signing_key(crate::SIGNING_KEY.to_vec())
        .build()
        .expect("the counter server builds")
}

/// The published input and output schemas of every tool, compiled once.
pub struct Schemas {
    pub input: HashMap<String, jsonschema::Validator>,
    pub output: HashMap<String, jsonschema::Validator>,
}

impl Schemas {
    pub fn of(tools: &[Value]) -> Schemas {
        let mut input = HashMap::new();
        let mut output = HashMap::new();
        for tool in tools {
            let name = tool["name"].as_str().unwrap().to_owned();
            input.insert(name.clone(), compile(&tool["inputSchema"]));
            if let Some(schema) = tool.get("outputSchema") {
                output.insert(name, compile(schema));
            }
        }
        Schemas { input, output }
    }
}

fn compile(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .unwrap_or_else(|e| panic!("a published schema does not compile ({e}): {schema}"))
}

// ---------------------------------------------------------------------------------------------
// The model.

/// A counter as the model knows it.
#[derive(Debug, Clone)]
pub struct Known {
    pub handle: String,
    pub version: u64,
    pub count: i64,
    pub label: String,
    pub closed: bool,
    pub notes: usize,
}

/// A confirmation a `stale_view` of `counter_close` issued.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The arguments of the call it confirms.
    pub arguments: Value,
    /// The version it confirms.
    pub version: u64,
}

/// What the store holds after the calls so far, as the answers said.
#[derive(Debug, Default)]
pub struct Model {
    pub counters: Vec<Known>,
    /// Every validator a result carried, with what it stands for.
    pub validators: HashMap<String, (String, u64)>,
    /// Every confirmation a result carried.
    pub confirmations: HashMap<String, Issued>,
    /// Every operation id sent with a call the ledger may have recorded.
    pub operation_ids: Vec<String>,
}

/// Where a call's precondition came from, as sent.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// `_meta["io.github.mcp-tools/validator"]`.
    pub meta_validator: Option<Value>,
    /// `_meta["io.github.mcp-tools/confirmation"]`.
    pub meta_confirmation: Option<Value>,
}

/// A 2026-07-28 operation id the server takes from an anonymous caller.
pub fn is_unguessable(id: &str) -> bool {
    id.len() >= 22
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `value` holds a whole number written as a float somewhere (`3.0`): JSON Schema
/// counts it as an integer, serde's integer types refuse it.
pub fn has_whole_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64() && n.as_f64().is_some_and(|f| f.fract() == 0.0),
        Value::Array(items) => items.iter().any(has_whole_float),
        Value::Object(members) => members.values().any(has_whole_float),
        _ => false,
    }
}

impl Model {
    pub fn find(&self, handle: &str) -> Option<&Known> {
        self.counters.iter().find(|c| c.handle == handle)
    }

    fn find_mut(&mut self, handle: &str) -> Option<&mut Known> {
        self.counters.iter_mut().find(|c| c.handle == handle)
    }

    /// The version a precondition value names for `handle`: a number, or a validator issued
    /// for that handle. `Err(())` for a validator not issued for it, `Ok(None)` for no value.
    fn resolve(&self, handle: &str, value: Option<&Value>) -> Result<Option<u64>, ()> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(validator)) => match self.validators.get(validator) {
                Some((issued_for, version)) if issued_for == handle => Ok(Some(*version)),
                _ => Err(()),
            },
            Some(Value::Number(n)) => Ok(n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f < 9.0e15)
                    .map(|f| f as u64)
            })),
            Some(_) => Err(()),
        }
    }

    /// Records what a result issued: validators of every resumption in it, confirmations.
    fn learn(&mut self, structured: &Value, arguments: &Value) {
        let mut resumptions = Vec::new();
        collect_resumptions(structured, &mut resumptions);
        for resumption in resumptions {
            let (Some(handle), Some(version)) = (
                resumption.get("handle").and_then(Value::as_str),
                resumption.get("basis_version").and_then(Value::as_u64),
            ) else {
                panic!("a resumption without handle or version: {structured}");
            };
            let validator = resumption
                .get("validator")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("a resumption without a validator: {structured}"));
            // One validator per version of a handle, and one version per validator.
            if let Some(known) = self.validators.get(validator) {
                assert_eq!(
                    known,
                    &(handle.to_owned(), version),
                    "validator {validator} stands for two versions"
                );
            }
            for (other, (h, v)) in &self.validators {
                if h == handle && *v == version {
                    assert_eq!(other, validator, "two validators for {handle} v{version}");
                }
            }
            self.validators
                .insert(validator.to_owned(), (handle.to_owned(), version));
        }
        if let Some(confirmation) = structured.get("confirmation").and_then(Value::as_str) {
            let version = confirmed_version(confirmation)
                .unwrap_or_else(|| panic!("a confirmation that does not read: {confirmation}"));
            self.confirmations.insert(
                confirmation.to_owned(),
                Issued {
                    arguments: arguments.clone(),
                    version,
                },
            );
        }
    }
}

/// The version a sealed confirmation names (it is signed, not encrypted: a client can read it).
pub fn confirmed_version(sealed: &str) -> Option<u64> {
    let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
    let payload = bytes.get(..bytes.len().checked_sub(16)?)?;
    let payload: Value = serde_json::from_slice(payload).ok()?;
    payload["s"]["reconfirm"].as_u64()
}

fn collect_resumptions<'v>(value: &'v Value, found: &mut Vec<&'v Map<String, Value>>) {
    match value {
        Value::Object(members) => {
            if let Some(Value::Object(resumption)) = members.get("resumption") {
                found.push(resumption);
            }
            for (key, member) in members {
                if key != "resumption" {
                    collect_resumptions(member, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_resumptions(item, found)),
        _ => {}
    }
}

/// The codes that may answer a call before its precondition is read.
const BEFORE_PRECONDITION: &[&str] = &[
    "INVALID_ARGUMENTS",
    "GUESSABLE_OPERATION_ID",
    "INVALID_CONFIRMATION",
    "NOT_CONFIRMED",
];

/// Checks the answer to `tool` called with `arguments` (and `sent` in `_meta`) against the model,
/// and moves the model on. `result` is the `tools/call` result.
pub fn check(
    model: &mut Model,
    schemas: &Schemas,
    tool: &str,
    arguments: &Value,
    sent: &Sent,
    result: &Map<String, Value>,
) {
    let shown = || format!("{tool} {arguments} {sent:?} -> {}", Value::Object(result.clone()));
    let code = answer::call_result(result);
    tally(tool, result, code.as_deref(), sent);
    let structured = result.get("structuredContent");
    // Whatever the outcome, it is one the tool's output schema publishes.
    if let (Some(structured), Some(schema)) = (structured, schemas.output.get(tool)) {
        if let Some(error) = schema.iter_errors(structured).next() {
            panic!(
                "structuredContent does not match the output schema at {}: {error}: {}",
                error.instance_path(),
                shown()
            );
        }
    }
    // What the published input schema refuses is refused before the tool runs; what it accepts
    // decodes, unless a whole number is written as a float.
    if let Some(schema) = schemas.input.get(tool) {
        let valid = schema.is_valid(arguments);
        if !valid {
            assert_eq!(
                code.as_deref(),
                Some("INVALID_ARGUMENTS"),
                "arguments the schema refuses: {}",
                shown()
            );
        } else if code.as_deref() == Some("INVALID_ARGUMENTS") {
            let violations = &result["structuredContent"]["details"]["violations"];
            // `_meta` may hold a validator that is not a string, or one that disagrees with
            // `expected_version`: both are the caller's arguments' fault.
            let from_meta = sent.meta_validator.is_some();
            assert!(
                has_whole_float(arguments)
                    || from_meta
                    || (tool.starts_with("counter_") && precondition_missing(tool, arguments, sent)),
                "arguments the schema accepts refused ({violations}): {}",
                shown()
            );
        }
    }
    if let Some(structured) = structured {
        model.learn(structured, arguments);
    }
    match tool {
        "kinds" if code.is_none() => check_kinds(arguments, structured.unwrap(), &shown),
        "counter_create" => check_create(model, arguments, code.as_deref(), structured, &shown),
        "counter_get" => check_read(model, arguments, code.as_deref(), structured, &shown),
        "counter_add" | "counter_rename" | "counter_close" | "counter_note" => {
            check_mutation(model, tool, arguments, sent, code.as_deref(), structured, &shown)
        }
        _ => {}
    }
}

/// With `MCP_FUZZ_STATS` set, counts the answers by tool and outcome and prints the counts every
/// 20,000 calls: to see that the inputs reach every outcome.
fn tally(tool: &str, result: &Map<String, Value>, code: Option<&str>, sent: &Sent) {
    use std::sync::Mutex;
    static ON: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var_os("MCP_FUZZ_STATS").is_some());
    static COUNTS: Mutex<(u64, std::collections::BTreeMap<String, u64>)> =
        Mutex::new((0, std::collections::BTreeMap::new()));
    if !*ON {
        return;
    }
    let outcome = result
        .get("structuredContent")
        .and_then(|s| s.get("outcome"))
        .and_then(Value::as_str)
        .unwrap_or("-");
    let via = match (&sent.meta_validator, &sent.meta_confirmation) {
        (None, None) => "",
        (Some(_), None) => " +meta-validator",
        (None, Some(_)) => " +confirmation",
        (Some(_), Some(_)) => " +both",
    };
    let key = format!("{tool} {outcome} {}{via}", code.unwrap_or("ok"));
    let mut counts = COUNTS.lock().unwrap();
    counts.0 += 1;
    *counts.1.entry(key).or_default() += 1;
    if counts.0 % 20_000 == 0 {
        eprintln!("--- {} calls", counts.0);
        for (key, n) in &counts.1 {
            eprintln!("{n:>9} {key}");
        }
    }
}

/// Whether a mutation that needs a precondition was sent none.
fn precondition_missing(tool: &str, arguments: &Value, sent: &Sent) -> bool {
    tool != "counter_note"
        && tool != "counter_create"
        && tool != "counter_get"
        && arguments.get("expected_version").is_none_or(Value::is_null)
        && sent.meta_validator.is_none()
}

fn check_kinds(arguments: &Value, received: &Value, shown: &dyn Fn() -> String) {
    let defaults = json!({ "fallback": 7, "tags": [], "flag": false, "maybe": null, "shape": null });
    for (key, got) in received.as_object().unwrap() {
        let sent = match arguments.get(key) {
            Some(Value::Null) | None => &defaults[key],
            Some(sent) => sent,
        };
        let same = match (sent, got) {
            (Value::Number(a), Value::Number(b)) if key == "ratio" => a.as_f64() == b.as_f64(),
            // What was decoded is what was sent; members the type ignores are not echoed.
            (Value::Object(a), Value::Object(b)) => b
                .iter()
                .all(|(k, v)| a.get(k).unwrap_or(&Value::Null) == v),
            (a, b) => a == b,
        };
        assert!(same, "`{key}` sent {sent}, received {got}: {}", shown());
    }
}

fn check_create(
    model: &mut Model,
    arguments: &Value,
    code: Option<&str>,
    structured: Option<&Value>,
    shown: &dyn Fn() -> String,
) {
    let operation_id = arguments.get("operation_id").and_then(Value::as_str);
    if code == Some("GUESSABLE_OPERATION_ID") {
        assert!(operation_id.is_some_and(|id| !is_unguessable(id)), "{}", shown());
        return;
    }
    if code == Some("INVALID_ARGUMENTS") {
        return;
    }
    if let Some(id) = operation_id
        && !is_unguessable(id)
    {
        panic!("a guessable operation id was taken: {}", shown());
    }
    let Some(structured) = structured else { return };
    match structured["outcome"].as_str() {
        Some("applied") => {
            let handle = structured["handle"].as_str().unwrap().to_owned();
            assert!(handle.starts_with("ctr_"), "{}", shown());
            assert!(model.find(&handle).is_none(), "a handle minted twice: {}", shown());
            assert_eq!(structured["version"], 1, "{}", shown());
            let state = &structured["state"];
            model.counters.push(Known {
                handle,
                version: 1,
                count: state["count"].as_i64().unwrap(),
                label: state["label"].as_str().unwrap().to_owned(),
                closed: false,
                notes: 0,
            });
            if let Some(id) = operation_id {
                model.operation_ids.push(id.to_owned());
            }
        }
        Some("replayed") => {
            let id = operation_id.expect("a replay without an operation id");
            assert!(model.operation_ids.iter().any(|seen| seen == id), "{}", shown());
            let handle = structured["original"]["handle"].as_str().unwrap();
            assert!(model.find(handle).is_some(), "a replay of an unknown create: {}", shown());
        }
        Some("rejected") => {
            if code == Some("OPERATION_ID_REUSED") {
                let id = operation_id.unwrap();
                assert!(model.operation_ids.iter().any(|seen| seen == id), "{}", shown());
            }
        }
        other => panic!("a create answered {other:?}: {}", shown()),
    }
}

fn check_read(
    model: &mut Model,
    arguments: &Value,
    code: Option<&str>,
    structured: Option<&Value>,
    shown: &dyn Fn() -> String,
) {
    let handle = arguments.get("counter_id").and_then(Value::as_str).unwrap_or("");
    let basis = model.resolve(handle, arguments.get("basis_version"));
    let known = model.find(handle).cloned();
    match code {
        None => {
            let structured = structured.unwrap();
            let known = known.unwrap_or_else(|| panic!("a read of an unknown handle: {}", shown()));
            assert_eq!(structured["outcome"], "current", "{}", shown());
            assert_eq!(structured["version"], known.version, "{}", shown());
            assert_eq!(structured["state"]["count"], known.count, "{}", shown());
            assert_eq!(structured["state"]["label"], known.label.as_str(), "{}", shown());
            assert_eq!(structured["state"]["closed"], known.closed, "{}", shown());
            let basis = basis.unwrap_or_else(|()| panic!("a forged basis accepted: {}", shown()));
            match basis {
                Some(basis) => {
                    assert!(basis <= known.version, "{}", shown());
                    assert_eq!(structured["changes"]["since_version"], basis, "{}", shown());
                    if basis == known.version {
                        assert_eq!(structured["changes"]["delta"], json!([]), "{}", shown());
                    }
                }
                None => assert!(structured.get("changes").is_none(), "{}", shown()),
            }
        }
        Some("NOT_FOUND") => assert!(known.is_none(), "{}", shown()),
        Some("INVALID_VALIDATOR") => assert!(basis.is_err(), "{}", shown()),
        Some("FUTURE_VERSION") => {
            let known = known.unwrap();
            assert!(basis.unwrap().unwrap() > known.version, "{}", shown());
        }
        Some("INVALID_ARGUMENTS") => {}
        Some(other) => panic!("a read answered {other}: {}", shown()),
    }
}

fn check_mutation(
    model: &mut Model,
    tool: &str,
    arguments: &Value,
    sent: &Sent,
    code: Option<&str>,
    structured: Option<&Value>,
    shown: &dyn Fn() -> String,
) {
    let handle = arguments.get("counter_id").and_then(Value::as_str).unwrap_or("").to_owned();
    let operation_id = arguments.get("operation_id").and_then(Value::as_str);
    let known = model.find(&handle).cloned();
    let from_argument = model.resolve(&handle, arguments.get("expected_version"));
    let from_meta = match &sent.meta_validator {
        None => Ok(None),
        Some(value @ Value::String(_)) => model.resolve(&handle, Some(value)),
        Some(_) => Err(()),
    };
    let forged = from_argument.is_err() || from_meta.is_err();
    // The confirmation sent, if it is one this server issued for exactly these arguments.
    let confirmation = match &sent.meta_confirmation {
        None => Ok(None),
        Some(Value::String(sealed)) => match model.confirmations.get(sealed) {
            Some(issued) if &issued.arguments == arguments => Ok(Some(issued.version)),
            _ => Err(()),
        },
        Some(_) => Err(()),
    };
    let confirming = tool == "counter_close";
    let outcome = structured.and_then(|s| s["outcome"].as_str());
    if forged && tool != "counter_note" {
        // A forged, foreign or malformed validator is never taken for a version.
        assert!(
            code.is_some_and(|code| code == "INVALID_VALIDATOR" || BEFORE_PRECONDITION.contains(&code)),
            "a forged validator was not refused: {}",
            shown()
        );
        return;
    }
    if let (Ok(Some(argument)), Ok(Some(meta))) = (from_argument, from_meta)
        && argument != meta
        && tool != "counter_note"
    {
        assert!(
            code.is_some_and(|code| BEFORE_PRECONDITION.contains(&code)),
            "`expected_version` and the `_meta` validator disagree, and the call went on: {}",
            shown()
        );
        return;
    }
    if confirming && confirmation.is_err() {
        assert!(
            code.is_some_and(|code| code == "INVALID_CONFIRMATION" || code == "INVALID_ARGUMENTS" || code == "GUESSABLE_OPERATION_ID"),
            "a forged confirmation was not refused: {}",
            shown()
        );
        return;
    }
    if code == Some("GUESSABLE_OPERATION_ID") {
        assert!(operation_id.is_some_and(|id| !is_unguessable(id)), "{}", shown());
        return;
    }
    if code == Some("INVALID_ARGUMENTS") {
        return;
    }
    if let Some(id) = operation_id
        && !is_unguessable(id)
    {
        panic!("a guessable operation id was taken: {}", shown());
    }
    if code == Some("INVALID_VALIDATOR") {
        panic!("a validator this server issued for the handle was refused: {}", shown());
    }
    // The version the call is based on: a valid confirmation overrides the precondition.
    let expected = match (confirming, confirmation) {
        (true, Ok(Some(version))) => Some(version),
        // (Forged values were refused above, but for the tool without a precondition.)
        _ => from_argument.ok().flatten().or(from_meta.ok().flatten()),
    };
    if tool != "counter_note" && expected.is_none() {
        panic!("a call without precondition got past it: {}", shown());
    }
    if let Some(id) = operation_id {
        // Recorded or not, the id was now sent with a call that reached the store.
        if !model.operation_ids.iter().any(|seen| seen == id) {
            model.operation_ids.push(id.to_owned());
        }
    }
    let Some(known) = known else {
        assert!(
            matches!(code, Some("NOT_FOUND") | Some("OPERATION_ID_REUSED")) || outcome == Some("replayed"),
            "an unknown handle answered {code:?}: {}",
            shown()
        );
        return;
    };
    let structured = structured.unwrap();
    match outcome {
        Some("applied") => {
            assert!(!known.closed, "a closed counter changed: {}", shown());
            match (tool, expected) {
                ("counter_note", _) => {}
                ("counter_rename", Some(expected)) => {
                    assert!(expected <= known.version, "{}", shown());
                    if expected < known.version {
                        assert_eq!(structured["rebased_from"], expected, "{}", shown());
                    }
                }
                (_, Some(expected)) => assert_eq!(
                    expected, known.version,
                    "applied on another version than the one it was based on: {}",
                    shown()
                ),
                (_, None) => unreachable!(),
            }
            assert_eq!(structured["version"], known.version + 1, "{}", shown());
            let state = &structured["state"];
            let entry = model.find_mut(&handle).unwrap();
            entry.version += 1;
            entry.count = state["count"].as_i64().unwrap();
            entry.label = state["label"].as_str().unwrap().to_owned();
            entry.closed = state["closed"].as_bool().unwrap();
            entry.notes = state["notes"].as_array().unwrap().len();
            match tool {
                "counter_add" => {
                    let step = arguments["step"].as_i64().unwrap();
                    assert_eq!(Some(entry.count), known.count.checked_add(step), "{}", shown());
                }
                "counter_rename" => {
                    assert_eq!(Some(entry.label.as_str()), arguments["label"].as_str(), "{}", shown())
                }
                "counter_close" => assert!(entry.closed, "{}", shown()),
                _ => assert_eq!(entry.notes, known.notes + 1, "{}", shown()),
            }
            if tool != "counter_add" {
                assert_eq!(entry.count, known.count, "{}", shown());
            }
        }
        Some("stale_view") => {
            let expected = expected.unwrap();
            assert!(expected < known.version, "stale at the current version: {}", shown());
            assert_eq!(structured["current_version"], known.version, "{}", shown());
            assert_eq!(structured["expected_version"], expected, "{}", shown());
        }
        Some("replayed") => {
            let id = operation_id.expect("a replay without an operation id");
            assert!(model.operation_ids.iter().any(|seen| seen == id), "{}", shown());
            if let Some(current) = structured.get("current") {
                assert_eq!(current["version"], known.version, "{}", shown());
            }
        }
        Some("rejected") => match code.unwrap() {
            "TERMINAL" => assert!(known.closed, "{}", shown()),
            "FUTURE_VERSION" => assert!(expected.unwrap() > known.version, "{}", shown()),
            "NOT_FOUND" => panic!("a known counter not found: {}", shown()),
            "ZERO_STEP" => assert_eq!(arguments["step"], 0, "{}", shown()),
            "OVERFLOW" => {
                let step = arguments["step"].as_i64().unwrap();
                assert!(known.count.checked_add(step).is_none(), "{}", shown());
            }
            "OPERATION_ID_REUSED" | "NOT_CONFIRMED" | "INVALID_CONFIRMATION" => {}
            other => panic!("a mutation answered {other}: {}", shown()),
        },
        other => panic!("a mutation answered outcome {other:?}: {}", shown()),
    }
}

/// Reads every counter the model knows and compares.
pub fn final_reads(model: &Model) -> Vec<(String, Value)> {
    model
        .counters
        .iter()
        .map(|c| ("counter_get".to_owned(), json!({ "counter_id": c.handle })))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Calling the server: in-process through `TestClient`, or over the HTTP router when `_meta`
// must carry more than `TestClient` sends.

/// What every input of a target shares: the server, its clients, its published schemas.
pub struct Fixture {
    pub client: mcp_tools::testing::TestClient,
    pub router: axum::Router,
    pub store: Arc<FreshStore>,
    pub schemas: Schemas,
}

impl Fixture {
    /// Builds the server and reads its published schemas, on a runtime of its own (call it
    /// outside `block_on`).
    pub fn new() -> Fixture {
        let store = Arc::new(FreshStore::default());
        store.reset();
        let server = server(store.clone());
        let router = server.router();
        let client = mcp_tools::testing::TestClient::new(server);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let tools = runtime.block_on(client.list_tools()).expect("tools/list answers");
        assert_eq!(tools.len(), tool_set().len());
        Fixture { client, router, store, schemas: Schemas::of(&tools) }
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

/// One input's calls: the fixture on an empty store, and the model of what the calls stored.
pub struct Harness<'f> {
    pub fixture: &'f Fixture,
    pub model: Model,
    next_id: i64,
}

impl<'f> Harness<'f> {
    /// Empties the store.
    pub fn new(fixture: &'f Fixture) -> Harness<'f> {
        fixture.store.reset();
        Harness { fixture, model: Model::default(), next_id: 1 }
    }

    /// Calls `tool` through `TestClient` and checks the answer.
    pub async fn call(&mut self, tool: &str, arguments: Value) {
        let answer = self.fixture.client.call_tool(tool, arguments.clone()).await;
        let result = match answer {
            Ok(Value::Object(result)) => result,
            Ok(other) => panic!("a result that is not an object: {other}"),
            Err(error) => {
                // Only a malformed request is refused as one: an unknown tool, arguments that
                // are not an object.
                assert_eq!(error.code(), -32602, "{tool} {arguments}: {}", error.message());
                assert!(
                    !arguments.is_object() || self.fixture.schemas.input.get(tool).is_none(),
                    "{tool} {arguments}: {}",
                    error.message()
                );
                return;
            }
        };
        check(&mut self.model, &self.fixture.schemas, tool, &arguments, &Sent::default(), &result);
    }

    /// Calls `tool` over HTTP with `sent` in `_meta`, and checks the answer.
    pub async fn call_http(&mut self, tool: &str, arguments: Value, sent: Sent) {
        let id = self.next_id;
        self.next_id += 1;
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        if let Some(validator) = &sent.meta_validator {
            meta["io.github.mcp-tools/validator"] = validator.clone();
        }
        if let Some(confirmation) = &sent.meta_confirmation {
            meta["io.github.mcp-tools/confirmation"] = confirmation.clone();
        }
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": tool, "arguments": arguments, "_meta": meta },
        });
        let headers = [
            (http::HeaderName::from_static("mcp-protocol-version"), b"2026-07-28".to_vec()),
            (http::HeaderName::from_static("mcp-method"), b"tools/call".to_vec()),
            (http::HeaderName::from_static("mcp-name"), crate::routed::mirror(tool)),
        ];
        let request = crate::http::request(&headers, serde_json::to_vec(&body).unwrap());
        let answer = crate::http::send(&self.fixture.router, request, true).await;
        let message = answer.message.expect("an answer");
        assert_eq!(answer.status, 200, "{message}");
        let result = answer::rpc_result(&message, &json!(id)).clone();
        check(&mut self.model, &self.fixture.schemas, tool, &arguments, &sent, &result);
    }

    /// Reads every counter the model knows, checking each against it.
    pub async fn verify(&mut self) {
        for (tool, arguments) in final_reads(&self.model) {
            self.call(&tool, arguments).await;
        }
    }
}

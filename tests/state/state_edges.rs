//! Edges of the state engine over real HTTP, on the memory store and on SQLite: a `creates`
//! tool's function runs once per operation id (a retry replays instead of running it again, a
//! concurrent retry waits its turn), a rebase compares the serialized names of the fields it
//! touches, honest retries by clients that write arguments differently replay, and outcomes show
//! the entity's view. Every response is checked against the official schema and the tool's
//! published output schema.

use crate::basket;
use crate::basket_client;
use crate::common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcp_tools::store::{Entity, Lifecycle, Store, StoreConfig};
use mcp_tools::{McpServer, State, ToolError, tool, tools};
use mcp_tools::{MemoryStore, SqliteStore};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

use basket_client::{Agent, outcome, remove_db, temp_db};
use common::{TestServer, within};

/// A booked seat.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "seat")]
struct Seat {
    number: u32,
    holder: String,
}

/// The seats of a show, and how often the booking function ran.
#[derive(Default)]
struct Theatre {
    runs: AtomicUsize,
    taken: Mutex<HashSet<u32>>,
    /// When set, the next run of the booking function signals `started` and waits for
    /// `release` before it books.
    hold: Mutex<Option<Hold>>,
}

struct Hold {
    started: Arc<Notify>,
    release: oneshot::Receiver<()>,
}

impl Theatre {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// Books a seat. A seat is booked once: booking it again fails with `SEAT_TAKEN`.
#[tool(creates = Seat)]
async fn seat_book(
    theatre: State<Arc<Theatre>>,
    number: u32,
    holder: String,
) -> Result<Seat, ToolError> {
    theatre.runs.fetch_add(1, Ordering::SeqCst);
    let hold = theatre.hold.lock().unwrap().take();
    if let Some(hold) = hold {
        hold.started.notify_one();
        // A dropped sender (a failed test) lets the booking go on rather than hang.
        let _ = hold.release.await;
    }
    if !theatre.taken.lock().unwrap().insert(number) {
        return Err(ToolError::new(
            "SEAT_TAKEN",
            format!("seat {number} is taken"),
        ));
    }
    Ok(Seat { number, holder })
}

/// An order whose stored members are camelCase.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "ord")]
#[serde(rename_all = "camelCase")]
struct Order {
    item_count: u32,
    delivery_label: String,
}

/// Opens an empty order.
#[tool(creates = Order)]
fn order_open() -> Order {
    Order {
        item_count: 0,
        delivery_label: String::new(),
    }
}

/// Sets the number of items.
#[tool(mutates = Order)]
fn order_set_count(order: &mut Order, item_count: u32) -> u32 {
    order.item_count = item_count;
    item_count
}

/// Sets the delivery label.
#[tool(mutates = Order)]
fn order_relabel(order: &mut Order, label: String) -> String {
    order.delivery_label = label.clone();
    label
}

/// Adds items; re-applied over changes that left the item count alone.
#[tool(mutates = Order, on_conflict = rebase, touches = [item_count])]
fn order_add_items(order: &mut Order, count: u32) -> u32 {
    order.item_count += count;
    order.item_count
}

/// A meter and its readings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "mtr")]
struct Meter {
    unit: String,
    scale: u32,
    readings: Vec<f64>,
}

/// Opens a meter at its first reading.
#[tool(creates = Meter)]
fn meter_open(unit: Option<String>, #[arg(default = 10)] scale: u32, start: f64) -> Meter {
    Meter {
        unit: unit.unwrap_or_else(|| "kWh".to_owned()),
        scale,
        readings: vec![start],
    }
}

/// Records a reading.
#[tool(mutates = Meter, expected_version = false)]
fn meter_record(
    meter: &mut Meter,
    reading: f64,
    note: Option<String>,
    #[arg(default)] tags: Vec<String>,
    #[arg(default = 1)] weight: u32,
) -> usize {
    let _ = (note, tags, weight);
    meter.readings.push(reading);
    meter.readings.len()
}

/// A fuse. A bug in its lifecycle makes it panic on a 13 A fuse.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Entity)]
#[entity(prefix = "fuse", lifecycle = lifecycle)]
struct Fuse {
    amps: u32,
}

impl Fuse {
    fn lifecycle(&self) -> Lifecycle {
        assert!(self.amps != 13, "unlucky");
        Lifecycle::Active
    }
}

/// Fits a fuse.
#[tool(creates = Fuse)]
fn fuse_fit(amps: u32) -> Fuse {
    Fuse { amps }
}

/// A ticket that cannot be written as JSON: its serialization always fails.
#[derive(JsonSchema)]
struct Unwritable;

impl Serialize for Unwritable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this ticket cannot be printed"))
    }
}

/// Prints a seat's ticket (a view no serializer can write).
#[tool(reads = Seat)]
fn seat_ticket(seat: &Seat) -> Unwritable {
    let _ = seat;
    Unwritable
}

fn server(store: impl Store, theatre: Arc<Theatre>) -> McpServer {
    McpServer::builder("edges", "0.0.0")
        .tools(
            tools![
                seat_book,
                seat_ticket,
                order_open,
                order_set_count,
                order_relabel,
                order_add_items,
                meter_open,
                meter_record,
                fuse_fit,
            ]
            .merge(basket::tool_set()),
        )
        .state(theatre)
        .store(store)
        .signing_key(crate::common::SIGNING_KEY)
        .build()
        .unwrap()
}

/// A running server, its caller, and the theatre its booking tool uses.
struct Edges {
    _server: TestServer,
    agent: Agent,
    theatre: Arc<Theatre>,
}

impl Edges {
    async fn start(store: impl Store) -> Edges {
        let theatre = Arc::new(Theatre::default());
        let server = TestServer::start(server(store, theatre.clone())).await;
        let agent = Agent::connect(&server.url(), None).await;
        Edges {
            _server: server,
            agent,
            theatre,
        }
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.agent.call(tool, arguments).await
    }
}

/// A SQLite file in the temporary directory, removed with its WAL when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> TempDb {
        TempDb(temp_db(name))
    }

    fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.0, StoreConfig::default()).unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        remove_db(&self.0);
    }
}

/// One scenario as two tests: on the memory store and on SQLite.
macro_rules! on_both_stores {
    ($scenario:ident, $memory:ident, $sqlite:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $scenario(MemoryStore::default()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let db = TempDb::new(stringify!($scenario));
            $scenario(db.store()).await;
        }
    };
}

fn assert_rejected(result: &Value, code: &str, recovery: &str) {
    assert_eq!(outcome(result), "rejected", "{result}");
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["code"], code, "{result}");
    assert_eq!(
        result["structuredContent"]["recovery"], recovery,
        "{result}"
    );
}

fn handle_of(result: &Value) -> String {
    assert_eq!(outcome(result), "applied", "{result}");
    result["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned()
}

// (a) A retry of a create that happened replays it without running the function again: a
// second run would fail, the seat being taken.
async fn retried_create_replays_without_running_the_function(store: impl Store) {
    let edges = Edges::start(store).await;
    let booking = json!({"operation_id": "book-7-000000000000000", "number": 7, "holder": "ada"});
    let first = edges.call("seat_book", booking.clone()).await;
    let handle = handle_of(&first);
    assert_eq!(edges.theatre.runs(), 1);

    let retry = edges.call("seat_book", booking).await;
    assert_eq!(outcome(&retry), "replayed", "{retry}");
    assert_ne!(retry["isError"], true, "{retry}");
    let replayed = &retry["structuredContent"];
    assert_eq!(replayed["original"]["outcome"], "applied", "{retry}");
    assert_eq!(replayed["original"]["handle"], handle.as_str());
    assert_eq!(replayed["original"]["version"], 1);
    assert_eq!(replayed["current"]["state"]["holder"], "ada", "{retry}");
    assert_eq!(edges.theatre.runs(), 1, "the retry ran the function again");

    // Another operation id is another booking: the function runs, and refuses.
    let other = edges
        .call(
            "seat_book",
            json!({"operation_id": "book-7-again-000000000", "number": 7, "holder": "bob"}),
        )
        .await;
    assert_eq!(outcome(&other), "rejected", "{other}");
    assert_eq!(other["structuredContent"]["code"], "SEAT_TAKEN");
    assert_eq!(edges.theatre.runs(), 2);
}

on_both_stores!(
    retried_create_replays_without_running_the_function,
    a_retried_create_replays_without_running_the_function_again_in_memory,
    a_retried_create_replays_without_running_the_function_again_in_sqlite
);

// (b) Two creates with one operation id at once: the second is told to retry later while the
// first one's function runs, and the function runs exactly once.
async fn concurrent_creates_run_the_function_once(store: impl Store) {
    let edges = Edges::start(store).await;
    let started = Arc::new(Notify::new());
    let (release, held) = oneshot::channel();
    *edges.theatre.hold.lock().unwrap() = Some(Hold {
        started: started.clone(),
        release: held,
    });
    let booking = json!({"operation_id": "book-9-000000000000000", "number": 9, "holder": "ada"});

    let first = tokio::spawn({
        let agent = edges.agent.clone();
        let booking = booking.clone();
        async move { agent.call("seat_book", booking).await }
    });
    within("the first booking's function to start", started.notified()).await;

    let second = edges.call("seat_book", booking.clone()).await;
    assert_rejected(&second, "OPERATION_IN_PROGRESS", "retry_later");
    assert_eq!(
        edges.theatre.runs(),
        1,
        "the second request ran the function"
    );

    release.send(()).unwrap();
    let first = within("the first booking to finish", first).await.unwrap();
    let handle = handle_of(&first);
    assert_eq!(first["structuredContent"]["version"], 1);

    let third = edges.call("seat_book", booking).await;
    assert_eq!(outcome(&third), "replayed", "{third}");
    assert_eq!(
        third["structuredContent"]["original"]["handle"],
        handle.as_str()
    );
    assert_eq!(edges.theatre.runs(), 1);
}

on_both_stores!(
    concurrent_creates_run_the_function_once,
    concurrent_creates_with_one_operation_id_run_the_function_once_in_memory,
    concurrent_creates_with_one_operation_id_run_the_function_once_in_sqlite
);

// (c) A rebase that touches `item_count` sees a change of the stored `itemCount`, and only that.
async fn rebase_compares_serialized_names(store: impl Store) {
    let edges = Edges::start(store).await;
    let handle = handle_of(
        &edges
            .call(
                "order_open",
                json!({"operation_id": "o-1-000000000000000000"}),
            )
            .await,
    );

    let set = edges
        .call(
            "order_set_count",
            json!({"order_id": handle, "expected_version": 1, "operation_id": "o-2-000000000000000000", "item_count": 5}),
        )
        .await;
    assert_eq!(outcome(&set), "applied", "{set}");
    assert_eq!(set["structuredContent"]["state"]["itemCount"], 5);

    let planned_from_one = edges
        .call(
            "order_add_items",
            json!({"order_id": handle, "expected_version": 1, "operation_id": "o-3-000000000000000000", "count": 2}),
        )
        .await;
    assert_eq!(
        outcome(&planned_from_one),
        "stale_view",
        "a change of itemCount was rebased over: {planned_from_one}"
    );
    let stale = &planned_from_one["structuredContent"];
    assert_eq!(stale["current_version"], 2);
    assert_eq!(stale["current_state"]["itemCount"], 5);
    assert!(
        stale["delta"]
            .as_array()
            .unwrap()
            .iter()
            .any(|change| change.to_string().contains("itemCount")),
        "{stale}"
    );

    let relabel = edges
        .call(
            "order_relabel",
            json!({"order_id": handle, "expected_version": 2, "operation_id": "o-4-000000000000000000", "label": "gift"}),
        )
        .await;
    assert_eq!(outcome(&relabel), "applied", "{relabel}");

    let planned_from_two = edges
        .call(
            "order_add_items",
            json!({"order_id": handle, "expected_version": 2, "operation_id": "o-5-000000000000000000", "count": 2}),
        )
        .await;
    assert_eq!(outcome(&planned_from_two), "applied", "{planned_from_two}");
    let applied = &planned_from_two["structuredContent"];
    assert_eq!(applied["rebased_from"], 2, "{applied}");
    assert_eq!(applied["version"], 4);
    assert_eq!(
        applied["state"],
        json!({"itemCount": 7, "deliveryLabel": "gift"})
    );
}

on_both_stores!(
    rebase_compares_serialized_names,
    a_rebase_sees_a_change_of_a_renamed_field_and_rebases_over_others_in_memory,
    a_rebase_sees_a_change_of_a_renamed_field_and_rebases_over_others_in_sqlite
);

// (d) Retries written differently by another client library are the same request; a really
// different value is not.
async fn honest_retries_replay(store: impl Store) {
    let edges = Edges::start(store).await;
    let first = edges
        .call(
            "meter_open",
            json!({"operation_id": "m-1-000000000000000000", "start": 1}),
        )
        .await;
    let handle = handle_of(&first);
    for retry in [
        json!({"operation_id": "m-1-000000000000000000", "start": 1.0}),
        json!({"operation_id": "m-1-000000000000000000", "start": 1, "unit": null}),
        json!({"operation_id": "m-1-000000000000000000", "start": 1, "scale": 10}),
        json!({"scale": 10, "unit": null, "start": 1.0, "operation_id": "m-1-000000000000000000"}),
    ] {
        let result = edges.call("meter_open", retry.clone()).await;
        assert_eq!(outcome(&result), "replayed", "{retry}: {result}");
        assert_eq!(
            result["structuredContent"]["original"]["handle"],
            handle.as_str()
        );
    }
    for different in [
        json!({"operation_id": "m-1-000000000000000000", "start": 1.5}),
        json!({"operation_id": "m-1-000000000000000000", "start": 1, "unit": "kWh"}),
        json!({"operation_id": "m-1-000000000000000000", "start": 1, "scale": 11}),
    ] {
        let result = edges.call("meter_open", different.clone()).await;
        assert_rejected(&result, "OPERATION_ID_REUSED", "new_operation_id");
    }

    let record =
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3});
    let first = edges.call("meter_record", record).await;
    assert_eq!(outcome(&first), "applied", "{first}");
    for retry in [
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3.0}),
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3, "note": null}),
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3, "tags": [], "weight": 1}),
        json!({"weight": 1, "tags": [], "note": null, "reading": 3.0, "operation_id": "r-1-000000000000000000", "meter_id": handle}),
    ] {
        let result = edges.call("meter_record", retry.clone()).await;
        assert_eq!(outcome(&result), "replayed", "{retry}: {result}");
        assert_eq!(result["structuredContent"]["original"]["version"], 2);
    }
    for different in [
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3.5}),
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3, "note": "late"}),
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3, "tags": ["x"]}),
        json!({"meter_id": handle, "operation_id": "r-1-000000000000000000", "reading": 3, "weight": 2}),
    ] {
        let result = edges.call("meter_record", different.clone()).await;
        assert_rejected(&result, "OPERATION_ID_REUSED", "new_operation_id");
    }
    let now = edges
        .call(
            "meter_record",
            json!({"meter_id": handle, "operation_id": "r-2-000000000000000000", "reading": 4}),
        )
        .await;
    assert_eq!(
        now["structuredContent"]["state"]["readings"],
        json!([1.0, 3.0, 4.0]),
        "a retry recorded a reading twice: {now}"
    );
}

on_both_stores!(
    honest_retries_replay,
    retries_that_write_an_argument_differently_replay_and_other_values_are_refused_in_memory,
    retries_that_write_an_argument_differently_replay_and_other_values_are_refused_in_sqlite
);

// Outcomes show the basket's view (the note count); a read shows the basket with a page of its
// notes, each with its id and the version that wrote it.
async fn outcomes_show_the_view(store: impl Store) {
    let edges = Edges::start(store).await;
    let handle = handle_of(
        &edges
            .call(
                "basket_create",
                json!({"operation_id": "b-1-000000000000000000"}),
            )
            .await,
    );
    let notes: Vec<String> = (1..=5).map(|n| format!("note {n}")).collect();
    for (index, note) in notes.iter().enumerate() {
        let added = edges
            .call(
                "basket_add_note",
                json!({"basket_id": handle, "operation_id": format!("n-{index:022}"), "text": note}),
            )
            .await;
        assert_eq!(outcome(&added), "applied", "{added}");
        let state = &added["structuredContent"]["state"];
        assert_eq!(
            *state,
            json!({
                "model": "Laptop 14",
                "memory_gib": 16,
                "storage_gib": 512,
                "note_count": index + 1,
                "checked_out": false,
            })
        );
        assert_eq!(
            added["structuredContent"]["result"],
            json!({ "note_id": index + 1, "note_count": index + 1 })
        );
    }
    let (version, whole) = edges.agent.get(&handle).await;
    assert_eq!(version, 6);
    let items: Vec<Value> = notes
        .iter()
        .enumerate()
        .map(|(index, note)| json!({ "id": index + 1, "version": index + 2, "value": note }))
        .collect();
    assert_eq!(
        whole["notes"],
        json!({ "len": 5, "next_id": 6, "items": items }),
        "one page, no cursor"
    );
    assert_eq!(whole.get("note_count"), None);
}

on_both_stores!(
    outcomes_show_the_view,
    outcomes_show_the_basket_view_and_a_read_the_whole_basket_in_memory,
    outcomes_show_the_basket_view_and_a_read_the_whole_basket_in_sqlite
);

// A read whose view cannot be serialized answers OUTPUT_NOT_SERIALIZABLE as a result the model
// can read, never a dropped connection or a 500, and the resource stays readable.
async fn unwritable_view(store: impl Store) {
    let edges = Edges::start(store).await;
    let booked = edges
        .call(
            "seat_book",
            json!({"number": 7, "holder": "Ada", "operation_id": "6f1c1a36-77de-4b1c-9a43-0d1e2b3c4d5e"}),
        )
        .await;
    let handle = handle_of(&booked);
    let ticket = edges.call("seat_ticket", json!({"seat_id": handle})).await;
    assert_eq!(outcome(&ticket), "rejected", "{ticket}");
    assert_eq!(ticket["isError"], true, "{ticket}");
    assert_eq!(
        ticket["structuredContent"]["code"], "OUTPUT_NOT_SERIALIZABLE",
        "{ticket}"
    );
    let message = ticket["structuredContent"]["message"].as_str().unwrap();
    assert!(
        message.contains("this ticket cannot be printed"),
        "{ticket}"
    );
    let again = edges
        .call(
            "seat_book",
            json!({"number": 7, "holder": "Ada", "operation_id": "6f1c1a36-77de-4b1c-9a43-0d1e2b3c4d5e"}),
        )
        .await;
    assert_eq!(outcome(&again), "replayed", "{again}");
}

on_both_stores!(
    unwritable_view,
    a_view_that_cannot_be_serialized_is_answered_output_not_serializable_in_memory,
    a_view_that_cannot_be_serialized_is_answered_output_not_serializable_in_sqlite
);

// A create whose entity's own code panics (here its lifecycle, read from the state the tool made)
// answers TRANSITION_PANICKED, as a panicking transition does: not a retryable store failure,
// not a dropped request. It gives its claim up, so the same call fails the same way rather than
// waiting as in progress, and the server goes on serving.
async fn entity_code_panics(store: impl Store) {
    let edges = Edges::start(store).await;
    let unlucky = json!({"amps": 13, "operation_id": "0b9e4f7a-3c2d-4e1f-8a6b-5c4d3e2f1a0b"});
    for _ in 0..2 {
        let failed = edges.call("fuse_fit", unlucky.clone()).await;
        assert_rejected(&failed, "TRANSITION_PANICKED", "stop");
    }
    let fitted = edges
        .call(
            "fuse_fit",
            json!({"amps": 10, "operation_id": "7d1e0c4b-9a8f-4e2d-b6c5-1f0e9d8c7b6a"}),
        )
        .await;
    handle_of(&fitted);
}

on_both_stores!(
    entity_code_panics,
    a_panicking_lifecycle_answers_transition_panicked_in_memory,
    a_panicking_lifecycle_answers_transition_panicked_in_sqlite
);

//! Argument decoding against each tool's schema, in-process through `TestClient` on a fresh
//! `MemoryStore` per input: a sequence of calls to `#[tool]` functions with arguments of many
//! types (integers at their edges, enums, options, defaults, a nested struct, a tagged enum)
//! and to stateful tools on a `#[derive(Entity)]` counter (`creates`, `reads`, `mutates` with
//! `reject`, `rebase` and `reconfirm`, and without a precondition), with `expected_version`,
//! `basis_version` and `operation_id` drawn from what earlier calls answered, and arguments
//! now and then of arbitrary JSON.
//!
//! Asserts, for every call (`mcp_tools_fuzz::counter::check`):
//! - the answer is a `tools/call` result (an unknown tool or non-object arguments: `-32602`),
//!   a failure an `isError` result with a stable `code`, and `structuredContent` matches the
//!   tool's published output schema, whatever the outcome;
//! - arguments the published input schema refuses get `INVALID_ARGUMENTS` and never run the
//!   tool; arguments it accepts decode, unless they hold a whole number written as a float
//!   (`3.0`, which JSON Schema counts as an integer and serde does not), or lack a
//!   precondition;
//! - `kinds` receives exactly what was sent, defaults filled in;
//! - the stateful outcomes agree with a model of the store: an `applied` change was based on
//!   the current version (or rebased from an older one by the rebasing tool), bumps it by one
//!   and changes what the tool says; `stale_view`, `FUTURE_VERSION`, `TERMINAL`, `NOT_FOUND`,
//!   `ZERO_STEP`, `OVERFLOW`, `GUESSABLE_OPERATION_ID` and replays only when the model says
//!   so; validators stand for one version of one handle; at the end every counter reads back
//!   as the model holds it.

#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use mcp_tools_fuzz::counter::{Fixture, Harness};
use mcp_tools_fuzz::{block_on, draw, json};

static FIXTURE: LazyLock<Fixture> = LazyLock::new(Fixture::new);

const TOOLS: &[&str] = &[
    "kinds", "scale", "counter_create", "counter_get", "counter_add", "counter_rename",
    "counter_close", "counter_note",
];
const KEYS: &[&str] = &[
    "small", "signed", "big", "wide", "ratio", "colour", "maybe", "fallback", "point", "tags",
    "shape", "flag", "factor", "times", "unit", "label", "start", "counter_id", "step", "text",
    "expected_version", "basis_version", "operation_id", "x", "y", "kind",
];

fuzz_target!(|data: &[u8]| {
    let fixture = &*FIXTURE;
    let mut u = Unstructured::new(data);
    block_on(async {
        let mut harness = Harness::new(fixture);
        let mut fresh = 0;
        let steps = u.int_in_range(1..=10).unwrap_or(1);
        for _ in 0..steps {
            if u.is_empty() {
                break;
            }
            let call = match u.int_in_range(0..=9).unwrap_or(0) {
                0 => draw::kinds(&mut u).map(|a| ("kinds", a)),
                1 => draw::scale(&mut u).map(|a| ("scale", a)),
                2 => (|| {
                    let tool = *u.choose(TOOLS)?;
                    let arguments = if u.ratio(1, 8)? {
                        json::value(&mut u, 3, KEYS, &[])?
                    } else {
                        serde_json::Value::Object(json::object(&mut u, 3, KEYS, &[])?)
                    };
                    Ok((tool, arguments))
                })(),
                _ => {
                    let mut draw = draw::Draw { model: &harness.model, fresh: &mut fresh };
                    draw::counter_call(&mut u, &mut draw)
                }
            };
            let Ok((tool, arguments)) = call else { break };
            harness.call(tool, arguments).await;
        }
        harness.verify().await;
    });
});

//! Resumption records and validators: arbitrary strings as `expected_version` and
//! `basis_version` validators, as `_meta["io.github.mcp-tools/validator"]` and as
//! `_meta["io.github.mcp-tools/confirmation"]` on the counter's stateful tools, through the HTTP
//! router in-process (`TestClient` sends no `_meta` of its own) on a fresh `MemoryStore` per
//! input.
//!
//! Each input creates two counters and reads one, then makes calls whose preconditions are
//! validators the server issued (for this counter at this version, at an older one, for the
//! other counter) or such validators altered (a character replaced, cut short, lengthened,
//! another alphabet, another case, trailing bits changed, a made-up tag), arbitrary strings,
//! numbers; sent as the argument, in `_meta`, or both; and confirmations issued by a
//! `stale_view` of the reconfirmed tool, sent back with the same or other arguments, altered,
//! or made up.
//!
//! Asserts (besides everything `arguments` asserts of each answer):
//! - a validator not issued for the called counter is never taken for a version: the call is
//!   refused (`INVALID_VALIDATOR`, or a refusal checked before the precondition), never
//!   `applied`, `stale_view` or `current`;
//! - an issued validator means exactly the version it was issued for; `expected_version` and a
//!   `_meta` validator that disagree are refused;
//! - a confirmation applies only when this server issued it for exactly these arguments, and
//!   only at the version it confirmed;
//! - one validator per version of a counter, deterministic under the fixed key.

#![no_main]

use std::sync::LazyLock;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mcp_tools_fuzz::counter::{Fixture, Harness, Sent};
use mcp_tools_fuzz::{block_on, draw, json};
use serde_json::{Value, json};

static FIXTURE: LazyLock<Fixture> = LazyLock::new(Fixture::new);

fuzz_target!(|data: &[u8]| {
    let fixture = &*FIXTURE;
    let mut u = Unstructured::new(data);
    block_on(async {
        let mut harness = Harness::new(fixture);
        let mut fresh = 0u32;
        for label in ["a", "b"] {
            fresh += 1;
            let op = format!("op-{fresh:020}");
            harness
                .call_http("counter_create", json!({ "label": label, "operation_id": op }), Sent::default())
                .await;
        }
        // Counter `a` at version 2, with a `stale_view` of `counter_close` based on version 1
        // and the confirmation it issued; counter `b` at version 1.
        let first = harness.model.counters[0].handle.clone();
        harness
            .call_http("counter_get", json!({ "counter_id": first }), Sent::default())
            .await;
        let validator = harness.model.validators.iter().find(|(_, (h, v))| *h == first && *v == 1).unwrap().0.clone();
        harness
            .call_http(
                "counter_add",
                json!({ "counter_id": first, "expected_version": validator, "step": 2, "operation_id": "op-add-0000000000000000001" }),
                Sent::default(),
            )
            .await;
        harness
            .call_http(
                "counter_close",
                json!({ "counter_id": first, "expected_version": 1, "operation_id": "op-close-000000000000000001" }),
                Sent::default(),
            )
            .await;
        assert_eq!(harness.model.confirmations.len(), 1, "the prelude issued no confirmation");
        let steps = u.int_in_range(1..=10).unwrap_or(1);
        for _ in 0..steps {
            if u.is_empty() {
                break;
            }
            let Ok((tool, arguments, sent)) = step(&mut u, &harness, &mut fresh) else { break };
            harness.call_http(tool, arguments, sent).await;
        }
        harness.verify().await;
    });
});

fn step(
    u: &mut Unstructured<'_>,
    harness: &Harness,
    fresh: &mut u32,
) -> Result<(&'static str, Value, Sent)> {
    let model = &harness.model;
    // Sending back a confirmation as issued: the same arguments.
    if !model.confirmations.is_empty() && u.ratio(1, 4)? {
        let mut issued: Vec<_> = model.confirmations.iter().collect();
        issued.sort_by(|a, b| a.0.cmp(b.0));
        let (sealed, issued) = *u.choose(&issued)?;
        let mut arguments = issued.arguments.clone();
        let confirmation = match u.int_in_range(0..=7)? {
            0..=3 => json!(sealed),
            4 => json!(draw::alter(u, sealed)?),
            5 => {
                // Other arguments: another operation id.
                *fresh += 1;
                arguments["operation_id"] = json!(format!("op-{:020}", *fresh));
                json!(sealed)
            }
            6 => json!(json::string(u, &[])?),
            _ => json::value(u, 1, &[], &[])?,
        };
        let sent = Sent { meta_validator: None, meta_confirmation: Some(confirmation) };
        return Ok(("counter_close", arguments, sent));
    }
    let mut draw = draw::Draw { model, fresh };
    let (tool, mut arguments) = draw::counter_call(u, &mut draw)?;
    let mut sent = Sent::default();
    let handle = arguments.get("counter_id").cloned().unwrap_or(Value::Null);
    // The precondition as a validator: in the argument, in `_meta`, or both.
    match u.int_in_range(0..=5)? {
        0 | 1 => {}
        2 => {
            let validator = draw.validator(u, &handle)?;
            let slot = if tool == "counter_get" { "basis_version" } else { "expected_version" };
            arguments[slot] = validator;
        }
        3 => {
            if let Some(object) = arguments.as_object_mut() {
                object.remove("expected_version");
            }
            sent.meta_validator = Some(draw.validator(u, &handle)?);
        }
        4 => sent.meta_validator = Some(draw.validator(u, &handle)?),
        _ => sent.meta_validator = Some(json::value(u, 1, &[], &[])?),
    }
    if u.ratio(1, 10)? {
        sent.meta_confirmation = Some(json!(json::string(u, &[])?));
    }
    Ok((tool, arguments, sent))
}

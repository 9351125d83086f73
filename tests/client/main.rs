//! The client half, end to end: the 2026-07-28 client over real HTTP and real stdio against this
//! project's example servers and servers built here; the harness that drives stateful tools by
//! their published rules (the seed's schedule, lost answers retried across replicas, the basis
//! rule, resumption after a restart); the drop-in harness between a host on stdio and a server
//! over HTTP; and bad input. Every await is bounded by a test step.
//!
//! `interop` runs against the servers of other implementations, given as binaries: it is
//! ignored unless asked for (see its module).

#[path = "../../examples/support/basket.rs"]
mod basket;
#[path = "../common/mod.rs"]
mod common;
#[path = "../../mcp-tools/tests/pg/mod.rs"]
mod pg;

mod bad_input;
mod basis;
mod dropin;
mod interop;
mod lost_answers;
mod plain;
mod protocol;
mod resumption;
mod seed;
mod support;

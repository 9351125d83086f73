//! The user guide: how to write, test and run tool servers with mcp-tools.
//!
//! Each chapter is a module with no items, only text. The text lives in `mcp-tools/docs/guide/`,
//! and every Rust example in it is compiled and run as a test, so the guide cannot drift from the
//! API.
//!
//! 1. [Writing tools](writing_tools): `#[tool]` on plain functions, their arguments, results and
//!    errors, `Context` and `State<T>`, `#[toolbox]`, hand-written tools, resources and prompts,
//!    progress, and asking the client for input.
//! 2. [Stateful tools](stateful_tools): entities and handles, `creates`, `reads` and `mutates`,
//!    `expected_version` and validators, operation ids and replays, conflict policies, the
//!    outcomes a model sees, the published contract, and how to design a state-changing tool.
//! 3. [Testing](testing): the function on its own, `TestClient` in process, contract snapshots,
//!    and tests over real HTTP.
//! 4. [Long-running tools](tasks): tasks, `Context::ask`, cancellation, replicas and settings.
//! 5. [Deploying](deploying): a checklist for production: the store, the shared key, hosts,
//!    health checks, restarts, proxies and limits.
//! 6. [OAuth](oauth): the OAuth 2.1 resource server, token verifiers, scopes and challenges.
//! 7. [Observability](observability): request spans, OpenTelemetry, logs.
//! 8. [The protocol](protocol): what a request must carry, the order of the checks and what each
//!    failure answers, legacy clients, routing and `Mcp-Param-*` headers.
//! 9. [The command line](cli): `serve`, `schema`, `docs`, `contract`, `call`, `probe` and
//!    `harness` for every server binary.
//! 10. [Calling servers](client): the client over HTTP and stdio, the harness that supplies
//!     operation ids and versions and retries lost answers exactly once, resumption records, and
//!     the drop-in harness for any MCP host.

pub mod writing_tools {
    #![doc = include_str!("../docs/guide/writing-tools.md")]
}

pub mod stateful_tools {
    #![doc = include_str!("../docs/guide/stateful-tools.md")]
}

pub mod testing {
    #![doc = include_str!("../docs/guide/testing.md")]
}

pub mod tasks {
    #![doc = include_str!("../docs/guide/tasks.md")]
}

pub mod deploying {
    #![doc = include_str!("../docs/guide/deploying.md")]
}

pub mod oauth {
    #![doc = include_str!("../docs/guide/oauth.md")]
}

pub mod observability {
    #![doc = include_str!("../docs/guide/observability.md")]
}

pub mod protocol {
    #![doc = include_str!("../docs/guide/protocol.md")]
}

pub mod cli {
    #![doc = include_str!("../docs/guide/cli.md")]
}

pub mod client {
    #![doc = include_str!("../docs/guide/client.md")]
}

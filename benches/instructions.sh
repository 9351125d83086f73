#!/usr/bin/env bash
# User-space instructions per request of the stateless and the read path over HTTP, counted by
# callgrind, against the bare axum floor counted the same way in the same run.
#
# usage: benches/instructions.sh          (from anywhere; builds what it runs in release)
#
# wrk's req/s and CPU time swing with whatever else shares the machine (on a busy 2-core VM one
# round differs from the next by 2x); an instruction count does not. It does not see the kernel,
# cache misses or the cost of atomic instructions, so it complements compare.sh, it does not
# replace it: a change that lowers the count and not the CPU time is not a speed-up. Valgrind
# also hides the CPU's SHA extensions, so SHA-256 (the validators and resumption tokens of a
# stateful answer) runs its portable code here, several times the instructions it takes natively.
#
# Environment knobs:
#   REQUESTS  measured requests per case (default 2000), after 200 unmeasured ones
#   PORT      loopback port for the server under measurement (default 19390)
#   HARNESS   the side-by-side harness folder, for axum-floor (default ../shared/bench beside
#             the project root)
#   KEEP      a folder to keep each case's callgrind profile in (CASE.callgrind, for
#             callgrind_annotate); unset: none is kept
#
# Cases, each a server run under `valgrind --tool=callgrind` with one tokio worker, sent the same
# request REQUESTS times by one curl process over one kept-alive connection; every answer is
# checked (HTTP 200 and the expected result), and any other makes the script exit 1:
#   floor       axum-floor, `add` (a=2, b=3): the baseline
#   add         the quickstart's `add`
#   get/memory  basket_get on the basket example with --memory
#   get/sqlite  basket_get on the basket example with --db in a temp dir
#   upgrade/memory  basket_upgrade_memory with --memory, each call a real versioned mutation: a
#               fresh operation id and the version the previous call made, sent by python3 (a body
#               that changes every call is beyond a curl config), every answer checked `applied`
#
# The count covers every thread of the server (callgrind runs them one at a time) from the
# moment the counters are zeroed to the dump, so idle wake-ups of the runtime are in it too.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
harness="${HARNESS:-$root/../shared/bench}"
requests="${REQUESTS:-2000}"
port="${PORT:-19390}"

source "$root/benches/lib.sh"
numeric_settings "$requests" "$port"
[[ -z "${KEEP:-}" || -d "$KEEP" ]] || { echo "KEEP $KEEP is not a folder" >&2; exit 2; }
(( requests >= 100 && requests <= 100000 )) || { echo "REQUESTS out of range" >&2; exit 2; }
require_tools valgrind callgrind_control curl jq ss python3 cargo
[[ -f "$harness/axum-floor/Cargo.toml" ]] || { echo "no axum-floor in $harness" >&2; exit 2; }

work="$(mktemp -d)"
pids=()
trap cleanup EXIT

build_examples quickstart basket
echo "== building axum-floor (release)" >&2
peers="${CARGO_TARGET_DIR:-$root/target}/peers"
[[ "$peers" = /* ]] || peers="$root/$peers"
cargo build --release --quiet --locked --manifest-path "$harness/axum-floor/Cargo.toml" \
  --target-dir "$peers" >&2
floor="$peers/release/axum-floor"
url="http://127.0.0.1:$port/mcp"

# curl_config FILE TOOL ARGUMENTS_JSON COUNT: a curl config sending the call COUNT times on one
# connection (options before the URLs apply to every one of them)
curl_config() {
  {
    echo 'silent'
    echo 'show-error'
    echo 'max-time = 30'
    echo 'header = "Content-Type: application/json"'
    echo 'header = "Accept: application/json, text/event-stream"'
    echo 'header = "MCP-Protocol-Version: 2026-07-28"'
    echo 'header = "Mcp-Method: tools/call"'
    echo "header = \"Mcp-Name: $2\""
    echo 'write-out = "\nstatus=%{http_code}\n"'
    printf 'data = "%s"\n' "$(body_of "$2" "$3" | sed 's/\\/\\\\/g; s/"/\\"/g')"
    for ((i = 0; i < $4; i++)); do echo "url = \"$url\""; done
  } >"$1"
}

# send CONFIG COUNT EXPECTED: runs it; fails unless every answer is 200 and contains EXPECTED
send() {
  local out="$work/answers.txt"
  curl --config "$1" >"$out"
  local ok statuses
  ok="$(grep -cF -- "$3" "$out" || true)"
  statuses="$(grep -c '^status=200$' "$out" || true)"
  if [[ "$ok" != "$2" || "$statuses" != "$2" ]]; then
    echo "expected $2 answers with status 200 and $3; got $statuses and $ok:" >&2
    { grep -v '^status=200$' "$out" | sort | uniq -c | head -5; } >&2 || true
    exit 1
  fi
}

# upgrades HANDLE FIRST_VERSION COUNT: COUNT upgrades of one basket over one connection, the
# first expecting FIRST_VERSION; fails unless each answers `applied` with the next version
upgrades() {
  python3 - "$url" "$1" "$2" "$3" <<'PY'
import http.client, json, sys, urllib.parse
url, handle, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
target = urllib.parse.urlsplit(url)
connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
headers = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "basket_upgrade_memory",
}
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
for version in range(first, first + count):
    arguments = {"basket_id": handle, "expected_version": version, "memory_gib": 100 + version,
                 "operation_id": "instructions-%020d" % version}
    body = {"jsonrpc": "2.0", "id": version, "method": "tools/call",
            "params": {"name": "basket_upgrade_memory", "arguments": arguments, "_meta": meta}}
    connection.request("POST", target.path, json.dumps(body), headers)
    response = connection.getresponse()
    text = response.read().decode()
    try:
        outcome = json.loads(text)["result"]["structuredContent"]
        ok = response.status == 200 and outcome["outcome"] == "applied" \
            and outcome["version"] == version + 1
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        sys.exit(f"upgrade expecting version {version}: HTTP {response.status}: {text[:300]}")
PY
}

# alive NAME PID LOG: exit 1 with the server's log unless PID still runs
alive() {
  kill -0 "$2" 2>/dev/null || { echo "$1 exited:" >&2; cat "$3" >&2; exit 1; }
}

# control NAME PID LOG OPTION: callgrind_control OPTION on PID; it exits 0 even when it reached
# no process, so its own report decides
control() {
  alive "$1" "$2" "$3"
  local said
  said="$(callgrind_control "$4" "$2" 2>&1)" || true
  grep -q 'OK\.' <<<"$said" || { echo "callgrind_control $4 $2 failed: $said" >&2; exit 1; }
}

# measure CASE TOOL ARGUMENTS_JSON EXPECTED SERVER ARGS...: prints "CASE INSTRUCTIONS_PER_REQUEST"
measure() {
  local name="$1" tool="$2" arguments="$3" expected="$4" file="${1//\//-}"
  shift 4
  local log="$work/$file.log" dump="$work/$file.out"
  port_free "$port" || { echo "port $port is already in use" >&2; exit 1; }
  TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$dump" \
    "$@" --bind "127.0.0.1:$port" >"$log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  # Up when this process listens on the port (valgrind runs the server in its own process and is
  # slow to start); the floor serves no /healthz, so no probe request is sent.
  local up=""
  for _ in $(seq 1 600); do
    alive "$name" "$pid" "$log"
    if ss -Hltnp "sport = :$port" | grep -q "pid=$pid,"; then up=1; break; fi
    sleep 0.1
  done
  [[ -n "$up" ]] || { echo "$name did not come up" >&2; cat "$log" >&2; exit 1; }
  local handle=""
  if [[ "$tool" == basket_* ]]; then
    local created
    created="$(call "$url" basket_create '{"operation_id":"instructions-create-00000000000"}')"
    handle="$(jq -er '.result.structuredContent.handle' <<<"$created")"
  fi
  if [[ "$tool" == basket_upgrade_memory ]]; then
    upgrades "$handle" 1 200
    control "$name" "$pid" "$log" -z
    upgrades "$handle" 201 "$requests"
    control "$name" "$pid" "$log" -d
  else
    [[ -z "$handle" ]] || arguments="{\"basket_id\":\"$handle\"}"
    curl_config "$work/warm.conf" "$tool" "$arguments" 200
    curl_config "$work/measured.conf" "$tool" "$arguments" "$requests"
    send "$work/warm.conf" 200 "$expected"
    control "$name" "$pid" "$log" -z
    send "$work/measured.conf" "$requests" "$expected"
    control "$name" "$pid" "$log" -d
  fi
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # The dump's summary line is the total over every thread (callgrind_annotate's PROGRAM TOTALS).
  [[ -f "$dump.1" ]] || { echo "no callgrind dump for $name in $work" >&2; exit 1; }
  local total
  total="$(awk '/^summary:/ { print $2; exit }' "$dump.1")"
  [[ "$total" =~ ^[0-9]+$ ]] || { echo "no instruction count for $name in $dump.1" >&2; exit 1; }
  [[ -z "${KEEP:-}" ]] || cp "$dump.1" "$KEEP/$file.callgrind"
  echo "$name $((total / requests))"
}

# In this shell, not a command substitution, so that `cleanup` sees every server started.
measure floor add '{"a":2,"b":3}' '"sum":5' "$floor" >>"$work/results"
measure add add '{"a":2,"b":3}' '"sum":5' "$bin/quickstart" >>"$work/results"
measure get/memory basket_get '' '"outcome":"current"' "$bin/basket" --memory >>"$work/results"
measure get/sqlite basket_get '' '"outcome":"current"' "$bin/basket" --db "$work/basket.db" \
  >>"$work/results"
measure upgrade/memory basket_upgrade_memory '' '' "$bin/basket" --memory >>"$work/results"
mapfile -t results <"$work/results"

echo
echo "User-space instructions per request ($requests requests a case, one connection, one worker):"
floor_count="$(awk '{print $2}' <<<"${results[0]}")"
add_count="$(awk '{print $2}' <<<"${results[1]}")"
printf '%-15s %12s %9s %9s\n' case instructions x_floor x_add
for line in "${results[@]}"; do
  read -r name count <<<"$line"
  awk -v n="$name" -v c="$count" -v f="$floor_count" -v a="$add_count" \
    'BEGIN { printf "%-15s %12d %9.3f %9.3f\n", n, c, c / f, c / a }'
done

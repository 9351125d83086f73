#!/usr/bin/env bash
# The peer benchmark: mcp-tools beside the bare axum floor, rmcp 3.11 and flymcprust 0.1.1, every
# scenario in one go, printed as one markdown table of req/s, server CPU per request and ratios.
#
# usage: benches/peers/run.sh            (from anywhere; builds the servers first)
#
# Environment knobs (README.md says more):
#   DURATION        length of one timed wrk run, wrk's syntax (default 10s)
#   RUNS            how many times every scenario runs on every server, alternating the servers'
#                   order; the table gives medians (default 1)
#   SCENARIOS       a subset, space- or comma-separated (default: all, in the order below)
#   PEERS           a subset of: floor rmcp flymcprust mcp-tools (default: all four)
#   THREADS         wrk threads (default 1)
#   CONNECTIONS     wrk keep-alive connections outside the conns-* scenarios (default 32)
#   WARMUP          unrecorded wrk load on each fresh server before its timed run (default 1s;
#                   0 for none)
#   STDIO_REQUESTS  requests piped through a stdio server per run (default 200000)
#   PIN             1: the server runs on SERVER_CPUS (default 0) and wrk, curl and the stdio
#                   pipeline's other ends on LOAD_CPUS (default 1), with taskset (default 0:
#                   not pinned, as in ../shared/bench)
#   VERIFY_EACH     1: check every response inside wrk too, in Lua (default 0; see check.lua)
#   TIMEOUT         wrk's per-request timeout (default 5s): a slower answer counts as an error
#   PORT            first loopback port to use (default 18900; each server gets the next one)
#   BUILD           0: skip `cargo build` (default 1)
#
# Scenarios (HTTP ones on all four servers, stdio ones on the three MCP servers):
#   list-3           tools/list, 3 tools
#   list-200         tools/list, 200 tools (the 3 plus 197 fillers)
#   call-add         tools/call add {a:2,b:3}: structured {sum:5}, mirrored as JSON text
#   call-structured  tools/call stats over 16 integers: a 5-field structured result
#   echo-64k         tools/call echo with a 65,536-character text: 64 KiB in, 64 KiB out
#   new-conn         call-add with a new TCP connection per request (wrk sends
#                    `Connection: close`; the server closes after answering, wrk reconnects)
#   conns-1024       call-add over 1,024 keep-alive connections
#   conns-4096       call-add over 4,096 keep-alive connections
#   jwt              call-add with an RS256 bearer token every server verifies (one key)
#   stdio-call       STDIO_REQUESTS tools/call add lines piped through `SERVER --stdio`
#   stdio-list       STDIO_REQUESTS tools/list lines (3 tools) piped the same way
#
# Every server is started afresh for each of its runs (so that its peak memory, VmHWM, is that
# run's), checked once with curl (HTTP 200, application/json, a JSON-RPC result with the expected
# content, not an error, no session id; for jwt also a 401 without the token), warmed up, then
# timed with wrk in its own process. Server CPU is utime+stime of the server process (all
# threads) from /proc/PID/stat before and after the timed run, divided by the requests wrk
# counted. Any failed check, non-2xx answer or socket error marks the run FAIL, and the script
# exits 1 after printing the table.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/target/release"
lua="$here/check.lua"

duration="${DURATION:-10s}"
runs="${RUNS:-1}"
threads="${THREADS:-1}"
connections="${CONNECTIONS:-32}"
warmup="${WARMUP:-1s}"
stdio_requests="${STDIO_REQUESTS:-200000}"
pin="${PIN:-0}"
server_cpus="${SERVER_CPUS:-0}"
load_cpus="${LOAD_CPUS:-1}"
verify_each="${VERIFY_EACH:-0}"
wrk_timeout="${TIMEOUT:-5s}"
port_base="${PORT:-18900}"
build="${BUILD:-1}"
all_scenarios="list-3 list-200 call-add call-structured echo-64k new-conn conns-1024 conns-4096 jwt stdio-call stdio-list"
all_peers="floor rmcp flymcprust mcp-tools"
read -r -a scenarios <<<"${SCENARIOS:-$all_scenarios}"
scenarios=(${scenarios[@]//,/ })
read -r -a peers <<<"${PEERS:-$all_peers}"
peers=(${peers[@]//,/ })
wrk=/usr/bin/wrk
fillers=197 # with add, echo and stats: 200 tools

die() { echo "run.sh: $*" >&2; exit 2; }
[[ "$duration" =~ ^[1-9][0-9]*[smh]?$ ]] || die "DURATION must look like 10s, 2s, 1m (got $duration)"
[[ "$warmup" =~ ^[0-9]+[smh]?$ ]] || die "WARMUP must look like 1s or 0 (got $warmup)"
[[ "$wrk_timeout" =~ ^[1-9][0-9]*[smh]?$ ]] || die "TIMEOUT must look like 5s (got $wrk_timeout)"
for n in "$runs" "$threads" "$connections" "$stdio_requests" "$port_base"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "RUNS, THREADS, CONNECTIONS, STDIO_REQUESTS and PORT are positive integers"
done
(( connections >= threads && port_base + 200 < 65536 )) || die "CONNECTIONS must be at least THREADS"
for s in "${scenarios[@]}"; do [[ " $all_scenarios " == *" $s "* ]] || die "unknown scenario $s (known: $all_scenarios)"; done
for p in "${peers[@]}"; do [[ " $all_peers " == *" $p "* ]] || die "unknown peer $p (known: $all_peers)"; done
[[ " ${peers[*]} " == *" mcp-tools "* ]] || die "PEERS must include mcp-tools: the table is its ratios"
for tool in curl jq /usr/bin/time openssl timeout; do command -v "$tool" >/dev/null || die "$tool is needed"; done
[[ -x "$wrk" ]] || die "wrk is needed at $wrk (Debian: apt-get install wrk)"
if [[ "$pin" == 1 ]]; then
  command -v taskset >/dev/null || die "PIN=1 needs taskset"
  server_on=(taskset -c "$server_cpus")
  load_on=(taskset -c "$load_cpus")
else
  server_on=()
  load_on=()
fi
# 4,096 connections take as many descriptors in wrk and in the server.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ " ${scenarios[*]} " == *" conns-4096 "* ]] && (( $(ulimit -n) < 4200 )); then
  die "conns-4096 needs at least 4200 open files (ulimit -n is $(ulimit -n))"
fi
clk_tck="$(getconf CLK_TCK)"

binary_of() {
  case "$1" in
    floor) echo axum-floor ;;
    rmcp) echo rmcp-peer ;;
    flymcprust) echo flymcprust-peer ;;
    mcp-tools) echo mcp-tools-peer ;;
  esac
}

if [[ "$build" == 1 ]]; then
  echo "== building the servers (release, $here/target)" >&2
  (cd "$here" && cargo build --release --locked --quiet --target-dir "$here/target") >&2
fi
for p in "${peers[@]}"; do
  [[ -x "$bin/$(binary_of "$p")" ]] || die "$bin/$(binary_of "$p") is missing (run without BUILD=0)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/peers-bench.XXXXXX")"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- requests -----------------------------------------------------------------------------------

meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
call_body() { # call_body ID TOOL ARGUMENTS_JSON
  printf '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s","arguments":%s,%s}}' "$1" "$2" "$3" "$meta"
}
list_body() { # list_body ID
  printf '{"jsonrpc":"2.0","id":%s,"method":"tools/list","params":{%s}}' "$1" "$meta"
}
stats_values="[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"
# 65,536 characters of plain ASCII text: no escapes, so a parser may borrow it.
echo_text="$(head -c 65536 /dev/zero | tr '\0' 'x' | fold -w 64 | sed 's/^x/ /' | tr -d '\n')"
(( ${#echo_text} == 65536 )) || die "the echo text is ${#echo_text} characters"
list_body 1 >"$work/list.json"
call_body 1 add '{"a":2,"b":3}' >"$work/add.json"
call_body 1 stats "{\"values\":$stats_values}" >"$work/stats.json"
call_body 1 echo "{\"text\":\"$echo_text\"}" >"$work/echo.json"

# The checks of a response (jq, on the parsed body): a JSON-RPC result that is not an error, and
# what the scenario's answer must hold.
ok_result='.jsonrpc == "2.0" and .id == 1 and has("error") == false and (.result | type) == "object" and (.result.isError // false) == false'
check_list3='(.result.tools | length) == 3 and (.result.tools | map(.name) | sort) == ["add","echo","stats"] and .result.nextCursor == null'
check_list200='(.result.tools | length) == 200 and .result.nextCursor == null'
check_add='.result.structuredContent == {"sum":5} and (.result.content[0].text | fromjson) == {"sum":5}'
check_stats='.result.structuredContent == {"count":16,"sum":136,"min":1,"max":16,"mean":8.5}'
check_echo="(.result.content[0].text | length) == 65536 and .result.content[0].text == \$text"

# ---- the JWT key and token ----------------------------------------------------------------------

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
make_jwt() { # one RS256 key for every server: its JWKS in $work/jwks.json, a token in $token
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/jwt-key.pem" 2>/dev/null
  local n now header payload signature
  n="$(openssl rsa -in "$work/jwt-key.pem" -noout -modulus | sed 's/^Modulus=//' | xxd -r -p | b64url)"
  printf '{"keys":[{"kty":"RSA","use":"sig","alg":"RS256","kid":"peers-bench","n":"%s","e":"AQAB"}]}' "$n" >"$work/jwks.json"
  now="$(date +%s)"
  header="$(printf '{"alg":"RS256","typ":"at+jwt","kid":"peers-bench"}' | b64url)"
  payload="$(printf '{"iss":"https://auth.peers.invalid","aud":"https://mcp.peers.invalid/mcp","sub":"bench","client_id":"bench","scope":"tools","iat":%d,"nbf":%d,"exp":%d}' \
    "$now" "$((now - 60))" "$((now + 86400))" | b64url)"
  signature="$(printf '%s.%s' "$header" "$payload" | openssl dgst -sha256 -sign "$work/jwt-key.pem" -binary | b64url)"
  token="$header.$payload.$signature"
}
token=""
if [[ " ${scenarios[*]} " == *" jwt "* ]]; then make_jwt; fi

# ---- servers ------------------------------------------------------------------------------------

starts=0
port=0
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_server() { # start_server PEER ARGS... -> server_pid, port, url; fails if it does not come up
  local name; name="$(binary_of "$1")"; shift
  local tries=0
  while :; do
    port=$((port_base + starts % 200)); starts=$((starts + 1)); tries=$((tries + 1))
    port_free "$port" && break
    (( tries < 200 )) || { echo "no free port from $port_base" >&2; return 1; }
  done
  "${server_on[@]}" "$bin/$name" --bind "127.0.0.1:$port" "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  url="http://127.0.0.1:$port/mcp"
  local i
  for i in $(seq 1 400); do
    kill -0 "$server_pid" 2>/dev/null || { echo "$name exited:" >&2; cat "$work/server.log" >&2; server_pid=""; return 1; }
    port_free "$port" || return 0
    sleep 0.025
  done
  echo "$name did not listen on $port within 10 s" >&2
  return 1
}

stop_server() {
  [[ -n "$server_pid" ]] || return 0
  kill -INT "$server_pid" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.05; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

cpu_ticks() { # utime + stime of a process, all threads, in clock ticks
  local s; s="$(<"/proc/$1/stat")"; s="${s##*) }"
  local f; read -r -a f <<<"$s"
  echo $(( f[11] + f[12] ))
}

# ---- one run --------------------------------------------------------------------------------------

results="$work/results.tsv"
: >"$results"
failures=()
record() { # record SCENARIO RUN PEER RPS CPU_US MEM_KIB STATUS
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"
}
fail() { # fail SCENARIO RUN PEER WHY
  failures+=("$1 (run $2) on $3: $4")
  record "$1" "$2" "$3" - - - FAIL
  echo "   FAIL: $4" >&2
}

# Sets the scenario's request: method, tool, body, jq check, Lua expectations, server arguments,
# connections, whether each request opens a new connection, whether it carries the token.
configure() {
  s_method=tools/call; s_tool=add; s_body="$work/add.json"; s_check="$check_add"
  s_expect='"sum":5'; s_args=(); s_conns="$connections"; s_close=0; s_token=""; s_kind=http
  case "$1" in
    list-3) s_method=tools/list; s_tool=""; s_body="$work/list.json"; s_check="$check_list3"; s_expect='"tools":[' ;;
    list-200) s_method=tools/list; s_tool=""; s_body="$work/list.json"; s_check="$check_list200"
      s_expect='"filler_196"'; s_args=(--tools "$fillers") ;;
    call-add) ;;
    call-structured) s_tool=stats; s_body="$work/stats.json"; s_check="$check_stats"; s_expect='"mean":8.5' ;;
    echo-64k) s_tool=echo; s_body="$work/echo.json"; s_check="$check_echo"; s_expect='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx xxx' ;;
    new-conn) s_close=1 ;;
    conns-1024) s_conns=1024 ;;
    conns-4096) s_conns=4096 ;;
    jwt) s_token="$token"; s_args=(--jwks "$work/jwks.json") ;;
    stdio-call) s_kind=stdio ;;
    stdio-list) s_kind=stdio; s_method=tools/list; s_tool=""; s_check="$check_list3" ;;
  esac
}

# post BODY_FILE TOKEN -> the answer's body in $work/answer, headers in $work/headers; echoes
# "STATUS CONTENT_TYPE"
post() {
  local auth=()
  [[ -n "$2" ]] && auth=(-H "Authorization: Bearer $2")
  local name=()
  [[ -n "$s_tool" ]] && name=(-H "Mcp-Name: $s_tool")
  "${load_on[@]}" curl -sS --max-time 10 -o "$work/answer" -D "$work/headers" -w '%{http_code} %{content_type}' \
    "$url" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H "Mcp-Method: $s_method" "${name[@]}" "${auth[@]}" \
    --data-binary "@$1" 2>/dev/null || echo "000 -"
}

check_answer() { # check_answer FILE -> 0 if the JSON-RPC answer in FILE passes the scenario's checks
  jq -e --arg text "$echo_text" "($ok_result) and ($s_check)" "$1" >/dev/null 2>&1
}

check_http() { # the full check of one answer, before the server is timed; echoes why it failed
  local got status ctype
  got="$(post "$s_body" "$s_token")"; status="${got%% *}"; ctype="${got#* }"
  if [[ "$status" != 200 ]]; then echo "HTTP $status: $(head -c 300 "$work/answer" 2>/dev/null)"; return 1; fi
  if [[ "$ctype" != application/json* ]]; then echo "content type $ctype: $(head -c 300 "$work/answer")"; return 1; fi
  if grep -qi '^mcp-session-id:' "$work/headers"; then echo "a session id was handed out"; return 1; fi
  if ! check_answer "$work/answer"; then echo "wrong answer: $(head -c 300 "$work/answer")"; return 1; fi
  cp "$work/answer" "$work/answer-ok"
  if [[ -n "$s_token" ]]; then
    got="$(post "$s_body" "")"
    [[ "${got%% *}" == 401 ]] || { echo "without a token: HTTP ${got%% *}, not 401"; return 1; }
    got="$(post "$s_body" "${s_token%?}A")"
    [[ "${got%% *}" == 401 ]] || { echo "with a forged signature: HTTP ${got%% *}, not 401"; return 1; }
  fi
}

run_wrk() { # run_wrk DURATION -> wrk's output
  PEERS_BODY_FILE="$s_body" PEERS_METHOD="$s_method" PEERS_NAME="$s_tool" PEERS_TOKEN="$s_token" \
    PEERS_CLOSE="$s_close" PEERS_VERIFY_EACH="$verify_each" PEERS_EXPECT="$s_expect" \
    "${load_on[@]}" "$wrk" -t "$threads" -c "$s_conns" -d "$1" --timeout "$wrk_timeout" -s "$lua" "$url"
}

field() { # field NAME LINE: the value of NAME=... in a RESULT line
  local x="${2#* $1=}"; echo "${x%% *}"
}

http_run() { # http_run SCENARIO RUN PEER
  local scenario="$1" run="$2" peer="$3" why
  if ! start_server "$peer" "${s_args[@]}"; then fail "$scenario" "$run" "$peer" "did not start"; return; fi
  if ! why="$(check_http)"; then stop_server; fail "$scenario" "$run" "$peer" "$why"; return; fi
  local bytes; bytes="$(wc -c <"$work/answer-ok")"
  [[ "$warmup" =~ ^0+[smh]?$ ]] || run_wrk "$warmup" >/dev/null 2>&1 || true
  local before after out line
  before="$(cpu_ticks "$server_pid")"
  out="$(run_wrk "$duration" 2>&1)" || true
  after="$(cpu_ticks "$server_pid")"
  local hwm; hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/$server_pid/status")"
  # The server must still answer correctly after the load.
  why=""; check_http >/dev/null || why="wrong answer after the timed run"
  stop_server
  line="$(grep '^RESULT ' <<<"$out" || true)"
  [[ -n "$line" ]] || { fail "$scenario" "$run" "$peer" "wrk printed no result: $(tail -3 <<<"$out")"; return; }
  local requests rps errors=0 k
  requests="$(field requests "$line")"; rps="$(field rps "$line")"
  for k in bad err_connect err_read err_write err_status err_timeout; do
    errors=$(( errors + $(field "$k" "$line") ))
  done
  if (( errors > 0 )); then
    fail "$scenario" "$run" "$peer" "${line#RESULT } $(grep '^FIRSTBAD ' <<<"$out" || true)"; return
  fi
  [[ -z "$why" ]] || { fail "$scenario" "$run" "$peer" "$why"; return; }
  (( requests > 0 )) || { fail "$scenario" "$run" "$peer" "no request answered"; return; }
  local cpu_us; cpu_us="$(awk -v t=$((after - before)) -v h="$clk_tck" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / h / n }')"
  record "$scenario" "$run" "$peer" "$rps" "$cpu_us" "$hwm" ok
  printf '   %-11s %10.0f req/s %8s us/req %8.1f MiB  p50 %s us  p99 %s us  answer %s B\n' "$peer" "$rps" \
    "$cpu_us" "$(awk -v k="$hwm" 'BEGIN { print k / 1024 }')" "$(field p50_us "$line")" "$(field p99_us "$line")" \
    "$bytes" >&2
}

stdio_lines() { # stdio_lines FILE: STDIO_REQUESTS requests of the scenario, ids 1..N, one a line
  local call_line list_line
  call_line="$(call_body ID add '{"a":2,"b":3}')"; list_line="$(list_body ID)"
  local template="$call_line"; [[ "$s_method" == tools/list ]] && template="$list_line"
  awk -v n="$stdio_requests" -v t="$template" 'BEGIN {
    i = index(t, "\"id\":ID"); pre = substr(t, 1, i + 4); post = substr(t, i + 7)
    for (k = 1; k <= n; k++) printf "%s%d%s\n", pre, k, post }' >"$1"
}

stdio_run() { # stdio_run SCENARIO RUN PEER
  local scenario="$1" run="$2" peer="$3" name
  name="$(binary_of "$peer")"
  # One request first, checked in full; the server must answer it and exit at end of input.
  head -n 1 "$work/stdio-$scenario" >"$work/stdio-one"
  if ! timeout 20 "$bin/$name" --stdio "${s_args[@]}" <"$work/stdio-one" >"$work/answer" 2>"$work/server.log"; then
    fail "$scenario" "$run" "$peer" "one request: exit status $? $(head -c 300 "$work/server.log")"; return
  fi
  if [[ "$(wc -l <"$work/answer")" != 1 ]] || ! check_answer "$work/answer"; then
    fail "$scenario" "$run" "$peer" "wrong answer: $(head -c 300 "$work/answer")"; return
  fi
  local bytes; bytes="$(wc -c <"$work/answer")"
  # Timed: the lines through a pipe into the server, its answers through a pipe into grep, which
  # counts the results. /usr/bin/time gives the server's user and system time and peak RSS.
  local t0 t1 count status=0
  t0="$(date +%s%N)"
  count="$("${load_on[@]}" cat "$work/stdio-$scenario" \
    | "${server_on[@]}" timeout 600 /usr/bin/time -f 'TIME %e %U %S %M' -o "$work/time" \
        "$bin/$name" --stdio "${s_args[@]}" 2>"$work/server.log" \
    | "${load_on[@]}" grep -c -F '"result":')" || status=$?
  t1="$(date +%s%N)"
  local times; times="$(grep '^TIME ' "$work/time" || true)"
  if [[ -z "$times" ]] || grep -q 'exited with non-zero status\|terminated by signal' "$work/time"; then
    fail "$scenario" "$run" "$peer" "the server failed: $(cat "$work/time") $(head -c 300 "$work/server.log")"; return
  fi
  if [[ "$count" != "$stdio_requests" ]]; then
    fail "$scenario" "$run" "$peer" "$count results for $stdio_requests requests (pipeline status $status)"; return
  fi
  local rps cpu_us mem
  read -r rps cpu_us mem < <(awk -v w="$((t1 - t0))" -v n="$stdio_requests" -v t="$times" 'BEGIN {
    split(t, f, " "); printf "%.1f %.2f %d\n", n / (w / 1e9), (f[3] + f[4]) * 1e6 / n, f[5] }')
  record "$scenario" "$run" "$peer" "$rps" "$cpu_us" "$mem" ok
  printf '   %-11s %10.0f req/s %8s us/req %8.1f MiB  wall %.2f s  answer %s B\n' "$peer" "$rps" "$cpu_us" \
    "$(awk -v k="$mem" 'BEGIN { print k / 1024 }')" "$(awk -v w="$((t1 - t0))" 'BEGIN { print w / 1e9 }')" \
    "$bytes" >&2
}

# ---- all runs -----------------------------------------------------------------------------------

echo "== DURATION=$duration RUNS=$runs THREADS=$threads CONNECTIONS=$connections WARMUP=$warmup STDIO_REQUESTS=$stdio_requests PIN=$pin" >&2
for ((run = 1; run <= runs; run++)); do
  for scenario in "${scenarios[@]}"; do
    configure "$scenario"
    [[ "$s_kind" == stdio && ! -f "$work/stdio-$scenario" ]] && stdio_lines "$work/stdio-$scenario"
    # The servers' order turns by one each run, so that none always goes first.
    order=()
    for ((i = 0; i < ${#peers[@]}; i++)); do order+=("${peers[(i + run - 1) % ${#peers[@]}]}"); done
    echo "== run $run/$runs: $scenario" >&2
    for peer in "${order[@]}"; do
      if [[ "$s_kind" == stdio ]]; then
        [[ "$peer" == floor ]] && continue
        stdio_run "$scenario" "$run" "$peer"
      else
        http_run "$scenario" "$run" "$peer"
      fi
    done
  done
done

# ---- the table ----------------------------------------------------------------------------------

cpu_model="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo
echo "Peer benchmark, $(date -u +%Y-%m-%d) on $(nproc) CPUs ($cpu_model), $(uname -sr); wrk -t$threads," \
  "$duration per run, $runs run(s), median of runs; stdio: $stdio_requests requests per run."
echo "req/s: answers per second (stdio: requests / wall time). CPU: server user+sys µs per request."
echo "Ratios are mcp-tools / peer, req/s then CPU (above 1 on req/s and below 1 on CPU favour mcp-tools)."
echo "Peak MiB: the server's VmHWM (stdio: maximum RSS), floor / rmcp / flymcprust / mcp-tools."
echo
awk -F'\t' -v order="${scenarios[*]}" -v nruns="$runs" '
  function median(list,   a, n, i, j, x) {
    n = split(list, a, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) { x = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function num(x, d) { return x == "" ? "–" : sprintf("%." d "f", x) }
  {
    key = $1 SUBSEP $3
    if ($7 != "ok") { failed[key] = 1; next }
    rps[key] = rps[key] " " $4; cpu[key] = cpu[key] " " $5; mem[key] = mem[key] " " $6
    r_rps[$1, $2, $3] = $4; r_cpu[$1, $2, $3] = $5; ran[$1, $3] = 1
  }
  END {
    np = split("floor rmcp flymcprust mcp-tools", peer, " ")
    printf "| scenario |"
    for (p = 1; p <= np; p++) printf " %s req/s | %s CPU µs/req |", peer[p], peer[p]
    printf " vs floor | vs rmcp | vs flymcprust | peak MiB |\n|---|"
    for (p = 1; p <= np; p++) printf "---:|---:|"
    printf "---:|---:|---:|---:|\n"
    ns = split(order, sc, " ")
    for (s = 1; s <= ns; s++) {
      name = sc[s]; line = "| " name " |"; memcell = ""
      for (p = 1; p <= np; p++) {
        k = name SUBSEP peer[p]
        if (failed[k]) { line = line " FAIL | FAIL |"; memcell = memcell (p > 1 ? " / " : "") "FAIL"; continue }
        line = line " " num(median(rps[k]), 0) " | " num(median(cpu[k]), 1) " |"
        m = median(mem[k]); memcell = memcell (p > 1 ? " / " : "") (m == "" ? "–" : sprintf("%.0f", m / 1024))
      }
      for (p = 1; p <= 3; p++) {
        rr = ""; rc = ""
        for (r = 1; r <= nruns; r++) {
          if ((name, r, "mcp-tools") in r_rps && (name, r, peer[p]) in r_rps && r_rps[name, r, peer[p]] > 0) {
            rr = rr " " r_rps[name, r, "mcp-tools"] / r_rps[name, r, peer[p]]
            if (r_cpu[name, r, peer[p]] > 0) rc = rc " " r_cpu[name, r, "mcp-tools"] / r_cpu[name, r, peer[p]]
          }
        }
        cell = (rr == "") ? "–" : sprintf("%.2fx / %sx", median(rr), rc == "" ? "–" : sprintf("%.2f", median(rc)))
        line = line " " cell " |"
      }
      print line " " memcell " |"
    }
  }' "$results"

mkdir -p "$here/target"
cp "$results" "$here/target/peers-results.tsv"
if (( ${#failures[@]} > 0 )); then
  echo
  echo "FAILED:"
  printf -- '- %s\n' "${failures[@]}"
  exit 1
fi

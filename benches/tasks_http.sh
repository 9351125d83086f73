#!/usr/bin/env bash
# What the Tasks extension costs over HTTP on the basket example: task creation and tasks/get
# against the same tool run synchronously, basket_get and the quickstart's stateless `add`, with
# throughput and server CPU per request, measured in one run with wrk in its own process.
#
# usage: benches/tasks_http.sh            (from anywhere; builds the examples in release)
#
# Environment knobs:
#   SECS      length of one measured run in seconds (default 5)
#   ROUNDS    measured rounds; each round runs every case once, in the same order (default 3)
#   WARMUP    seconds of unrecorded load per case before round 1 (default 2)
#   CONNS     keep-alive connections (default 32); THREADS wrk threads (default 1)
#   BASKETS   baskets, and completed tasks read by task-get, per store (default 64)
#   PORT      first of three loopback ports (default 19420)
#   HARNESS   the side-by-side harness folder, for its call.lua (default ../shared/bench beside
#             the project root)
#
# Cases, on a basket server with --db (SQLite, synchronous=NORMAL) and one with --memory:
#   add                   quickstart `add` (a=2, b=3), the harness's call.lua: the baseline
#   get/STORE             basket_get, a stateful read (benches/wrk/basket.lua)
#   quote-sync/STORE      basket_quote, seconds 0, client without the extension: the tool alone
#   quote-task/STORE      basket_quote, seconds 0.001, client with the extension: every call
#                         becomes a task (record committed, worker run, result written)
#   task-get/STORE        tasks/get of completed tasks
# The basket servers run with the running-task caps raised, so no task call is refused.
#
# Every answer is checked (benches/wrk/tasks.lua); anything but the correct answer makes the
# script exit 1. Growth: the memory server's resident size and the SQLite files' size (main file
# plus -wal) before and after all quote-task runs, per task created; indicative, since the
# allocator and SQLite's page reuse keep some of it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
harness="${HARNESS:-$root/../shared/bench}"
secs="${SECS:-5}"
rounds="${ROUNDS:-3}"
warmup="${WARMUP:-2}"
conns="${CONNS:-32}"
threads="${THREADS:-1}"
baskets="${BASKETS:-64}"
port="${PORT:-19420}"

source "$root/benches/lib.sh"
numeric_settings "$secs" "$rounds" "$warmup" "$conns" "$threads" "$baskets" "$port"
(( secs >= 1 && secs <= 120 && rounds >= 1 && rounds <= 20 && threads >= 1 && conns >= threads \
  && baskets >= 1 && baskets <= 1000 )) || { echo "setting out of range" >&2; exit 2; }
require_tools wrk curl jq
[[ -r "$harness/call.lua" ]] || { echo "no call.lua in $harness (set HARNESS)" >&2; exit 2; }

build_examples basket quickstart

work="$(mktemp -d)"
pids=()
trap cleanup EXIT

caps=(--max-running-tasks 1000000 --max-running-tasks-per-principal 1000000)
start quickstart "$port"; pid_add=$started_pid; url_add="http://127.0.0.1:$port/mcp"
start basket "$((port + 1))" --db "$work/basket.db" "${caps[@]}"; pid_sqlite=$started_pid
url_sqlite="http://127.0.0.1:$((port + 1))/mcp"
start basket "$((port + 2))" --memory "${caps[@]}"; pid_memory=$started_pid
url_memory="http://127.0.0.1:$((port + 2))/mcp"

echo "== wrk $(wrk -v 2>&1 | head -n1 | awk '{print $2}'), threads=$threads connections=$conns" \
  "run=${secs}s rounds=$rounds warm-up=${warmup}s baskets=$baskets cores=$(nproc)"

# task_request URL METHOD NAME PARAMS_JSON -> the response body of a request from a client that
# takes tasks; fails unless HTTP 200
task_request() {
  local meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
  curl -sS --fail --max-time 10 "$1" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H "Mcp-Method: $2" -H "Mcp-Name: $3" \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":{${4:1:-1},$meta}}"
}

# make_tasks URL BASKETS_FILE TASKS_FILE: one completed quote task per basket
make_tasks() {
  local h out id status
  : >"$3"
  while read -r h; do
    # A quote the server first polls after its millisecond has passed is answered inline.
    for _ in 1 2 3; do
      out="$(task_request "$1" tools/call basket_quote \
        "{\"name\":\"basket_quote\",\"arguments\":{\"basket_id\":\"$h\",\"seconds\":0.001}}")"
      id="$(jq -r 'select(.result.resultType == "task") | .result.taskId' <<<"$out")"
      [[ -n "$id" ]] && break
    done
    [[ -n "$id" ]] || { echo "basket_quote did not make a task: $out" >&2; exit 1; }
    echo "$id" >>"$3"
  done <"$2"
  while read -r id; do
    for _ in $(seq 1 100); do
      out="$(task_request "$1" tasks/get "$id" "{\"taskId\":\"$id\"}")"
      status="$(jq -r .result.status <<<"$out")"
      [[ "$status" == completed ]] && break
      [[ "$status" == working ]] || { echo "task $id: $out" >&2; exit 1; }
      sleep 0.02
    done
    [[ "$status" == completed ]] || { echo "task $id did not complete: $out" >&2; exit 1; }
  done <"$3"
}

for store in sqlite memory; do
  url_var="url_$store"
  make_baskets "${!url_var}" "$work/baskets-$store.txt"
  make_tasks "${!url_var}" "$work/baskets-$store.txt" "$work/tasks-$store.txt"
done

failures=0
declare -A created_of=() inline_of=()

# run CASE SECONDS -> sets result_line: the RESULT line of the run, with cpu_us=... appended
run() {
  local case="$1" d="$2" kind store url pid script url_var pid_var env=()
  kind="${case%%/*}"; store="${case#*/}"
  case "$kind" in
    add) url="$url_add"; pid="$pid_add"; env=(BENCH_VERIFY=1); script="$harness/call.lua" ;;
    get) env=(BENCH_TOOL=get "BENCH_BASKETS=$work/baskets-$store.txt"); script="$root/benches/wrk/basket.lua" ;;
    *) env=("BENCH_CASE=$kind" "BENCH_BASKETS=$work/baskets-$store.txt" "BENCH_TASKS=$work/tasks-$store.txt")
       script="$root/benches/wrk/tasks.lua" ;;
  esac
  if [[ "$kind" != add ]]; then
    url_var="url_$store"; pid_var="pid_$store"; url="${!url_var}"; pid="${!pid_var}"
  fi
  wrk_run "$case" "$pid" "$url" "$d" "$script" "${env[@]}"
  if [[ "$kind" == quote-task ]]; then
    created_of[$store]=$(( ${created_of[$store]:-0} + $(field ok "$wrk_result") ))
    inline_of[$store]=$(( ${inline_of[$store]:-0} + $(field inline "$wrk_result") ))
  fi
  result_line="$wrk_result"
}

# verdict CASE LINE -> "ok", or FAIL and the counts of incorrect answers
verdict() {
  local kind="${1%%/*}" bad="" k v keys
  case "$kind" in
    add|get) check "$1" "$2"; return ;;
  esac
  keys="limited rpcerror non200 badbody err_connect err_read err_write err_status err_timeout"
  for k in $keys; do
    v="$(field "$k" "$2")"
    [[ "${v:-0}" != 0 ]] && bad+=" $k=$v"
  done
  if [[ -n "$bad" ]]; then echo "FAIL$bad"; else echo ok; fi
}

rss_bytes() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$1/status"; }
sqlite_bytes() { { cat "$work"/basket.db "$work"/basket.db-wal 2>/dev/null || true; } | wc -c; }

cases=(add get/sqlite quote-sync/sqlite quote-task/sqlite task-get/sqlite
  get/memory quote-sync/memory quote-task/memory task-get/memory)
rss_before="$(rss_bytes "$pid_memory")"; disk_before="$(sqlite_bytes)"
if (( warmup > 0 )); then
  for c in "${cases[@]}"; do
    run "$c" "$warmup"
    note="$(verdict "$c" "$result_line")"
    [[ "$note" == ok ]] || { failures=$((failures + 1)); echo "warm-up $c: $note"; }
  done
fi

declare -A rps_of=() cpu_of=() rps_ratios=() cpu_ratios=()
printf '%-5s %-18s %9s %8s %8s %9s %10s  %s\n' round case "req/s" "p50(ms)" "p99(ms)" requests \
  "cpu_us/req" checks
for ((r = 1; r <= rounds; r++)); do
  base_rps=""; base_cpu=""
  for c in "${cases[@]}"; do
    run "$c" "$secs"; line="$result_line"
    note="$(verdict "$c" "$line")"
    [[ "$note" == ok ]] || failures=$((failures + 1))
    rps="$(field rps "$line")"; cpu="$(field cpu_us "$line")"
    if [[ "$c" == add ]]; then base_rps="$rps"; base_cpu="$cpu"; fi
    rps_of[$c]+="$rps "; cpu_of[$c]+="$cpu "
    rps_ratios[$c]+="$(awk -v a="$rps" -v b="$base_rps" 'BEGIN{printf "%.4f", a/b}') "
    cpu_ratios[$c]+="$(awk -v a="$cpu" -v b="$base_cpu" 'BEGIN{printf "%.4f", a/b}') "
    printf '%-5s %-18s %9.0f %8.3f %8.3f %9s %10s  %s\n' "$r" "$c" "$rps" \
      "$(awk -v u="$(field p50_us "$line")" 'BEGIN{print u/1000}')" \
      "$(awk -v u="$(field p99_us "$line")" 'BEGIN{print u/1000}')" \
      "$(field requests "$line")" "$cpu" "$note"
  done
done
rss_after="$(rss_bytes "$pid_memory")"; disk_after="$(sqlite_bytes)"

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo
echo "Medians over $rounds rounds; ratios are medians of the per-round ratios against that" \
  "round's add."
printf '%-20s %9s %10s %11s %9s %15s %14s\n' case "req/s" "cpu_us/req" "req/s/add" "cpu/add" \
  "req/s/get" "cpu/get"
for c in "${cases[@]}"; do
  store="${c#*/}"; g="get/$store"
  if [[ "$c" == add ]]; then vs_rps="-"; vs_cpu="-"; else
    vs_rps="$(awk -v a="$(med "${rps_of[$c]}")" -v b="$(med "${rps_of[$g]}")" 'BEGIN{printf "%.3f", a/b}')"
    vs_cpu="$(awk -v a="$(med "${cpu_of[$c]}")" -v b="$(med "${cpu_of[$g]}")" 'BEGIN{printf "%.3f", a/b}')"
  fi
  printf '%-20s %9.0f %10.2f %11.3f %9.3f %15s %14s\n' "$c" "$(med "${rps_of[$c]}")" \
    "$(med "${cpu_of[$c]}")" "$(med "${rps_ratios[$c]}")" "$(med "${cpu_ratios[$c]}")" \
    "$vs_rps" "$vs_cpu"
done

echo
for store in sqlite memory; do
  n="${created_of[$store]:-0}"
  if [[ "$store" == sqlite ]]; then delta=$((disk_after - disk_before)); what="SQLite files"
  else delta=$((rss_after - rss_before)); what="resident size"; fi
  printf '%-7s tasks created %8d (and %d quotes answered inline)   %s grew %10d bytes   %5.0f bytes per task\n' \
    "$store" "$n" "${inline_of[$store]:-0}" "$what" "$delta" \
    "$(awk -v d="$delta" -v n="$n" 'BEGIN{print n ? d / n : 0}')"
done

# Every pre-made task still reads completed with its result, on both stores.
for store in sqlite memory; do
  url_var="url_$store"; id="$(head -n1 "$work/tasks-$store.txt")"
  out="$(task_request "${!url_var}" tasks/get "$id" "{\"taskId\":\"$id\"}")"
  jq -e '.result.status == "completed" and (.result.result.structuredContent.state.price_eur | type == "number")' \
    <<<"$out" >/dev/null || { echo "task $id on $store: $out" >&2; failures=$((failures + 1)); }
done

if (( failures > 0 )); then
  echo "FAILED: $failures check(s) failed (see above)" >&2
  exit 1
fi
echo "all answers correct"

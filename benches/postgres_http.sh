#!/usr/bin/env bash
# Reads and mutations per second of the basket example on PostgreSQL over HTTP: one replica
# against three replicas on the same database, with wrk in processes of its own. Reported only:
# on one 2-core machine three replicas, their database and the load generators share the cores,
# so this measures what the replicas cost, not how far they scale out.
#
# usage: eval "$(bash .ci/postgres start)"; benches/postgres_http.sh
#
# Environment knobs:
#   MCP_TOOLS_POSTGRES_URL  the server (required); the script creates a database of its own on it
#                           and drops it at the end
#   SECS    length of one measured run in seconds (default 5)
#   ROUNDS  measured rounds (default 3)
#   CONNS   keep-alive connections in all (default 30; split evenly over three replicas)
#   BASKETS baskets per workload and replica (default 64)
#   PORT    first of three loopback ports (default 19390)
#
# Cases, each round: get/1 and get/3 (basket_get), upgrade/1 and upgrade/3
# (basket_upgrade_memory with fresh operation ids, versions learned from the answers, each wrk
# on baskets of its own). Server CPU is the replicas' user+sys time from /proc; the database's
# own CPU is not in it. Any answer that is not a correct one (see benches/lib.sh `check`) fails
# the script.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lua="$root/benches/wrk/basket.lua"
secs="${SECS:-5}"
rounds="${ROUNDS:-3}"
conns="${CONNS:-30}"
baskets="${BASKETS:-64}"
port="${PORT:-19390}"
url="${MCP_TOOLS_POSTGRES_URL:?set MCP_TOOLS_POSTGRES_URL (eval \"\$(bash .ci/postgres start)\")}"

source "$root/benches/lib.sh"
numeric_settings "$secs" "$rounds" "$conns" "$baskets" "$port"
(( secs >= 1 && rounds >= 1 && conns >= 3 && baskets >= 1 )) || { echo "setting out of range" >&2; exit 2; }
require_tools wrk curl jq psql

build_examples basket

work="$(mktemp -d)"
pids=()
database="bench_$$"
base="${url%%\?*}"
bench_url="${base%/*}/$database"
drop_database() {
  cleanup
  psql "$url" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
}
trap drop_database EXIT
psql "$url" -qc "CREATE DATABASE $database" >/dev/null
settings="$(psql "$bench_url" -Atc "SELECT 'fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit')")"

head -c 32 /dev/urandom >"$work/signing.key"
declare -a urls=() replica_pids=()
for i in 0 1 2; do
  start basket "$((port + i))" --postgres "$bench_url" --signing-key-file "$work/signing.key"
  replica_pids+=("$started_pid")
  urls+=("http://127.0.0.1:$((port + i))/mcp")
done
for i in 0 1 2; do
  for w in get upgrade; do make_baskets "${urls[$i]}" "$work/$w-$i.txt"; done
done

echo "== PostgreSQL ($settings), wrk $(wrk -v 2>&1 | head -n1 | awk '{print $2}'), run=${secs}s" \
  "rounds=$rounds connections=$conns baskets=$baskets cores=$(nproc)"

failures=0
declare -A rps_of=() cpu_of=()
# measure TOOL REPLICAS: wrk on each of the first REPLICAS replicas at once, CONNS split over them
measure() {
  local tool="$1" n="$2" c=$(( conns / $2 )) i t0=0 t1=0 total=0 requests=0 line note
  for ((i = 0; i < n; i++)); do t0=$((t0 + $(proc_cpu_ticks "${replica_pids[$i]}"))); done
  local -a outs=()
  for ((i = 0; i < n; i++)); do
    BENCH_VERIFY=1 BENCH_TOOL="$tool" BENCH_BASKETS="$work/$tool-$i.txt" BENCH_RUN="r$RANDOM$RANDOM$i" \
      timeout $((secs + 30)) wrk -t1 -c"$c" -d"${secs}s" --timeout 5s -s "$lua" "${urls[$i]}" \
      >"$work/wrk-$i.out" 2>&1 &
    outs+=($!)
  done
  for p in "${outs[@]}"; do wait "$p" || { echo "wrk failed" >&2; cat "$work"/wrk-*.out >&2; exit 1; }; done
  for ((i = 0; i < n; i++)); do t1=$((t1 + $(proc_cpu_ticks "${replica_pids[$i]}"))); done
  for ((i = 0; i < n; i++)); do
    line="$(grep '^RESULT ' "$work/wrk-$i.out" | tail -n1)"
    [[ -n "$line" ]] || { echo "no RESULT line from wrk" >&2; cat "$work/wrk-$i.out" >&2; exit 1; }
    note="$(check "$tool" "$line")"
    [[ "$note" == ok ]] || { failures=$((failures + 1)); echo "$tool/$n replica $i: $note" >&2; }
    total="$(awk -v a="$total" -v b="$(field rps "$line")" 'BEGIN{print a + b}')"
    requests=$((requests + $(field requests "$line")))
  done
  local cpu
  cpu="$(awk -v d="$((t1 - t0))" -v hz="$clk_tck" -v r="$requests" 'BEGIN{printf "%.1f", d * 1e6 / hz / r}')"
  rps_of["$tool/$n"]+="$total "
  cpu_of["$tool/$n"]+="$cpu "
  printf '%-5s %-10s %10.0f %12s\n' "$round" "$tool/$n" "$total" "$cpu"
}

printf '%-5s %-10s %10s %12s\n' round case "req/s" "cpu_us/req"
for ((round = 1; round <= rounds; round++)); do
  for tool in get upgrade; do
    for n in 1 3; do measure "$tool" "$n"; done
  done
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo
echo "Medians over $rounds rounds (PostgreSQL: $settings; server CPU is the replicas' only):"
printf '%-12s %10s %12s %14s\n' case "req/s" "cpu_us/req" "x one replica"
for tool in get upgrade; do
  one="$(med "${rps_of["$tool/1"]}")"
  for n in 1 3; do
    m="$(med "${rps_of["$tool/$n"]}")"
    printf '%-12s %10.0f %12.1f %14.2f\n' "$tool/$n" "$m" "$(med "${cpu_of["$tool/$n"]}")" \
      "$(awk -v a="$m" -v b="$one" 'BEGIN{print a / b}')"
  done
done
if (( failures > 0 )); then
  echo "FAILED: $failures check(s) failed (see above)" >&2
  exit 1
fi
echo "all answers correct"

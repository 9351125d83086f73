#!/usr/bin/env bash
# What a growing operation-id ledger costs the requests that never touch it: `basket_get` on the
# basket example's memory store, measured fresh and again after each of several stretches of
# `basket_upgrade_memory` (fresh operation ids, so every applied upgrade leaves a ledger record
# for the retention period). wrk runs in its own process; the server's CPU time comes from /proc.
#
# usage: benches/ledger_growth_http.sh           (from anywhere; builds the example in release)
#
# Environment knobs:
#   SECS        length of one basket_get run in seconds (default 5)
#   FILL        length of one stretch of upgrades in seconds (default 10)
#   STRETCHES   stretches of upgrades, each followed by a basket_get run (default 2)
#   CONNS       keep-alive connections (default 32); THREADS wrk threads (default 1)
#   BASKETS     baskets read (default 64)
#   FILL_BASKETS  baskets upgraded (default 256: each basket holds at most 10,000 live records,
#               the store's default quota, past which upgrades answer LEDGER_FULL)
#   PORT        the loopback port (default 19320)
#   ALLOCATOR   a malloc library to preload into the server (LD_PRELOAD), for example
#               /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (Debian's libjemalloc2); unset: the
#               C library's malloc (GLIBC_TUNABLES, if exported, reaches the server and is shown)
#
# A line per basket_get run: ledger records held (the upgrades answered so far), req/s, the
# server's CPU µs per request and its resident memory; and a line per stretch of upgrades, with
# their req/s and CPU µs per request. Every answer must be a correct one
# (`current` for reads, `applied` or `stale_view` for upgrades), or the script exits 1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lua="$root/benches/wrk/basket.lua"
secs="${SECS:-5}"
fill="${FILL:-10}"
stretches="${STRETCHES:-2}"
conns="${CONNS:-32}"
threads="${THREADS:-1}"
baskets="${BASKETS:-64}"
fill_baskets="${FILL_BASKETS:-256}"
port="${PORT:-19320}"
allocator="${ALLOCATOR:-}"

source "$root/benches/lib.sh"
numeric_settings "$secs" "$fill" "$stretches" "$conns" "$threads" "$baskets" "$fill_baskets" "$port"
(( secs >= 1 && secs <= 120 && fill >= 1 && fill <= 600 && stretches >= 1 && stretches <= 20 \
  && threads >= 1 && conns >= threads && baskets >= 1 && baskets <= 1000 && fill_baskets >= 1 \
  && fill_baskets <= 1000 )) \
  || { echo "setting out of range" >&2; exit 2; }
allocator_readable
require_tools wrk curl jq

build_examples basket

work="$(mktemp -d)"
pids=()
trap cleanup EXIT

# `start` preloads the allocator into the server only, not into wrk or curl.
start basket "$port" --memory
pid=$started_pid
url="http://127.0.0.1:$port/mcp"
make_baskets "$url" "$work/get.txt"
read_baskets=$baskets
baskets=$fill_baskets make_baskets "$url" "$work/upgrade.txt"

echo "== wrk $(wrk -v 2>&1 | head -n1 | awk '{print $2}'), threads=$threads connections=$conns" \
  "get=${secs}s upgrades=${fill}s x $stretches baskets=$read_baskets read, $fill_baskets upgraded" \
  "cores=$(nproc)" \
  "malloc=${allocator:-libc}${GLIBC_TUNABLES:+ GLIBC_TUNABLES=$GLIBC_TUNABLES}"
printf '%-16s %10s %12s %10s %10s\n' "ledger records" "get req/s" "cpu_us/req" "RSS MB" "answers"

records=0
failed=0
measure() {
  wrk_run "get after $records records" "$pid" "$url" "$secs" "$lua" \
    BENCH_TOOL=get BENCH_BASKETS="$work/get.txt" BENCH_RUN="get-$records-$RANDOM"
  local verdict rss
  verdict="$(check get "$wrk_result")"
  [[ "$verdict" == ok ]] || failed=1
  rss="$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")"
  printf '%-16s %10.0f %12s %10s %10s\n' "$records" "$(field rps "$wrk_result")" \
    "$(field cpu_us "$wrk_result")" "$rss" "$verdict"
}

measure
for ((s = 1; s <= stretches; s++)); do
  wrk_run "upgrades $s" "$pid" "$url" "$fill" "$lua" \
    BENCH_TOOL=upgrade BENCH_BASKETS="$work/upgrade.txt" BENCH_RUN="fill-$s-$RANDOM"
  verdict="$(check upgrade "$wrk_result")"
  if [[ "$verdict" != ok ]]; then
    echo "upgrades $s: $verdict" >&2
    failed=1
  fi
  printf '%-16s %10.0f %12s %10s %10s\n' "upgrades $s" "$(field rps "$wrk_result")" \
    "$(field cpu_us "$wrk_result")" "-" "$verdict"
  # Every answered upgrade left a record: `applied` and `stale_view` alike.
  records=$((records + $(field applied "$wrk_result") + $(field stale "$wrk_result")))
  measure
done
exit "$failed"

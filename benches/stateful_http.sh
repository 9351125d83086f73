#!/usr/bin/env bash
# Throughput and server CPU per request of the basket example's stateful tools over HTTP, against
# the quickstart's stateless `add`, measured in one run with wrk in its own process.
#
# usage: benches/stateful_http.sh            (from anywhere; builds the examples in release)
#
# Environment knobs:
#   SECS        length of one measured run in seconds (default 5)
#   ROUNDS      measured rounds; each round runs every case once, in the same order (default 3)
#   WARMUP      seconds of unrecorded load per server before round 1 (default 2)
#   CONNS       keep-alive connections (default 32); THREADS wrk threads (default 1)
#   BASKETS     baskets per workload (default 64)
#   PORT        first of three loopback ports (default 19290)
#   HARNESS     the side-by-side harness folder, for its call.lua (default ../shared/bench
#               beside the project root)
#   ALLOCATOR   a malloc library to preload into every server, the baseline's included
#               (LD_PRELOAD), for example /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 (Debian's
#               libmimalloc2.0); unset: the C library's malloc
#   TOKIO_WORKER_THREADS  worker threads of every server's runtime, the baseline's included
#               (tokio reads it); unset: one a core. With wrk on the same cores, `1` gives the
#               servers one core and wrk the other, where the default oversubscribes them
#
# Cases (each run of each case reads the server's user+sys time from /proc/PID/stat before and
# after, as the harness's compare.sh does):
#   add                quickstart `add` (a=2, b=3), the harness's call.lua: the baseline
#   get/sqlite         basket_get on a server with --db in a temp dir
#   get/memory         basket_get on a server with --memory
#   upgrade/sqlite     basket_upgrade_memory, fresh operation ids, versions learned from answers,
#                      on a random one of BASKETS new baskets each call (new baskets each run) (a basket holds at most 10,000 live ledger
#                      records, the store's default quota, past which upgrades answer LEDGER_FULL)
#   upgrade/memory     the same on the memory server
#   note/{memory,sqlite} run 1, run 2   basket_add_note, two back-to-back runs after the rounds
#
# Correct answers: get is `current`, upgrade is `applied` or `stale_view`, note is `applied`.
# Anything else (rejections, JSON-RPC errors, other HTTP statuses, socket errors, two applied
# answers for one basket version) is counted and printed, and makes the script exit 1. At the end
# every upgraded and noted basket is read back: its version must account for every applied answer
# (a change applied but not answered because wrk stopped while it was in flight is allowed, at most
# CONNS per run), its memory must be the one the last upgrade set, and its notes one per version.
#
# The servers are the release binaries `cargo run --release --example ...` would run, started
# directly so that the PID read from /proc is the server's, not cargo's.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lua="$root/benches/wrk/basket.lua"
harness="${HARNESS:-$root/../shared/bench}"
secs="${SECS:-5}"
rounds="${ROUNDS:-3}"
warmup="${WARMUP:-2}"
conns="${CONNS:-32}"
threads="${THREADS:-1}"
baskets="${BASKETS:-64}"
port="${PORT:-19290}"
allocator="${ALLOCATOR:-}"

source "$root/benches/lib.sh"
numeric_settings "$secs" "$rounds" "$warmup" "$conns" "$threads" "$baskets" "$port"
(( secs >= 1 && secs <= 120 && rounds >= 1 && rounds <= 20 && threads >= 1 && conns >= threads \
  && baskets >= 1 && baskets <= 1000 )) || { echo "setting out of range" >&2; exit 2; }
require_tools wrk curl jq
allocator_readable
[[ -r "$harness/call.lua" ]] || { echo "no call.lua in $harness (set HARNESS)" >&2; exit 2; }

build_examples basket quickstart

work="$(mktemp -d)"
pids=()
trap cleanup EXIT

start quickstart "$port"; pid_add=$started_pid; url_add="http://127.0.0.1:$port/mcp"
start basket "$((port + 1))" --db "$work/basket.db"; pid_sqlite=$started_pid
url_sqlite="http://127.0.0.1:$((port + 1))/mcp"
start basket "$((port + 2))" --memory; pid_memory=$started_pid
url_memory="http://127.0.0.1:$((port + 2))/mcp"

echo "== wrk $(wrk -v 2>&1 | head -n1 | awk '{print $2}'), threads=$threads connections=$conns" \
  "run=${secs}s rounds=$rounds warm-up=${warmup}s baskets=$baskets cores=$(nproc)" \
  "malloc=${allocator:-libc}${GLIBC_TUNABLES:+ GLIBC_TUNABLES=$GLIBC_TUNABLES}" \
  "server-workers=${TOKIO_WORKER_THREADS:-$(nproc)}"
echo "== servers: add $url_add (pid $pid_add), sqlite $url_sqlite (pid $pid_sqlite, $work/basket.db)," \
  "memory $url_memory (pid $pid_memory)"

# Baskets: one set per workload and store, so that notes do not grow the baskets that are read.
for store in sqlite memory; do
  url_var="url_$store"
  for w in get note; do make_baskets "${!url_var}" "$work/$w-$store.txt"; done
done

failures=0
declare -A applied_total=() runs_of=()
run_seq=0

# run CASE SECONDS -> sets result_line: the RESULT line of the run, with cpu_us=... appended
# (not called in a subshell: it keeps the applied answers per case)
run() {
  local case="$1" d="$2" tool store url pid script url_var pid_var
  tool="${case%%/*}"; store="${case#*/}"
  case "$tool" in
    add) url="$url_add"; pid="$pid_add"; script="$harness/call.lua" ;;
    *) url_var="url_$store"; pid_var="pid_$store"; url="${!url_var}"; pid="${!pid_var}"; script="$lua" ;;
  esac
  run_seq=$((run_seq + 1))
  local baskets_file="$work/$tool-$store.txt"
  if [[ "$tool" == upgrade ]]; then
    baskets_file="$work/$tool-$store-$run_seq.txt"
    make_baskets "$url" "$baskets_file"
    echo "$baskets_file" >>"$work/$tool-$store.files"
  fi
  wrk_run "$case" "$pid" "$url" "$d" "$script" BENCH_VERIFY=1 BENCH_TOOL="$tool" \
    BENCH_BASKETS="$baskets_file" BENCH_RUN="r$run_seq$RANDOM"
  if [[ "$tool" != add ]]; then
    applied_total[$case]=$(( ${applied_total[$case]:-0} + $(field applied "$wrk_result") ))
    runs_of[$case]=$(( ${runs_of[$case]:-0} + 1 ))
  fi
  result_line="$wrk_result"
}


# stale_and_errors LINE -> "STALE ERRORS": answers not applied because the view was stale, and
# every answer or failure that is not a correct answer of any tool
stale_and_errors() {
  local e=0 k v
  for k in rejected other rpcerror non200 badbody dup err_connect err_read err_write err_status err_timeout; do
    v="$(field "$k" "$1")"; e=$((e + ${v:-0}))
  done
  echo "$(field stale "$1") $e" | sed 's/^ /- /'
}

applied_fraction() { # LINE -> applied / requests, or "-" where nothing is applied
  local a; a="$(field applied "$1")"
  [[ -z "$a" || "$(field current "$1")" != 0 ]] && { echo "-"; return; }
  awk -v a="$a" -v n="$(field requests "$1")" 'BEGIN{printf "%.3f", a / n}'
}

# Preflight: one call of each, so that a broken server fails before any load.
out="$(call "$url_add" add '{"a":2,"b":3}')"; grep -q '"sum":5' <<<"$out" || { echo "add preflight: $out" >&2; exit 1; }
for store in sqlite memory; do
  url_var="url_$store"; h="$(head -n1 "$work/get-$store.txt")"
  out="$(call "${!url_var}" basket_get "{\"basket_id\":\"$h\"}")"
  [[ "$(jq -r .result.structuredContent.outcome <<<"$out")" == current ]] \
    || { echo "basket_get preflight on $store: $out" >&2; exit 1; }
done

cases=(add get/sqlite get/memory upgrade/sqlite upgrade/memory)
if (( warmup > 0 )); then
  for c in "${cases[@]}"; do
    run "$c" "$warmup"
    note="$(check "$c" "$result_line")"
    [[ "$note" == ok ]] || { failures=$((failures + 1)); echo "warm-up $c: $note"; }
  done
fi

declare -A rps_of=() cpu_of=() rps_ratios=() cpu_ratios=() frac_of=() stale_of=() errors_of=()
row() { # row ROUND LABEL LINE CHECKS
  local counts; counts="$(stale_and_errors "$3")"
  printf '%-5s %-18s %9.0f %8.3f %8.3f %9s %10s %7s %7s %6s  %s\n' "$1" "$2" "$(field rps "$3")" \
    "$(awk -v u="$(field p50_us "$3")" 'BEGIN{print u/1000}')" \
    "$(awk -v u="$(field p99_us "$3")" 'BEGIN{print u/1000}')" \
    "$(field requests "$3")" "$(field cpu_us "$3")" "$(applied_fraction "$3")" \
    "${counts% *}" "${counts#* }" "$4"
}
printf '%-5s %-18s %9s %8s %8s %9s %10s %7s %7s %6s  %s\n' round case "req/s" "p50(ms)" "p99(ms)" \
  requests "cpu_us/req" applied stale errors checks
for ((r = 1; r <= rounds; r++)); do
  base_rps=""; base_cpu=""
  for c in "${cases[@]}"; do
    run "$c" "$secs"; line="$result_line"
    note="$(check "$c" "$line")"
    [[ "$note" == ok ]] || failures=$((failures + 1))
    rps="$(field rps "$line")"; cpu="$(field cpu_us "$line")"
    if [[ "$c" == add ]]; then base_rps="$rps"; base_cpu="$cpu"; fi
    rps_of[$c]+="$rps "; cpu_of[$c]+="$cpu "
    rps_ratios[$c]+="$(awk -v a="$rps" -v b="$base_rps" 'BEGIN{printf "%.4f", a/b}') "
    cpu_ratios[$c]+="$(awk -v a="$cpu" -v b="$base_cpu" 'BEGIN{printf "%.4f", a/b}') "
    frac_of[$c]+="$(applied_fraction "$line") "
    counts="$(stale_and_errors "$line")"
    [[ "${counts% *}" == - ]] || stale_of[$c]=$(( ${stale_of[$c]:-0} + ${counts% *} ))
    errors_of[$c]=$(( ${errors_of[$c]:-0} + ${counts#* } ))
    row "$r" "$c" "$line" "$note"
  done
done

# Notes: two back-to-back runs per store, after the rounds, on baskets no one else touches.
declare -a note_lines=()
for store in memory sqlite; do
  for n in 1 2; do
    run "note/$store" "$secs"; line="$result_line"
    note="$(check "note/$store" "$line")"
    [[ "$note" == ok ]] || failures=$((failures + 1))
    note_lines+=("note/$store run $n|$line|$note")
    row - "note/$store run $n" "$line" "$note"
  done
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
med_or_dash() { if [[ "$1" == -* ]]; then echo -; else med "$1"; fi; }
med_add_rps="$(med "${rps_of[add]}")"
med_add_cpu="$(med "${cpu_of[add]}")"
echo
echo "Medians over $rounds rounds; ratios are medians of the per-round ratios against that" \
  "round's add; stale and errors are totals over the rounds."
printf '%-22s %9s %10s %11s %9s %8s %7s %6s\n' case "req/s" "cpu_us/req" "req/s/add" "cpu/add" \
  applied stale errors
for c in "${cases[@]}"; do
  printf '%-22s %9.0f %10.2f %11.3f %9.3f %8s %7s %6s\n' "$c" "$(med "${rps_of[$c]}")" \
    "$(med "${cpu_of[$c]}")" "$(med "${rps_ratios[$c]}")" "$(med "${cpu_ratios[$c]}")" \
    "$(med_or_dash "${frac_of[$c]}")" "${stale_of[$c]:--}" "${errors_of[$c]:-0}"
done
for entry in "${note_lines[@]}"; do
  IFS='|' read -r label line note <<<"$entry"
  counts="$(stale_and_errors "$line")"
  printf '%-22s %9.0f %10.2f %11.3f %9.3f %8s %7s %6s\n' "$label" "$(field rps "$line")" \
    "$(field cpu_us "$line")" \
    "$(awk -v a="$(field rps "$line")" -v b="$med_add_rps" 'BEGIN{printf "%.4f", a/b}')" \
    "$(awk -v a="$(field cpu_us "$line")" -v b="$med_add_cpu" 'BEGIN{printf "%.4f", a/b}')" \
    "$(applied_fraction "$line")" "${counts% *}" "${counts#* }"
done
echo "(note runs against the median add of the rounds)"

# Read every changed basket back and account for every applied answer.
echo
for case in upgrade/sqlite upgrade/memory note/memory note/sqlite; do
  tool="${case%%/*}"; store="${case#*/}"; url_var="url_$store"
  total=0; inconsistent=0
  while read -r h; do
    out="$(call "${!url_var}" basket_get "{\"basket_id\":\"$h\"}")"
    read -r v mem notes < <(jq -r '.result.structuredContent | "\(.version) \(.state.memory_gib) \(.state.notes.len)"' <<<"$out")
    total=$((total + v - 1))
    if [[ "$tool" == upgrade ]]; then
      want=$(( v == 1 ? 16 : 100 + v - 1 ))
      (( mem == want && notes == 0 )) || inconsistent=$((inconsistent + 1))
    else
      (( notes == v - 1 && mem == 16 )) || inconsistent=$((inconsistent + 1))
    fi
  done < <(if [[ "$tool" == upgrade ]]; then xargs cat <"$work/$tool-$store.files"; else
              cat "$work/$tool-$store.txt"; fi)
  answered="${applied_total[$case]:-0}"
  slack=$(( ${runs_of[$case]:-0} * conns ))
  verdict=ok
  if (( total < answered || total - answered > slack || inconsistent > 0 )); then
    verdict=FAIL; failures=$((failures + 1))
  fi
  printf '%-16s applied answers %8d   changes in the baskets %8d   (unanswered at stop <= %d)   inconsistent baskets %d   %s\n' \
    "$case" "$answered" "$total" "$slack" "$inconsistent" "$verdict"
done

if (( failures > 0 )); then
  echo "FAILED: $failures check(s) failed (see above)" >&2
  exit 1
fi
echo "all answers correct"

# Shell functions shared by the HTTP benchmark scripts (sourced, not run).
#
# The sourcing script sets, before calling them:
#   root     the project root
#   bin      the folder of the release example binaries (`build_examples` sets it)
#   work     a temp folder for logs and basket lists
#   pids     an array; every process started here is appended, and `cleanup` ends them
#   baskets  how many baskets `make_baskets` creates
#   threads, conns  wrk's threads and connections, for `wrk_run`
#   allocator  (optional) a malloc library `start` preloads into every server (LD_PRELOAD)
# and installs `trap cleanup EXIT` itself, so that it can add its own processes to `pids`.

allocator_readable() { # exits 2 unless `allocator` is unset, empty, or a readable file
  [[ -z "${allocator:-}" || ( -f "$allocator" && -r "$allocator" ) ]] \
    || { echo "ALLOCATOR $allocator is not a readable file" >&2; exit 2; }
}

build_examples() { # build_examples NAME...: builds these examples in release and sets `bin`
  local args=() name
  for name in "$@"; do args+=(--example "$name"); done
  echo "== building $* (release)" >&2
  (cd "$root" && cargo build --release --quiet "${args[@]}") >&2
  bin="${CARGO_TARGET_DIR:-$root/target}/release/examples"
  [[ "$bin" = /* ]] || bin="$root/$bin"
}

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}

body_of() { # body_of TOOL ARGUMENTS_JSON
  printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s","arguments":%s,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}' "$1" "$2"
}

# call URL TOOL ARGUMENTS_JSON [TOKEN] -> the response body; fails unless HTTP 200
call() {
  local auth=()
  [[ -n "${4:-}" ]] && auth=(-H "Authorization: Bearer $4")
  curl -sS --fail --max-time 10 "$1" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H 'Mcp-Method: tools/call' -H "Mcp-Name: $2" "${auth[@]}" -d "$(body_of "$2" "$3")"
}

port_free() { # port_free PORT: fails if anything listens on 127.0.0.1:PORT
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# wait_until_up NAME PID LOG URL: bounded poll until URL answers 200, or exit 1 with the log
wait_until_up() {
  for _ in $(seq 1 200); do
    kill -0 "$2" 2>/dev/null || { echo "$1 exited:" >&2; cat "$3" >&2; exit 1; }
    curl -sf -o /dev/null --max-time 1 "$4" && return
    sleep 0.05
  done
  echo "$1 did not come up on $4" >&2; cat "$3" >&2; exit 1
}

start() { # start NAME PORT ARGS... -> sets started_pid; waits until the server's /healthz answers
  local name="$1" p="$2"; shift 2
  port_free "$p" || { echo "port $p is already in use" >&2; exit 1; }
  if [[ -n "${allocator:-}" ]]; then
    LD_PRELOAD="$allocator" "$bin/$name" --bind "127.0.0.1:$p" "$@" >"$work/$name-$p.log" 2>&1 &
  else
    "$bin/$name" --bind "127.0.0.1:$p" "$@" >"$work/$name-$p.log" 2>&1 &
  fi
  started_pid=$!
  pids+=("$started_pid")
  wait_until_up "$name" "$started_pid" "$work/$name-$p.log" "http://127.0.0.1:$p/healthz"
  # The loader skips a library it cannot preload and says so only in the server's log.
  if [[ -n "${allocator:-}" ]] && ! grep -qF "$(readlink -f "$allocator")" "/proc/$started_pid/maps"; then
    echo "$allocator is not loaded in $name:" >&2; cat "$work/$name-$p.log" >&2; exit 1
  fi
}

make_baskets() { # make_baskets URL FILE [TOKEN]: BASKETS new baskets, one handle a line in FILE
  local i out handle
  : >"$2"
  for ((i = 0; i < baskets; i++)); do
    out="$(call "$1" basket_create "{\"operation_id\":\"create-$RANDOM$RANDOM-$i-000000000000\"}" "${3:-}")"
    handle="$(jq -er '.result.structuredContent.handle' <<<"$out")" \
      || { echo "basket_create failed: $out" >&2; exit 1; }
    echo "$handle" >>"$2"
  done
}

# User+sys time of a process and all its threads, in clock ticks of CLK_TCK.
proc_cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
clk_tck="$(getconf CLK_TCK)"

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<" $2"; } # field NAME RESULT_LINE

median() { # numbers on stdin, one a line
  sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit}
    if (NR%2) printf "%.4f\n", v[(NR+1)/2]; else printf "%.4f\n", (v[NR/2]+v[NR/2+1])/2}'
}

# check CASE LINE -> prints "ok" or "FAIL" with the counts that should have been 0; the tool is
# the part of CASE before the first slash
check() {
  local case="$1" line="$2" tool="${1%%/*}" bad="" k v allowed
  case "$tool" in
    add) allowed="" ;;
    get) allowed="current" ;;
    upgrade) allowed="applied stale" ;;
    note) allowed="applied" ;;
  esac
  local keys="non200 badbody sessionhdr err_connect err_read err_write err_status err_timeout"
  [[ "$tool" != add ]] && keys="applied stale current rejected other rpcerror non200 badbody dup err_connect err_read err_write err_status err_timeout"
  for k in $keys; do
    [[ " $allowed " == *" $k "* ]] && continue
    v="$(field "$k" "$line")"
    [[ "${v:-0}" != 0 ]] && bad+=" $k=$v"
  done
  v="$(sed -n 's/.* codes=\([^ ]*\).*/\1/p' <<<" $line")"
  [[ -n "$v" && "$v" != - ]] && bad+=" rejected_codes=$v"
  if [[ -n "$bad" ]]; then echo "FAIL$bad"; else echo ok; fi
}

numeric_settings() { # numeric_settings VALUE...: exit 2 unless every VALUE is a whole number
  local n
  for n in "$@"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "numeric settings expected, got '$n'" >&2; exit 2; }
  done
}

require_tools() { # require_tools TOOL...: exit 2 naming the first one not installed
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install -y $tool)" >&2; exit 2; }
  done
}

# wrk_run LABEL PID URL SECONDS SCRIPT [NAME=VALUE ...] -> sets wrk_result: the RESULT line of one
# wrk run (`threads` threads, `conns` connections, the Lua SCRIPT with NAME=VALUE in its
# environment) with cpu_us=... appended, PID's user+sys time per request; exit 1 with wrk's
# output on a failed run, a missing RESULT line or no request completed
wrk_run() {
  local label="$1" pid="$2" url="$3" d="$4" script="$5" out line t0 t1 requests
  shift 5
  t0="$(proc_cpu_ticks "$pid")"
  out="$(env "$@" timeout $((d + 30)) wrk -t"$threads" -c"$conns" -d"${d}s" --timeout 5s \
    --latency -s "$script" "$url" 2>&1)" || { echo "wrk failed on $label: $out" >&2; exit 1; }
  t1="$(proc_cpu_ticks "$pid")"
  line="$(grep '^RESULT ' <<<"$out" | tail -n1)"
  [[ -n "$line" ]] || { echo "no RESULT line from wrk on $label: $out" >&2; exit 1; }
  requests="$(field requests "$line")"
  (( requests > 0 )) || { echo "no requests completed on $label: $out" >&2; exit 1; }
  wrk_result="$line cpu_us=$(awk -v d="$((t1 - t0))" -v hz="$clk_tck" -v n="$requests" \
    'BEGIN{printf "%.2f", d * 1e6 / hz / n}')"
}

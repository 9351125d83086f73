#!/usr/bin/env bash
# Throughput and server CPU per request of the basket example with OAuth off and on: the same
# calls on two memory-store servers, one open and one an OAuth resource server verifying an RS256
# JWT on every request, measured in one run with wrk in its own process.
#
# usage: benches/oauth_http.sh               (from anywhere; builds the basket example in release)
#
# Environment knobs:
#   SECS        length of one measured run in seconds (default 5)
#   ROUNDS      measured rounds; each round runs every case once, in the same order (default 3)
#   WARMUP      seconds of unrecorded load per case before round 1 (default 2)
#   CONNS       keep-alive connections (default 32); THREADS wrk threads (default 1)
#   BASKETS     baskets per workload and server (default 64)
#   PORT        first of three loopback ports: the JWKS, the open server, the OAuth server
#               (default 19300)
#
# The authorization server is only a JWKS made with openssl from the committed test key
# tests/fixtures/oauth/rsa-a.pem (kid `rsa-a`), served by `python3 -m http.server`; the token is
# an RS256 JWT signed with that key by openssl: iss = the JWKS server's base URL, aud = the OAuth
# server's own /mcp URL, scope `basket:read basket:write`, valid for a day. The server fetches
# the JWKS once, on the first request, before any measured run, so the runs measure header
# parsing, signature verification and claim and scope checks on every request.
#
# Cases, in this order in every round so that off and on alternate (each run reads the server's
# user+sys time from /proc/PID/stat before and after):
#   get/off  get/on            basket_get on BASKETS baskets of the open / OAuth server
#   upgrade/off  upgrade/on    basket_upgrade_memory, fresh operation ids, versions learned from
#                              answers (see benches/wrk/basket.lua); each call takes a place in
#                              its basket's operation ledger (10,000 a basket), so long runs
#                              need more BASKETS, or they fail with LEDGER_FULL rejections
# Each round prints req/s and CPU µs per request of every case and the ratios on/off; the end
# prints the medians over the rounds of each and of the per-round ratios.
#
# Correct: before any load, a tools/call without a token and one with a tampered signature get
# HTTP 401 from the OAuth server, and one with the token gets 200. Under load, get is `current`
# and upgrade is `applied` or `stale_view`, every answer HTTP 200. Anything else (other statuses,
# JSON-RPC errors, rejections, two applied answers for one basket version, socket errors, a run
# without requests) is printed and makes the script exit 1.
#
# The server is the release binary `cargo run --release --example basket` would run, started
# directly so that the PID read from /proc is the server's, not cargo's.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lua="$root/benches/wrk/basket.lua"
key="$root/tests/fixtures/oauth/rsa-a.pem"
secs="${SECS:-5}"
rounds="${ROUNDS:-3}"
warmup="${WARMUP:-2}"
conns="${CONNS:-32}"
threads="${THREADS:-1}"
baskets="${BASKETS:-64}"
port="${PORT:-19300}"

source "$root/benches/lib.sh"
numeric_settings "$secs" "$rounds" "$warmup" "$conns" "$threads" "$baskets" "$port"
(( secs >= 1 && secs <= 120 && rounds >= 1 && rounds <= 20 && threads >= 1 && conns >= threads \
  && baskets >= 1 && baskets <= 1000 )) || { echo "setting out of range" >&2; exit 2; }
require_tools wrk curl jq openssl python3

build_examples basket

work="$(mktemp -d)"
pids=()
trap cleanup EXIT

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
hex_bytes() { # hex digits on stdin -> those bytes, big-endian
  local h; h="$(tr -d ' \n:')"
  (( ${#h} % 2 )) && h="0$h"
  printf '%b' "$(sed 's/../\\x&/g' <<<"$h")"
}

# The JWKS: modulus and exponent of the test key, big-endian without leading zeros, base64url.
n="$(openssl rsa -in "$key" -noout -modulus | sed 's/^Modulus=//' | hex_bytes | b64url)"
e_hex="$(openssl rsa -in "$key" -noout -text | sed -n 's/^publicExponent: [0-9]* (0x\([0-9a-fA-F]*\))$/\1/p')"
[[ -n "$n" && -n "$e_hex" ]] || { echo "could not read the modulus and exponent of $key" >&2; exit 1; }
e="$(hex_bytes <<<"$e_hex" | b64url)"
mkdir "$work/jwks"
printf '{"keys":[{"kty":"RSA","kid":"rsa-a","use":"sig","alg":"RS256","n":"%s","e":"%s"}]}\n' \
  "$n" "$e" >"$work/jwks/jwks.json"

port_jwks="$port"; port_off=$((port + 1)); port_on=$((port + 2))
issuer="http://127.0.0.1:$port_jwks"
jwks_url="$issuer/jwks.json"
url_off="http://127.0.0.1:$port_off/mcp"
url_on="http://127.0.0.1:$port_on/mcp"
audience="$url_on"

port_free "$port_jwks" || { echo "port $port_jwks is already in use" >&2; exit 1; }
python3 -m http.server "$port_jwks" --bind 127.0.0.1 --directory "$work/jwks" \
  >"$work/jwks.log" 2>&1 &
pid_jwks=$!
pids+=("$pid_jwks")
wait_until_up "the JWKS server" "$pid_jwks" "$work/jwks.log" "$jwks_url"

# The access token.
now="$(date +%s)"
jwt_header='{"alg":"RS256","typ":"JWT","kid":"rsa-a"}'
claims="$(jq -cn --arg iss "$issuer" --arg aud "$audience" --argjson now "$now" \
  '{iss: $iss, sub: "bench-user", aud: $aud, scope: "basket:read basket:write", iat: $now,
    exp: ($now + 86400)}')"
signing_input="$(printf '%s' "$jwt_header" | b64url).$(printf '%s' "$claims" | b64url)"
signature="$(printf '%s' "$signing_input" | openssl dgst -sha256 -sign "$key" -binary | b64url)"
token="$signing_input.$signature"
# The same claims with another signature, still well-formed base64url of the same length.
case "${signature:0:1}" in A) other=B ;; *) other=A ;; esac
tampered="$signing_input.$other${signature:1}"

start basket "$port_off" --memory; pid_off=$started_pid
start basket "$port_on" --memory --issuer "$issuer" --audience "$audience" --jwks-url "$jwks_url"
pid_on=$started_pid
token_off=""
token_on="$token"

echo "== wrk $(wrk -v 2>&1 | head -n1 | awk '{print $2}'), threads=$threads connections=$conns" \
  "run=${secs}s rounds=$rounds warm-up=${warmup}s baskets=$baskets cores=$(nproc)"
echo "== servers: off $url_off (pid $pid_off), on $url_on (pid $pid_on), JWKS $jwks_url" \
  "(pid $pid_jwks)"

# Preflight: the OAuth server refuses a call without a valid token and accepts the token.
status_of() { # status_of URL [TOKEN] -> the HTTP status of a basket_create call
  local auth=()
  [[ -n "${2:-}" ]] && auth=(-H "Authorization: Bearer $2")
  curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$1" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H 'Mcp-Method: tools/call' -H 'Mcp-Name: basket_create' "${auth[@]}" \
    -d "$(body_of basket_create '{"operation_id":"preflight-0000000000000000000000"}')"
}
s="$(status_of "$url_on")"
[[ "$s" == 401 ]] || { echo "OAuth server without a token: HTTP $s, not 401" >&2; exit 1; }
s="$(status_of "$url_on" "$tampered")"
[[ "$s" == 401 ]] || { echo "OAuth server with a tampered token: HTTP $s, not 401" >&2; exit 1; }
s="$(status_of "$url_on" "$token")"
[[ "$s" == 200 ]] || {
  echo "OAuth server with the token: HTTP $s, not 200" >&2; cat "$work/basket-$port_on.log" >&2; exit 1
}

for store in off on; do
  url_var="url_$store"; token_var="token_$store"
  for w in get upgrade; do make_baskets "${!url_var}" "$work/$w-$store.txt" "${!token_var}"; done
  h="$(head -n1 "$work/get-$store.txt")"
  out="$(call "${!url_var}" basket_get "{\"basket_id\":\"$h\"}" "${!token_var}")"
  [[ "$(jq -r .result.structuredContent.outcome <<<"$out")" == current ]] \
    || { echo "basket_get preflight on $store: $out" >&2; exit 1; }
done

failures=0
run_seq=0

# run CASE SECONDS -> sets result_line: the RESULT line of the run, with cpu_us=... appended
run() {
  local case="$1" d="$2" tool store url_var pid_var token_var
  tool="${case%%/*}"; store="${case#*/}"
  url_var="url_$store"; pid_var="pid_$store"; token_var="token_$store"
  run_seq=$((run_seq + 1))
  wrk_run "$case" "${!pid_var}" "${!url_var}" "$d" "$lua" BENCH_TOOL="$tool" \
    BENCH_BASKETS="$work/$tool-$store.txt" BENCH_RUN="r$run_seq$RANDOM" BENCH_TOKEN="${!token_var}"
  result_line="$wrk_result"
}

cases=(get/off get/on upgrade/off upgrade/on)
if (( warmup > 0 )); then
  for c in "${cases[@]}"; do
    run "$c" "$warmup"
    note="$(check "$c" "$result_line")"
    [[ "$note" == ok ]] || { failures=$((failures + 1)); echo "warm-up $c: $note"; }
  done
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.4f", a / b}'; }
declare -A rps_of=() cpu_of=() rps_ratios=() cpu_ratios=()
printf '%-5s %-14s %9s %8s %8s %9s %10s  %s\n' round case "req/s" "p50(ms)" "p99(ms)" requests \
  "cpu_us/req" checks
for ((r = 1; r <= rounds; r++)); do
  for c in "${cases[@]}"; do
    run "$c" "$secs"; line="$result_line"
    note="$(check "$c" "$line")"
    [[ "$note" == ok ]] || failures=$((failures + 1))
    rps="$(field rps "$line")"; cpu="$(field cpu_us "$line")"
    rps_of[$c]+="$rps "; cpu_of[$c]+="$cpu "
    printf '%-5s %-14s %9.0f %8.3f %8.3f %9s %10s  %s\n' "$r" "$c" "$rps" \
      "$(awk -v u="$(field p50_us "$line")" 'BEGIN{print u/1000}')" \
      "$(awk -v u="$(field p99_us "$line")" 'BEGIN{print u/1000}')" \
      "$(field requests "$line")" "$cpu" "$note"
    if [[ "$c" == */off ]]; then
      off_rps="$rps"; off_cpu="$cpu"
    else
      tool="${c%%/*}"
      rps_ratios[$tool]+="$(ratio "$rps" "$off_rps") "
      cpu_ratios[$tool]+="$(ratio "$cpu" "$off_cpu") "
      printf '%-5s %-14s on/off: req/s x%.3f, cpu_us/req x%.3f\n' "$r" "$tool" \
        "$(ratio "$rps" "$off_rps")" "$(ratio "$cpu" "$off_cpu")"
    fi
  done
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo
echo "Medians over $rounds rounds; the ratios are medians of the per-round ratios on/off."
printf '%-10s %10s %10s %13s %13s %13s %13s\n' tool "req/s off" "req/s on" "cpu_us/req off" \
  "cpu_us/req on" "req/s on/off" "cpu on/off"
for tool in get upgrade; do
  printf '%-10s %10.0f %10.0f %13.2f %13.2f %13.3f %13.3f\n' "$tool" "$(med "${rps_of[$tool/off]}")" \
    "$(med "${rps_of[$tool/on]}")" "$(med "${cpu_of[$tool/off]}")" "$(med "${cpu_of[$tool/on]}")" \
    "$(med "${rps_ratios[$tool]}")" "$(med "${cpu_ratios[$tool]}")"
done

if (( failures > 0 )); then
  echo "FAILED: $failures check(s) failed (see above)" >&2
  exit 1
fi
echo "all answers correct"

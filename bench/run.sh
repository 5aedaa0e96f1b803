#!/usr/bin/env bash
# hookgate benchmark: throughput and latency side by side with the upstream
# alone and nginx in front of it, on this machine, in one run. Every
# scenario also checks exactly-once at the upstream. See BENCHMARKS.md.
#
#   bench/run.sh            # about 4.5 minutes
#   DURATION=30 bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-6}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-10000}
UP=3100 NGINX=3200 NGINX_TLS=3201 HG_REDIS=3300 HG_TLS=3301 HG_HASHED=3302 HG_EMBEDDED=3400 HG_PG=3600 FLOOR=3800 REDIS=6391

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need() {
    command -v "$1" >/dev/null 2>&1 && return
    echo "--- installing $2"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}
need wrk wrk
need nginx nginx-light
need redis-server redis-server

echo "--- building (release)"
cargo build --release --quiet --bin hookgate --example bench-upstream --example load --example floor
BIN=target/release
WORK=$(mktemp -d /tmp/hookgate-bench.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
stats() { curl -s "127.0.0.1:$UP/stats"; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
rss_peak() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }

# --- the pieces
"$BIN/examples/bench-upstream" "127.0.0.1:$UP" & PIDS+=($!)
redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no --maxmemory-policy noeviction \
    --daemonize no --logfile "$WORK/redis.log" & PIDS+=($!)
# One certificate for nginx and hookgate alike (P-256, for 127.0.0.1; not a
# CA, so that the full-handshake client's verifier accepts it as a server's).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -addext basicConstraints=critical,CA:FALSE 2>/dev/null
sed -e "s|__DIR__|$WORK|g" -e "s|__UPSTREAM__|$UP|" -e "s|__PORT__|$NGINX|" -e "s|__TLSPORT__|$NGINX_TLS|" \
    bench/nginx.conf > "$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf"

gateway_config() { # backend-lines port
    cat <<TOML
[server]
listen = "127.0.0.1:$2"
max_connections = 20000
[store]
$1
key_prefix = "bench:"
[[routes]]
name = "bench"
path = "/hook"
upstream = "http://127.0.0.1:$UP/hook"
key = ["header:X-Id"]
retention = "1h"
[routes.verify]
scheme = "none"
[[routes]]
name = "async"
path = "/async"
upstream = "http://127.0.0.1:$UP/async"
key = ["header:X-Id"]
retention = "1h"
delivery = "async"
max_in_flight = 64
max_age = "1h"
dead_letter_retention = "2h"
[routes.verify]
scheme = "none"
[[routes]]
name = "async-slow"
path = "/async-slow"
upstream = "http://127.0.0.1:$UP/slow"
key = ["header:X-Id"]
retention = "1h"
delivery = "async"
max_age = "1h"
dead_letter_retention = "2h"
[routes.verify]
scheme = "none"
[[routes]]
name = "controlled"
path = "/controlled"
upstream = "http://127.0.0.1:$UP/hook"
key = ["header:X-Id"]
retention = "1h"
circuit_breaker = { failures = 10000, window = "1s" }
upstream_rate = "1000000/s"
[routes.verify]
scheme = "none"
[[routes]]
name = "stripe"
path = "/stripe"
upstream = "http://127.0.0.1:$UP/stripe"
retention = "1h"
[routes.verify]
scheme = "stripe"
secrets = ["whsec_bench_0123456789"]
TOML
}
gateway_config "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS/0\"" $HG_REDIS > "$WORK/redis.toml"
gateway_config "backend = \"embedded\"
path = \"$WORK/bench.db\"" $HG_EMBEDDED > "$WORK/embedded.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/redis.toml" 2>"$WORK/hg-redis.log" & HG_REDIS_PID=$!; PIDS+=($HG_REDIS_PID)
# The Redis gateway again, terminating TLS (its own key prefix).
gateway_config "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS/0\"" $HG_TLS |
    sed -e "s|^listen = .*|&\ntls = { cert = \"$WORK/cert.pem\", key = \"$WORK/key.pem\" }|" \
        -e 's|^key_prefix = "bench:"|key_prefix = "bench-tls:"|' > "$WORK/tls.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/tls.toml" 2>"$WORK/hg-tls.log" & HG_TLS_PID=$!; PIDS+=($HG_TLS_PID)
# The Redis gateway again with the hashed claim (packed_claims = false; its
# own key prefix): the packed claim is the default.
gateway_config "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS/0\"
packed_claims = false" $HG_HASHED |
    sed -e 's|^key_prefix = "bench:"|key_prefix = "bench-hashed:"|' > "$WORK/hashed.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/hashed.toml" 2>"$WORK/hg-hashed.log" & HG_HASHED_PID=$!; PIDS+=($HG_HASHED_PID)
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/embedded.toml" 2>"$WORK/hg-embedded.log" & HG_EMB_PID=$!; PIDS+=($HG_EMB_PID)
for port in $UP $NGINX $NGINX_TLS $HG_REDIS $HG_TLS $HG_HASHED $HG_EMBEDDED $REDIS; do wait_port $port; done
# The floor: a naive idempotent proxy on the same Redis (bench/floor.rs).
"$BIN/examples/floor" "127.0.0.1:$FLOOR" "redis://127.0.0.1:$REDIS/1" "http://127.0.0.1:$UP/hook" & PIDS+=($!)
wait_port $FLOOR
# PostgreSQL, when a server answers on 127.0.0.1:5432 (trust auth): a fresh
# database for the run.
PG_DB=hookgate_bench_run
if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null &&
    psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $PG_DB" -c "CREATE DATABASE $PG_DB" >/dev/null; then
    gateway_config "backend = \"postgres\"
url = \"postgres://postgres@127.0.0.1:5432/$PG_DB\"" $HG_PG > "$WORK/postgres.toml"
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/postgres.toml" 2>"$WORK/hg-postgres.log" & HG_PG_PID=$!; PIDS+=($HG_PG_PID)
    wait_port $HG_PG
else
    HG_PG_PID=""
    echo "--- no PostgreSQL on 127.0.0.1:5432: skipping the postgres scenarios"
fi

"$BIN/examples/load" sign whsec_bench_0123456789 200000 0.2 > "$WORK/deliveries.tsv" 2>/dev/null
export BENCH_DELIVERIES="$WORK/deliveries.tsv" BENCH_THREADS=$THREADS

ROWS=()
WRK_EXTRA=()
TLS=0
scenario() { # name port path script pid
    local name=$1 port=$2 path=$3 script=$4 pid=${5:-}
    local before after result requests unique dups
    before=$(stats)
    local scheme=http
    [ "$TLS" = 1 ] && scheme=https
    result=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" "${WRK_EXTRA[@]}" -s "bench/wrk/$script.lua" "$scheme://127.0.0.1:$port$path" | grep '^RESULT')
    after=$(stats)
    requests=$(( $(echo "$after" | field requests) - $(echo "$before" | field requests) ))
    unique=$(( $(echo "$after" | field unique_keys) - $(echo "$before" | field unique_keys) ))
    dups=$(( $(echo "$after" | field duplicates) - $(echo "$before" | field duplicates) ))
    local rss="-"
    [ -n "$pid" ] && rss=$(rss_peak "$pid")
    ROWS+=("$name|$result|$requests|$unique|$dups|$rss")
    echo "    $name: $result upstream_calls=$requests duplicates_at_upstream=$dups"
}

echo "--- throughput: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s"
scenario "upstream alone" $UP /hook unique
scenario "nginx proxy_pass" $NGINX /hook unique
scenario "hookgate redis, unique keys" $HG_REDIS /hook unique $HG_REDIS_PID
scenario "hookgate redis hashed claims, unique keys" $HG_HASHED /hook unique $HG_HASHED_PID
curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' -d '{"id":"bench-replay","type":"bench"}' "127.0.0.1:$HG_REDIS/hook"
scenario "hookgate redis, replay" $HG_REDIS /hook replay $HG_REDIS_PID
scenario "hookgate redis, stripe 20% dup" $HG_REDIS /stripe stripe $HG_REDIS_PID
# The floor on the same Redis: SET NX GET + forward + SET, nothing else.
scenario "floor (naive proxy), unique keys" $FLOOR /hook unique
curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' -d '{"id":"bench-replay","type":"bench"}' "127.0.0.1:$FLOOR/hook"
scenario "floor (naive proxy), replay" $FLOOR /hook replay
# Senders that open a new connection for every webhook.
WRK_EXTRA=(-H "Connection: close")
scenario "nginx, new connection each" $NGINX /hook unique
scenario "hookgate redis, unique, new conn each" $HG_REDIS /hook unique $HG_REDIS_PID
scenario "hookgate redis, replay, new conn each" $HG_REDIS /hook replay $HG_REDIS_PID
# TLS: both terminate it with the same certificate; a new TLS connection
# (full handshake) per request, and keep-alive for scale.
TLS=1
scenario "nginx TLS, new connection each" $NGINX_TLS /hook unique
scenario "hookgate redis TLS, unique, new conn each" $HG_TLS /hook unique $HG_TLS_PID
WRK_EXTRA=()
scenario "nginx TLS, keep-alive" $NGINX_TLS /hook unique
scenario "hookgate redis TLS, unique, keep-alive" $HG_TLS /hook unique $HG_TLS_PID
TLS=0
# wrk resumes TLS sessions; this client does a full handshake every time.
echo "--- TLS, full handshakes (no resumption, no tickets), ${DURATION}s, $CONNECTIONS at once"
FULL_NGINX=$("$BIN/examples/load" tls "127.0.0.1:$NGINX_TLS" /hook "$WORK/cert.pem" "$DURATION" "$CONNECTIONS")
FULL_HG=$("$BIN/examples/load" tls "127.0.0.1:$HG_TLS" /hook "$WORK/cert.pem" "$DURATION" "$CONNECTIONS")
echo "    nginx: $FULL_NGINX"
echo "    hookgate: $FULL_HG"
scenario "hookgate embedded, unique keys" $HG_EMBEDDED /hook unique $HG_EMB_PID
# The same path with a circuit breaker and a (never binding) rate limit:
# what the traffic controls cost per delivery.
scenario "hookgate embedded, breaker + rate" $HG_EMBEDDED /controlled unique $HG_EMB_PID
curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' -d '{"id":"bench-replay","type":"bench"}' "127.0.0.1:$HG_EMBEDDED/hook"
scenario "hookgate embedded, replay" $HG_EMBEDDED /hook replay $HG_EMB_PID
# Async: the accept rate under load, then how fast the workers deliver the
# backlog (until the upstream's count stops moving for 2 s).
ASYNC_BEFORE=$(stats)
ASYNC_START=$(date +%s.%N)
scenario "hookgate embedded, async accept" $HG_EMBEDDED /async unique $HG_EMB_PID
last=-1 stable=0
while [ $stable -lt 4 ]; do
    now=$(stats | field requests)
    if [ "$now" = "$last" ]; then stable=$((stable + 1)); else stable=0; last=$now; fi
    sleep 0.5
done
ASYNC_AFTER=$(stats)
ASYNC_SECS=$(awk -v a="$ASYNC_START" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a - 2}')
ASYNC_DELIVERED=$(( $(echo "$ASYNC_AFTER" | field requests) - $(echo "$ASYNC_BEFORE" | field requests) ))
ASYNC_DUPS=$(( $(echo "$ASYNC_AFTER" | field duplicates) - $(echo "$ASYNC_BEFORE" | field duplicates) ))
echo "    async delivery: $ASYNC_DELIVERED events delivered ${ASYNC_SECS}s after the accept run began, $ASYNC_DUPS duplicates"
if [ -n "$HG_PG_PID" ]; then
    scenario "hookgate postgres, unique keys" $HG_PG /hook unique $HG_PG_PID
    curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' -d '{"id":"bench-replay","type":"bench"}' "127.0.0.1:$HG_PG/hook"
    scenario "hookgate postgres, replay" $HG_PG /hook replay $HG_PG_PID
fi

# Each proxy's requests are interleaved with requests to the upstream
# alone in one open-loop schedule (each at the rate), so a stall of the box
# falls on both alike and the difference of their p99s is the proxy's.
latency_pair() { "$BIN/examples/load" rate "http://127.0.0.1:$UP/hook,http://127.0.0.1:$1/hook" "$2" "$DURATION" "$3"; }
target() { sed -n "s/^target=$1 //p" <<<"$2"; }
echo "--- latency at a fixed 1000 req/s, ${DURATION}s, 16 connections each (open loop, beside the upstream alone)"
PAIR_NGINX=$(latency_pair "$NGINX" 1000 16)
PAIR_HG=$(latency_pair "$HG_REDIS" 1000 16)
PAIR_EMB=$(latency_pair "$HG_EMBEDDED" 1000 16)
PAIR_PG=""
[ -n "$HG_PG_PID" ] && PAIR_PG=$(latency_pair "$HG_PG" 1000 16)
echo "--- latency at a fixed 5000 req/s, ${DURATION}s, 32 connections each (open loop, beside the upstream alone)"
PAIR5_NGINX=$(latency_pair "$NGINX" 5000 32)
PAIR5_HG=$(latency_pair "$HG_REDIS" 5000 32)

echo "--- $IDLE_CONNECTIONS idle keep-alive connections"
# A fresh gateway, so the peak is the connections' and not the load's.
gateway_config "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS/0\"" 3500 > "$WORK/idle.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/idle.toml" 2>"$WORK/hg-idle.log" & IDLE_PID=$!; PIDS+=($IDLE_PID)
wait_port 3500
IDLE=$("$BIN/examples/load" idle 127.0.0.1:3500 "$IDLE_CONNECTIONS" $IDLE_PID)
# HTTP/2 (h2c) connections keep hyper's state; another fresh gateway.
gateway_config "backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS/0\"" 3510 > "$WORK/idle-h2.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/idle-h2.toml" 2>"$WORK/hg-idle-h2.log" & IDLE_H2_PID=$!; PIDS+=($IDLE_H2_PID)
wait_port 3510
IDLE_H2=$("$BIN/examples/load" idle 127.0.0.1:3510 "$IDLE_CONNECTIONS" $IDLE_H2_PID h2)
# The same HTTP/2 connections on a fresh floor: what hyper's h2 server keeps
# per connection by itself (its write, read and HPACK buffers), whoever
# serves on it.
"$BIN/examples/floor" 127.0.0.1:3520 "redis://127.0.0.1:$REDIS/1" "http://127.0.0.1:$UP/hook" & IDLE_FLOOR_PID=$!; PIDS+=($IDLE_FLOOR_PID)
wait_port 3520
IDLE_H2_FLOOR=$("$BIN/examples/load" idle 127.0.0.1:3520 "$IDLE_CONNECTIONS" $IDLE_FLOOR_PID h2)
kill $IDLE_PID $IDLE_H2_PID $IDLE_FLOOR_PID 2>/dev/null || true

echo "--- async accept in front of a slow consumer (50 ms a call, max_in_flight 16)"
# A fresh gateway and database, as for the idle test; last, since its
# backlog is still being delivered when the run ends.
gateway_config "backend = \"embedded\"
path = \"$WORK/async.db\"" 3700 > "$WORK/async.toml"
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/async.toml" 2>"$WORK/hg-async.log" & ASYNC_PID=$!; PIDS+=($ASYNC_PID)
wait_port 3700
scenario "hookgate embedded, async accept, slow consumer" 3700 /async-slow bounded $ASYNC_PID

# --- report
num() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# The contract's answers, not failures, counted by the scenarios that
# provoke them: "409 in flight", duplicates answered while their first
# delivery ran; "503 full", new events past a full queue's bound
# (`max_queued`, 100,000 by default), which their sender keeps.
printf '\n%-34s %10s %9s %9s %9s %9s %9s %9s %11s %9s\n' scenario "req/s" "p50 ms" "p99 ms" "p99.9 ms" "failed" "409 in flight" "503 full" "upstream" "peak RSS"
for row in "${ROWS[@]}"; do
    IFS='|' read -r name result requests unique dups rss <<<"$row"
    rps=$(num rps "$result")
    printf '%-34s %10s %9s %9s %9s %9s %9s %9s %11s %9s\n' "$name" "$rps" "$(num p50_ms "$result")" "$(num p99_ms "$result")" \
        "$(num p999_ms "$result")" "$(num failed "$result")" "$(num in_flight_409 "$result")" \
        "$(num queue_full_503 "$result")" "$requests" "${rss} MiB"
done
echo
# Each scenario against nginx doing the same: a new connection each, TLS.
rps_of() { for row in "${ROWS[@]}"; do IFS='|' read -r name result _ <<<"$row"; [ "$name" = "$1" ] && num rps "$result"; done; }
echo "ratios against nginx doing the same (req/s):"
for row in "${ROWS[@]}"; do
    IFS='|' read -r name result _ <<<"$row"
    case "$name" in
        *TLS*"new conn each") base="nginx TLS, new connection each" ;;
        *TLS*keep-alive) base="nginx TLS, keep-alive" ;;
        *"new conn each") base="nginx, new connection each" ;;
        *) base="nginx proxy_pass" ;;
    esac
    case "$name" in hookgate*|floor*) awk -v n="$name" -v a="$(num rps "$result")" -v b="$(rps_of "$base")" -v m="$base" 'BEGIN {printf "  %-46s %.2fx  (%s)\n", n, a/b, m}';; esac
done
echo
# One pair's lines: the upstream alone, the proxy, and the p99 it adds.
report_pair() {
    local up proxy
    up=$(target 0 "$2"); proxy=$(target 1 "$2")
    printf '  %-20s %s\n' "upstream alone" "$up" "$1" "$proxy"
    awk -v n="$1" -v a="$(num p99_ms "$proxy")" -v b="$(num p99_ms "$up")" 'BEGIN {printf "  added p99 (%s - upstream alone): %.3f ms\n", n, a-b}'
}
echo "latency at 1000 req/s each (open loop, from scheduled send time, interleaved with the upstream alone):"
report_pair "nginx" "$PAIR_NGINX"
report_pair "hookgate redis" "$PAIR_HG"
report_pair "hookgate embedded" "$PAIR_EMB"
[ -n "$PAIR_PG" ] && report_pair "hookgate postgres" "$PAIR_PG"
echo "latency at 5000 req/s each:"
report_pair "nginx" "$PAIR5_NGINX"
report_pair "hookgate redis" "$PAIR5_HG"
echo
echo "new TLS connections with full handshakes, each one unique POST:"
printf '  %-20s %s\n' "nginx" "$FULL_NGINX" "hookgate redis" "$FULL_HG"
awk -v a="$(num connections_per_s "$FULL_HG")" -v b="$(num connections_per_s "$FULL_NGINX")" 'BEGIN {printf "  hookgate / nginx: %.2fx\n", a/b}'
echo
echo "idle keep-alive connections, HTTP/1.1: $IDLE"
echo "idle keep-alive connections, HTTP/2:   $IDLE_H2"
echo "  the floor (hyper's h2 alone), HTTP/2:   $IDLE_H2_FLOOR"
echo
awk -v n="$ASYNC_DELIVERED" -v s="$ASYNC_SECS" 'BEGIN {printf "async delivery (embedded, max_in_flight 64): %d events accepted and delivered in %.1f s from the start of the accept run: %.0f deliveries/s sustained\n", n, s, n/s}'
echo
echo "exactly-once check (upstream side effects):"
status=0
for row in "${ROWS[@]}"; do
    IFS='|' read -r name result requests unique dups rss <<<"$row"
    case "$name" in hookgate*|floor*)
        if [ "$dups" -ne 0 ]; then echo "  FAIL $name: $dups duplicate side effects"; status=1
        else echo "  ok   $name: $requests upstream calls, $unique distinct events, 0 duplicates"; fi;;
    esac
done
if [ "$ASYNC_DUPS" -ne 0 ]; then echo "  FAIL async delivery: $ASYNC_DUPS duplicate side effects"; status=1
else echo "  ok   async delivery (after the drain): $ASYNC_DELIVERED upstream calls, 0 duplicates"; fi
exit $status

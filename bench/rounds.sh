#!/usr/bin/env bash
# Alternated rounds: contenders measured in turn, round after round, so that
# the box's drift (a warming Redis, another process, the CPU's clock) falls
# on each alike, and the medians are compared. bench/run.sh measures each
# scenario once; this is for a decision between two figures that one run
# cannot separate (see BENCHMARKS.md, "Method").
#
#   bench/rounds.sh new-events      # floor, hashed claims, packed claims (keep-alive, unique keys)
#   bench/rounds.sh new-connection  # nginx and hookgate, a replay per connection, the sender asks to close
#   bench/rounds.sh postgres        # nginx and hookgate on the local PostgreSQL (a fresh database), unique keys
#   ROUNDS=5 DURATION=10 bench/rounds.sh new-events
#   BEFORE=/tmp/hookgate-main bench/rounds.sh new-connection   # adds "before": that binary, as "hashed"
#
# wrk runs with -t1 (THREADS) -c32 (CONNECTIONS), one process beside the
# contenders, as a sender's load would. Each round's exactly-once check is
# the upstream's duplicate count, which must stay 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

SET=${1:-new-events}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-1}
UP=3110 NGINX=3210 HASHED=3310 PACKED=3312 BEFORE_PORT=3314 POSTGRES=3316 FLOOR=3810 REDIS=6393
BEFORE=${BEFORE:-}

command -v nginx >/dev/null || { echo "nginx is needed (bench/run.sh installs it)" >&2; exit 1; }
bench_start rounds
cargo build --release --quiet --example floor
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
stats() { curl -s "127.0.0.1:$UP/stats"; }

"$BIN/examples/bench-upstream" "127.0.0.1:$UP" & PIDS+=($!)
redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --logfile "$WORK/redis.log" & PIDS+=($!)
REDIS_PID=$!
gateway() { # port key_prefix extra-store-lines [store-section]
    local store=${4:-$(store_section redis)}
    cat <<TOML
[server]
listen = "127.0.0.1:$1"
max_connections = 20000
[store]
$store
key_prefix = "$2"
$3
$(sync_route $UP)
TOML
}
# The postgres set's store: a fresh database NAME.
postgres_store() { fresh_database "$1" && store_section postgres "" "$1"; }
gateway $HASHED rounds-hashed: "packed_claims = false" > "$WORK/hashed.toml"
gateway $PACKED rounds-packed: "packed_claims = true" > "$WORK/packed.toml"
wait_port $REDIS
declare -A PROCS # each contender's processes, for the CPU they spend
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/hashed.toml" 2>"$WORK/hashed.log" & PIDS+=($!)
PROCS[hashed]=$! PROCS[hookgate]=$!
HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/packed.toml" 2>"$WORK/packed.log" & PIDS+=($!)
PROCS[packed]=$!
if [ "$SET" = postgres ]; then
    gateway $POSTGRES rounds: "" "$(postgres_store hookgate_rounds)" > "$WORK/postgres.toml"
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/postgres.toml" 2>"$WORK/postgres.log" & PIDS+=($!)
    PROCS[postgres]=$!
fi
if [ -n "$BEFORE" ]; then
    if [ "$SET" = postgres ]; then
        gateway $BEFORE_PORT rounds-before: "" "$(postgres_store hookgate_rounds_before)"
    else
        gateway $BEFORE_PORT rounds-before: "packed_claims = false"
    fi > "$WORK/before.toml"
    HOOKGATE_LOG=warn "$BEFORE" run --config "$WORK/before.toml" 2>"$WORK/before.log" & PIDS+=($!)
    PROCS[before]=$!
fi
"$BIN/examples/floor" "127.0.0.1:$FLOOR" "redis://127.0.0.1:$REDIS/1" "http://127.0.0.1:$UP/hook" & PIDS+=($!)
PROCS[floor]=$!
sed -e "s|__DIR__|$WORK|g" -e "s|__UPSTREAM__|$UP|" -e "s|__PORT__|$NGINX|" \
    -e "/__TLSPORT__/d" -e "/ssl_certificate/d" bench/nginx.conf > "$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf"
trap 'kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; bench_cleanup' EXIT
for port in $UP $HASHED $PACKED $FLOOR $NGINX ${BEFORE:+$BEFORE_PORT}; do wait_port $port; done
[ "$SET" = postgres ] && wait_port $POSTGRES
PROCS[nginx]="$(cat "$WORK/nginx.pid") $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"
# CPU time of a contender's processes, in clock ticks.
# A process that ended meanwhile (a database backend) counts 0.
ticks() { local sum=0 pid; for pid in $1; do sum=$((sum + $(cpu_ticks "$pid" 2>/dev/null || echo 0))); done; echo $sum; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# The store's CPU: the PostgreSQL server's for the postgres set (its
# backends live as long as the gateways' pools), else the Redis server's.
# One contender runs at a time, so a round's share is that contender's
# (nginx's is the store's idle).
store_ticks() { if [ "$SET" = postgres ]; then ticks "$(pgrep -x postgres | tr '\n' ' ')"; else ticks $REDIS_PID; fi; }

WRK_EXTRA=()
case $SET in
    new-events)
        CONTENDERS=("floor:$FLOOR" ${BEFORE:+"before:$BEFORE_PORT"} "hashed:$HASHED" "packed:$PACKED")
        SCRIPT=unique ;;
    new-connection)
        CONTENDERS=("nginx:$NGINX" ${BEFORE:+"before:$BEFORE_PORT"} "hookgate:$HASHED")
        SCRIPT=replay
        WRK_EXTRA=(-H "Connection: close")
        # A 1 KiB event, as a typical webhook's body.
        export BENCH_BODY="$WORK/event.json"
        printf '{"id":"bench-replay","type":"bench","pad":"%s"}' "$(head -c 980 /dev/zero | tr '\0' x)" > "$BENCH_BODY"
        for port in $HASHED $NGINX ${BEFORE:+$BEFORE_PORT}; do
            curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' \
                --data-binary "@$BENCH_BODY" "127.0.0.1:$port/hook"
        done ;;
    postgres)
        CONTENDERS=("nginx:$NGINX" ${BEFORE:+"before:$BEFORE_PORT"} "postgres:$POSTGRES")
        SCRIPT=unique ;;
    *) echo "the set is new-events, new-connection or postgres, not $SET" >&2; exit 2 ;;
esac

num() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
declare -A RPS P99 CPU STORE_CPU
status=0
echo "--- $SET: $ROUNDS rounds of wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s, contenders in turn"
for round in $(seq "$ROUNDS"); do
    line="round $round:"
    for contender in "${CONTENDERS[@]}"; do
        name=${contender%%:*} port=${contender##*:}
        before=$(stats | field duplicates) cpu_before=$(ticks "${PROCS[$name]}")
        store_before=$(store_ticks)
        result=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" "${WRK_EXTRA[@]}" \
            -s "bench/wrk/$SCRIPT.lua" "http://127.0.0.1:$port/hook" | grep '^RESULT')
        dups=$(( $(stats | field duplicates) - before ))
        # nginx forwards every replay: only the idempotent contenders count.
        if [ "$name" != nginx ] && [ "$dups" -ne 0 ]; then echo "FAIL $name: $dups duplicate side effects"; status=1; fi
        cpu=$(( ($(ticks "${PROCS[$name]}") - cpu_before) * TICK_US / $(num requests "$result") ))
        CPU[$name]+="$cpu "
        store=$(( ($(store_ticks) - store_before) * TICK_US / $(num requests "$result") ))
        STORE_CPU[$name]+="$store "
        RPS[$name]+="$(num rps "$result") "
        P99[$name]+="$(num p99_ms "$result") "
        line+=" $name $(num rps "$result") req/s (p99 $(num p99_ms "$result") ms, $cpu µs CPU each, store $store µs, failed $(num failed "$result"));"
    done
    echo "  $line"
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
first=${CONTENDERS[0]%%:*}
base=$(median <<<"${RPS[$first]}")
echo "--- medians over $ROUNDS rounds (req/s, p99, the contender's own CPU per request, ratio to $first)"
for contender in "${CONTENDERS[@]}"; do
    name=${contender%%:*}
    rps=$(median <<<"${RPS[$name]}")
    awk -v n="$name" -v r="$rps" -v p="$(median <<<"${P99[$name]}")" -v c="$(median <<<"${CPU[$name]}")" \
        -v d="$(median <<<"${STORE_CPU[$name]}")" -v b="$base" \
        'BEGIN {printf "  %-10s %8.0f req/s  p99 %6.2f ms  %5.0f µs CPU  %.2fx", n, r, p, c, r / b
                printf "  store %4.0f µs", d
                printf "\n"}'
done
exit $status

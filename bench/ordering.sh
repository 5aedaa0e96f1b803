#!/usr/bin/env bash
# What ordering costs per event (BENCHMARKS.md, "Ordered delivery"): one
# async route on a fresh Redis, unordered, ordered over 1,000 entities, and
# ordered with every event of one entity (one at a time, end to end). wrk
# sends unique events for DURATION seconds; the run ends when the upstream
# holds every accepted event. Per event: the gateway's CPU, Redis's CPU,
# and the time from the first acceptance to the last delivery. The
# upstream checks exactly-once (duplicates must be 0).
#
#   bench/ordering.sh                # about a minute
#   ROUNDS=3 bench/ordering.sh
#   SHAPES="one-entity" bench/ordering.sh
#   STORE=embedded bench/ordering.sh # the default store (its CPU is the gateway's)
#   STORE=postgres bench/ordering.sh # PostgreSQL on 127.0.0.1:5432 (its CPU is not counted)
#
# Every run starts on an empty store: a fresh Redis, a new SQLite file, a
# new PostgreSQL database.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
STORE=${STORE:-redis}
ROUNDS=${ROUNDS:-1}
SHAPES=${SHAPES:-unordered many-entities one-entity}
UP1=3111 GW=3710 REDIS=6393

. bench/lib.sh
bench_start ordering
redis_cpu() {
    [ "$STORE" = redis ] || { echo 0; return; }
    redis-cli -p $REDIS info cpu | awk -F: '/used_cpu_(sys|user):/ {s += $2} END {printf "%.3f", s}'
}

pg_db() { echo "hookgate_ordering_${1//-/_}"; }
fresh_store() { # shape
    rm -f "$WORK/$1.db" "$WORK/$1.db-wal" "$WORK/$1.db-shm"
    if [ "$STORE" = postgres ]; then
        fresh_database "$(pg_db "$1")"
    fi
}

route() { # shape
    cat <<TOML
[server]
listen = "127.0.0.1:$GW"
[store]
$(store_section "$STORE" "$1" "$(pg_db "$1")")
key_prefix = "bench:"
[[routes]]
name = "orders"
path = "/hook"
key = ["header:X-Id"]
upstream = "http://127.0.0.1:$UP1/a"
retention = "1h"
delivery = "async"
max_in_flight = 64
max_age = "1h"
dead_letter_retention = "2h"
TOML
    [ "$1" != unordered ] && echo 'order_by = "json:/data/object/id"'
    printf '[routes.verify]\nscheme = "none"\n'
}

run() { # shape
    local shape=$1 pids=()
    "$BIN/examples/bench-upstream" "127.0.0.1:$UP1" & pids+=($!)
    redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --logfile "$WORK/redis.log" & pids+=($!)
    wait_port $UP1; wait_port $REDIS
    fresh_store "$shape"
    route "$shape" > "$WORK/$shape.toml"
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/$shape.toml" >"$WORK/$shape.log" 2>&1 & local gw=$!
    pids+=($gw)
    wait_port $GW
    local ticks0 redis0 start
    ticks0=$(cpu_ticks $gw); redis0=$(redis_cpu); start=$(date +%s.%N)
    local accepted
    local entities=1000; [ "$shape" = "one-entity" ] && entities=1
    accepted=$(ENTITIES=$entities wrk -t1 -c32 -d"${DURATION}s" -s bench/wrk/entities.lua \
        "http://127.0.0.1:$GW/hook" | awk '/requests in/ {print $1}')
    for _ in $(seq 1200); do
        local n; n=$(curl -s "127.0.0.1:$UP1/stats" | field unique_keys)
        [ "$n" -ge "$accepted" ] && break
        sleep 0.1
    done
    local end ticks1 redis1
    end=$(date +%s.%N); ticks1=$(cpu_ticks $gw); redis1=$(redis_cpu)
    local dup=0 delivered
    dup=$(curl -s "127.0.0.1:$UP1/stats" | field duplicates)
    delivered=$(curl -s "127.0.0.1:$UP1/stats" | field unique_keys)
    local hz; hz=$(getconf CLK_TCK)
    awk -v s="$shape" -v n="$accepted" -v t=$((ticks1 - ticks0)) -v hz="$hz" -v r0="$redis0" -v r1="$redis1" \
        -v a="$start" -v b="$end" -v d="$dup" -v m="$delivered" 'BEGIN {
        left = n > m ? sprintf(" (%d left after 2 min)", n - m) : ""
        printf "| %s | %d%s | %.0f | %.1f | %.1f | %d |\n", s, n, left, m / (b - a), t / hz / m * 1e6, (r1 - r0) / m * 1e6, d }'
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}

echo "| route | events | delivered/s (end to end) | gateway CPU µs/event | Redis CPU µs/event | duplicates |"
echo "| --- | --- | --- | --- | --- | --- |"
for _ in $(seq "$ROUNDS"); do
    for shape in $SHAPES; do run "$shape"; done
done

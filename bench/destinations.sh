#!/usr/bin/env bash
# What a second destination costs per event (BENCHMARKS.md, "Several
# destinations"): one async route with one upstream, with one destination,
# and with two, each on a fresh Redis. wrk sends unique events for
# DURATION seconds; the run ends when every destination holds every
# accepted event. Per event: the gateway's CPU, Redis's CPU, and the time
# from the first acceptance to the last delivery. Each upstream checks
# exactly-once (duplicates must be 0).
#
#   bench/destinations.sh            # about a minute
#   ROUNDS=3 bench/destinations.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-1}
UP1=3101 UP2=3102 GW=3700 REDIS=6392

. bench/lib.sh
bench_start destinations
redis_cpu() { redis-cli -p $REDIS info cpu | awk -F: '/used_cpu_(sys|user):/ {s += $2} END {printf "%.3f", s}'; }

route() { # shape
    cat <<TOML
[server]
listen = "127.0.0.1:$GW"
[store]
backend = "redis"
url = "redis://127.0.0.1:$REDIS"
key_prefix = "bench:"
[[routes]]
name = "orders"
path = "/hook"
key = ["header:X-Id"]
retention = "1h"
delivery = "async"
max_in_flight = 64
max_age = "1h"
dead_letter_retention = "2h"
TOML
    [ "$1" = upstream ] && echo "upstream = \"http://127.0.0.1:$UP1/a\""
    printf '[routes.verify]\nscheme = "none"\n'
    [ "$1" = upstream ] && return
    printf '[[routes.destinations]]\nname = "a"\nupstream = "http://127.0.0.1:%s/a"\n' $UP1
    [ "$1" = two ] && printf '[[routes.destinations]]\nname = "b"\nupstream = "http://127.0.0.1:%s/b"\n' $UP2
    return 0
}

run() { # shape
    local shape=$1 pids=()
    "$BIN/examples/bench-upstream" "127.0.0.1:$UP1" & pids+=($!)
    "$BIN/examples/bench-upstream" "127.0.0.1:$UP2" & pids+=($!)
    redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --logfile "$WORK/redis.log" & pids+=($!)
    wait_port $UP1; wait_port $UP2; wait_port $REDIS
    route "$shape" > "$WORK/$shape.toml"
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/$shape.toml" >"$WORK/$shape.log" 2>&1 & local gw=$!
    pids+=($gw)
    wait_port $GW
    local ticks0 redis0 start
    ticks0=$(cpu_ticks $gw); redis0=$(redis_cpu); start=$(date +%s.%N)
    local accepted
    accepted=$(wrk -t1 -c32 -d"${DURATION}s" -s bench/wrk/unique.lua "http://127.0.0.1:$GW/hook" \
        | awk '/requests in/ {print $1}')
    local want=1; [ "$shape" = two ] && want=2
    for _ in $(seq 600); do
        local done=0
        for up in $UP1 $UP2; do
            local n; n=$(curl -s "127.0.0.1:$up/stats" | field unique_keys)
            [ "$n" -ge "$accepted" ] && done=$((done + 1))
        done
        [ "$done" -ge "$want" ] && break
        sleep 0.1
    done
    local end ticks1 redis1
    end=$(date +%s.%N); ticks1=$(cpu_ticks $gw); redis1=$(redis_cpu)
    local dup=0
    for up in $UP1 $UP2; do dup=$((dup + $(curl -s "127.0.0.1:$up/stats" | field duplicates))); done
    local hz; hz=$(getconf CLK_TCK)
    awk -v s="$shape" -v n="$accepted" -v t=$((ticks1 - ticks0)) -v hz="$hz" -v r0="$redis0" -v r1="$redis1" \
        -v a="$start" -v b="$end" -v d="$dup" 'BEGIN {
        printf "| %s | %d | %.0f | %.1f | %.1f | %d |\n", s, n, n / (b - a), t / hz / n * 1e6, (r1 - r0) / n * 1e6, d }'
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}

echo "| route | events | delivered/s (end to end) | gateway CPU µs/event | Redis CPU µs/event | duplicates |"
echo "| --- | --- | --- | --- | --- | --- |"
for _ in $(seq "$ROUNDS"); do
    for shape in upstream one two; do run $shape; done
done

#!/usr/bin/env bash
# What `[store.encryption]` costs (BENCHMARKS.md, "History, condensed"): one sync
# route on a fresh Redis, encryption off and on, alternated ROUNDS times:
# unique keys (each answer sealed as it is recorded), replays answered by
# the replay cache (plaintext in process: nothing to open), and replays with
# the cache off (each one opens the recorded answer). wrk -t1 -c32; the
# upstream answers `{"ok":true}` with its headers, and checks exactly-once.
#
#   bench/encryption.sh              # about 2 minutes
#   ROUNDS=5 DURATION=8 bench/encryption.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-6}
ROUNDS=${ROUNDS:-3}
UP=3112 GW=3711 REDIS=6394

. bench/lib.sh
bench_start encryption
openssl rand -hex 32 > "$WORK/key"


config() { # encryption(on|off) cache_bytes round
    cat <<TOML
[server]
listen = "127.0.0.1:$GW"
[store]
backend = "redis"
url = "redis://127.0.0.1:$REDIS/0"
key_prefix = "bench:"
replay_cache_bytes = $2
TOML
    [ "$1" = on ] && printf '[store.encryption]\nkeys = ["${file:%s}"]\n' "$WORK/key"
    sync_route $UP
}

rate() { # script
    wrk -t1 -c32 -d"${DURATION}s" -s "bench/wrk/$1.lua" "http://127.0.0.1:$GW/hook" | awk '/^Requests\/sec/ {printf "%.0f", $2}'
}

run() { # encryption cache_bytes round
    "$BIN/examples/bench-upstream" "127.0.0.1:$UP" & local up=$!
    redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --logfile "$WORK/redis.log" & local redis=$!
    wait_port $UP; wait_port $REDIS
    config "$1" "$2" "$3" > "$WORK/gw.toml"
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/gw.toml" 2>"$WORK/gw.log" & local gw=$!
    wait_port $GW
    local unique replay
    unique=$(rate unique)
    curl -s -o /dev/null -X POST -H 'X-Id: bench-replay' -H 'Content-Type: application/json' \
        -d '{"id":"bench-replay","type":"bench"}' "127.0.0.1:$GW/hook"
    replay=$(rate replay)
    echo "| $1 | $2 | $3 | $unique | $replay | $(curl -s "127.0.0.1:$UP/stats" | field duplicates) |"
    kill $gw $redis $up; wait $gw $redis $up 2>/dev/null || true
}

echo "| encryption | replay_cache_bytes | round | unique req/s | replay req/s | upstream duplicates |"
echo "| --- | --- | --- | --- | --- | --- |"
for round in $(seq "$ROUNDS"); do
    for encryption in off on; do
        run $encryption 33554432 "$round"
        run $encryption 0 "$round"
    done
done

#!/usr/bin/env bash
# What `hookgate store reencrypt` takes (BENCHMARKS.md, "History, condensed"): a
# store filled with completed events under key A (wrk unique keys for
# FILL seconds), the gateway reloaded with [B, A] and left serving, then
# `hookgate store reencrypt --rate 1000000/s` (unpaced) timed, and once
# more (a pass that finds everything current). Per store, each fresh.
#
#   bench/reencrypt.sh                       # redis, embedded, postgres
#   STORES=embedded FILL=10 bench/reencrypt.sh
set -euo pipefail
cd "$(dirname "$0")/.."

FILL=${FILL:-5}
STORES=${STORES:-redis embedded postgres}
UP=3113 GW=3712 REDIS=6395 DB=hookgate_bench_reencrypt

. bench/lib.sh
bench_start reencrypt
openssl rand -hex 32 > "$WORK/a.key"
openssl rand -hex 32 > "$WORK/b.key"

config() { # store keys
    cat <<TOML
[server]
listen = "127.0.0.1:$GW"
[store]
$(store_section "$1" hookgate "$DB")
key_prefix = "bench:"
[store.encryption]
keys = [$2]
TOML
    sync_route $UP
}

seconds() { # command…: wall seconds, its stdout's last line kept in $WORK/said
    local start end
    start=$(date +%s.%N)
    "$@" > "$WORK/said" 2>/dev/null || true
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}'
}

echo "| store | records | first run (s) | records/s | second run, all current (s) | said |"
echo "| --- | --- | --- | --- | --- | --- |"
"$BIN/examples/bench-upstream" "127.0.0.1:$UP" & PIDS+=($!)
wait_port $UP
for store in $STORES; do
    case $store in
        redis)
            redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no \
                --logfile "$WORK/redis.log" & PIDS+=($!)
            wait_port $REDIS ;;
        postgres)
            fresh_database "$DB" ;;
    esac
    a="\"\${file:$WORK/a.key}\"" b="\"\${file:$WORK/b.key}\""
    config "$store" "$a" > "$WORK/gw.toml"
    [ "$store" = postgres ] && "$BIN/hookgate" migrate --config "$WORK/gw.toml" >/dev/null 2>&1
    HOOKGATE_LOG=warn "$BIN/hookgate" run --config "$WORK/gw.toml" 2>"$WORK/gw.log" & gw=$!
    wait_port $GW
    wrk -t1 -c32 -d"${FILL}s" -s bench/wrk/unique.lua "http://127.0.0.1:$GW/hook" >/dev/null
    config "$store" "$b, $a" > "$WORK/gw.toml"
    kill -HUP $gw; sleep 1
    first=$(seconds "$BIN/hookgate" store reencrypt --config "$WORK/gw.toml" --rate 1000000/s)
    records=$(sed -n 's/^pass 1: read \([0-9]*\).*/\1/p' "$WORK/said")
    second=$(seconds "$BIN/hookgate" store reencrypt --config "$WORK/gw.toml" --rate 1000000/s)
    rate=$(awk -v n="$records" -v s="$first" 'BEGIN {printf "%.0f", n / s}')
    echo "| $store | $records | $first | $rate | $second | $(tail -1 "$WORK/said") |"
    kill $gw; wait $gw 2>/dev/null || true
    [ "$store" = redis ] && redis-cli -p $REDIS shutdown nosave >/dev/null 2>&1 || true
done
[ "${STORES/postgres/}" != "$STORES" ] && psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null || true

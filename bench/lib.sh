# Shared by the focused benchmarks (bench/ordering.sh, destinations.sh,
# encryption.sh, reencrypt.sh): sourced after `cd` to the repository. `bench_start NAME`
# checks the tools, builds the release binaries and makes $WORK (removed,
# with every process in $PIDS, on exit).

bench_start() { # name
    for tool in wrk redis-server curl; do
        command -v "$tool" >/dev/null 2>&1 || { echo "$tool is needed (bench/run.sh installs it)" >&2; exit 1; }
    done
    cargo build --release --quiet --bin hookgate --example bench-upstream
    BIN=${BIN:-target/release}
    WORK=$(mktemp -d "/tmp/hookgate-$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}

wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# An empty database NAME on the local PostgreSQL (trust auth), dropped
# first if a run before left it.
fresh_database() { # name
    psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
}

# A config's [store] backend lines: Redis on $REDIS, the embedded file
# $WORK/NAME.db, or the local PostgreSQL's database DB.
store_section() { # store name db
    case $1 in
        redis) printf 'backend = "redis"\nurl = "redis://127.0.0.1:%s"' "$REDIS" ;;
        embedded) printf 'backend = "embedded"\npath = "%s/%s.db"' "$WORK" "$2" ;;
        postgres) printf 'backend = "postgres"\nurl = "postgres://postgres@127.0.0.1:5432/%s"' "$3" ;;
        *) echo "the store is redis, embedded or postgres, not $1" >&2; exit 2 ;;
    esac
}

# The plain sync route of the focused benchmarks: `X-Id` is the key, no
# signature, answers kept an hour.
sync_route() { # upstream_port
    cat <<TOML
[[routes]]
name = "hook"
path = "/hook"
upstream = "http://127.0.0.1:$1/hook"
key = ["header:X-Id"]
retention = "1h"
[routes.verify]
scheme = "none"
TOML
}

#!/usr/bin/env bash
# Builds the earlier releases tests/it/upgrade.rs runs beside this one
# (docs/operations/upgrading.md, "Upgrading"):
# - target/previous/hookgate: the last release whose PostgreSQL schema was
#   version 1, serving while this version migrates a big table under it;
# - target/previous/hashed/hookgate: the last release whose Redis claims
#   were hashed by default — it reads packed claims, so a fleet rolls from
#   it to one whose claims are packed without either meeting a record it
#   cannot read;
# - target/previous/packed/hookgate: the last release whose Redis
#   completions were hashed by default — it reads packed completions, so a
#   fleet rolls from it to this one, whose completions are packed, alike.
# Skips a build when its binary is there already.
set -euo pipefail
cd "$(dirname "$0")/../.."

build() { # commit out
    local commit=$1 out=$2
    if [ -x "$out/hookgate" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$commit" ]; then
        return
    fi
    local src=target/previous/src
    rm -rf "$src"
    mkdir -p "$src" "$out"
    # A shallow clone may not hold it: fetch just that commit from where
    # the clone came from.
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        git fetch --quiet --depth=1 origin "$commit"
    fi
    git archive "$commit" | tar -x -C "$src"
    # One target directory for both: the dependencies they share build once.
    (cd "$src" && CARGO_TARGET_DIR="$PWD/../target" cargo build --locked --quiet --bin hookgate)
    cp target/previous/target/debug/hookgate "$out/hookgate"
    echo "$commit" > "$out/commit"
    rm -rf "$src"
}

build d0a1397887351a7602d959e8e731aacf121c48ab target/previous
build 4ae150cb4bbb9ae73f1ee6a4dc59217000d9c1bd target/previous/hashed
build fe3f5ff0f9973641ddb49641df7a3c18f7b7b48a target/previous/packed

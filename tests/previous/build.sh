#!/usr/bin/env bash
# Builds the previous release of hookgate — the last one whose PostgreSQL
# schema was version 1 — into target/previous/hookgate, for
# tests/it/upgrade.rs: it serves beside this version while this version
# migrates a big table under it (docs/operations.md, "Upgrading").
# Skips the build when the binary is there already.
set -euo pipefail
cd "$(dirname "$0")/../.."

PREVIOUS=d0a1397887351a7602d959e8e731aacf121c48ab
OUT=target/previous
if [ -x "$OUT/hookgate" ] && [ "$(cat "$OUT/commit" 2>/dev/null)" = "$PREVIOUS" ]; then
    exit 0
fi
rm -rf "$OUT/src"
mkdir -p "$OUT/src"
# A shallow clone may not hold it: fetch just that commit from where the
# clone came from.
if ! git cat-file -e "$PREVIOUS^{commit}" 2>/dev/null; then
    git fetch --quiet --depth=1 origin "$PREVIOUS"
fi
git archive "$PREVIOUS" | tar -x -C "$OUT/src"
(cd "$OUT/src" && CARGO_TARGET_DIR="$PWD/../target" cargo build --locked --quiet --bin hookgate)
cp "$OUT/target/debug/hookgate" "$OUT/hookgate"
echo "$PREVIOUS" > "$OUT/commit"
rm -rf "$OUT/src"

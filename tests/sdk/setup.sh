#!/usr/bin/env bash
# Installs the senders' SDKs for tests/it/sdk.rs: the PyPI ones into
# target/sdk-venv (a virtualenv of its own, so nothing on the machine
# changes), the npm one into tests/sdk/node_modules from the lock file.
# Idempotent: each part re-runs only when its requirements changed.
set -euo pipefail
cd "$(dirname "$0")"
venv=../../target/sdk-venv
if ! [ -x "$venv/bin/python" ] || ! cmp -s requirements.txt "$venv/.requirements"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
    cp requirements.txt "$venv/.requirements"
fi
if ! cmp -s package-lock.json node_modules/.hookgate-lock 2>/dev/null; then
    npm ci --silent --no-audit --no-fund
    cp package-lock.json node_modules/.hookgate-lock
fi

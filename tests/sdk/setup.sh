#!/usr/bin/env bash
# Installs the senders' SDKs for tests/it/sdk.rs into target/sdk-venv (a
# virtualenv of its own, so nothing on the machine changes). Idempotent:
# re-runs only when requirements.txt changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/sdk-venv
stamp="$venv/.requirements"
if [ -x "$venv/bin/python" ] && cmp -s tests/sdk/requirements.txt "$stamp"; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/sdk/requirements.txt
cp tests/sdk/requirements.txt "$stamp"

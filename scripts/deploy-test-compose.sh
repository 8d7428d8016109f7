#!/usr/bin/env bash
# Tests deploy/compose.yaml for real with podman-compose: brings up wushkv and Prometheus (Grafana's
# image cannot be fetched without a registry: its provisioning and dashboard are checked by
# parsing, and every panel's query is evaluated), loads wushkv with completions and streaming
# chats, then has scripts/deploy-check-grafana.py evaluate EVERY panel's PromQL from the
# dashboard JSON against that Prometheus (each must return data), and checks the series the
# Kubernetes HPA scales on (deploy/k8s/prometheus-adapter-rules.yaml) are there.
# Prometheus: upstream's image when it can be pulled, else one built from Debian's package
# (deploy/prometheus/Dockerfile.debian). Not in the default test run (minutes).
# usage: scripts/deploy-test-compose.sh [--no-build] [--load-seconds N]   (as root)
# env: WUSHKV_PORT (8080), PROMETHEUS_PORT (9090), WUSHKV_IMAGE. Results: docs/deploy.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy-lib.sh"

build=1
load_s=60
while (($#)); do
    case $1 in
    --no-build) build=0 ;;
    --load-seconds) load_s=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) dlog "unknown argument '$1' (see --help)"; exit 2 ;;
    esac
    shift
done
need_cmds podman podman-compose curl python3
python3 -c 'import yaml' 2>/dev/null || { dlog "python3 lacks PyYAML (scripts/install-deps.sh installs it)"; exit 1; }
export WUSHKV_PORT=${WUSHKV_PORT:-8080} PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090} WUSHKV_IMAGE=$IMAGE
WUSHKV=http://127.0.0.1:$WUSHKV_PORT
PROM=http://127.0.0.1:$PROMETHEUS_PORT
PROJECT=wushkv-test
t0=$SECONDS

# Static checks first: a broken dashboard or provisioning file fails in seconds, not minutes.
python3 "$DEPLOY_ROOT/scripts/deploy-check-grafana.py"
if command -v promtool >/dev/null; then promtool check config "$DEPLOY_ROOT/deploy/prometheus/prometheus.yml"; fi

# ---- images -----------------------------------------------------------------------------------
if ((build)); then build_image; fi
podman image exists "$IMAGE" || { dlog "no image $IMAGE (run without --no-build)"; exit 1; }
if [[ -z ${PROMETHEUS_IMAGE:-} ]]; then
    upstream=$(sed -n 's/.*PROMETHEUS_IMAGE:-\([^}]*\)}.*/\1/p' "$DEPLOY_ROOT/deploy/compose.yaml")
    if podman image exists "$upstream" || timeout 60 podman pull -q "$upstream" >/dev/null 2>&1; then
        PROMETHEUS_IMAGE=$upstream
    else
        PROMETHEUS_IMAGE=localhost/prometheus:debian
        dlog "no registry: $PROMETHEUS_IMAGE from Debian's prometheus package"
        ensure_base
        nice -n 10 podman build -q --format docker --pull=never -f "$DEPLOY_ROOT/deploy/prometheus/Dockerfile.debian" \
            -t "$PROMETHEUS_IMAGE" "$DEPLOY_ROOT/deploy/prometheus" >/dev/null
    fi
fi
export PROMETHEUS_IMAGE
dlog "images: $IMAGE, $PROMETHEUS_IMAGE ($((SECONDS - t0)) s)"

# ---- up ---------------------------------------------------------------------------------------
compose() { podman-compose -p "$PROJECT" -f "$DEPLOY_ROOT/deploy/compose.yaml" "$@"; }
# podman-compose 1.0.3's down leaves the project's network behind.
down() {
    compose down -v -t 40 >/dev/null 2>&1 || true
    podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
}
down
trap down EXIT
t1=$SECONDS
compose up -d --no-build wushkv prometheus >/tmp/deploy-compose-up.$$ 2>&1 ||
    { cat /tmp/deploy-compose-up.$$ >&2; exit 1; }
rm -f /tmp/deploy-compose-up.$$
if ! wait_http "$WUSHKV/health" 600; then
    podman logs "${PROJECT}_wushkv_1" 2>&1 | tail -n 30 >&2
    dlog "FAIL: wushkv /health not 200 within 600 s"
    exit 1
fi
wait_http "$PROM/-/ready" 120 || { dlog "FAIL: Prometheus not ready"; exit 1; }
dlog "up: wushkv ready and Prometheus ready $((SECONDS - t1)) s after compose up"

# Prometheus reaches wushkv by its compose service name (deploy/prometheus/prometheus.yml).
deadline=$((SECONDS + 60))
until curl -fsS "$PROM/api/v1/query" --data-urlencode 'query=up{job="wushkv"} == 1' | grep -q '"wushkv:8080"'; do
    ((SECONDS < deadline)) || { dlog "FAIL: Prometheus's target wushkv:8080 is not up"; curl -s "$PROM/api/v1/targets" >&2; exit 1; }
    sleep 2
done
dlog "Prometheus scrapes wushkv:8080 (up == 1)"

# ---- load: closed-loop clients, completions and streaming chats, more than --max-batch at once
start=$(date +%s)
sleep 6 # a scrape of the idle server before the load
dlog "load: 12 clients for $load_s s"
python3 - "$WUSHKV" "$load_s" <<'PY'
import json, sys, threading, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.time() + seconds
counts = {"ok": 0, "failed": 0, "tokens": 0}
lock = threading.Lock()
prompts = ["The capital of France is", "Once upon a time", "The three primary colours are",
           "A haiku about the sea:", "def fibonacci(n):", "The best way to learn a language is"]

def client(i):
    n = 0
    while time.time() < end:
        p = prompts[(i + n) % len(prompts)]
        n += 1
        if n % 2:
            body = {"prompt": p, "max_tokens": 16 + 8 * (i % 4), "temperature": 0.8}
            path = "/v1/completions"
        else:
            body = {"messages": [{"role": "user", "content": p}], "max_tokens": 24, "stream": True,
                    "stream_options": {"include_usage": True}}
            path = "/v1/chat/completions"
        req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                data = r.read().decode()
            if body.get("stream"):
                usage = [json.loads(l[6:])["usage"] for l in data.splitlines()
                         if l.startswith("data: {") and '"usage":{' in l]
                assert data.rstrip().endswith("data: [DONE]") and usage
                toks = usage[-1]["completion_tokens"]
            else:
                toks = json.loads(data)["usage"]["completion_tokens"]
            with lock:
                counts["ok"] += 1; counts["tokens"] += toks
        except Exception as e:
            with lock:
                counts["failed"] += 1
            print(f"request failed: {e}", file=sys.stderr)

threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
for t in threads: t.start()
for t in threads: t.join()
print(f"load: {counts['ok']} requests answered, {counts['failed']} failed, {counts['tokens']} tokens generated")
sys.exit(1 if counts["failed"] or not counts["ok"] else 0)
PY
sleep 12 # two more scrapes after the load

# ---- every panel's query, the template variable, and the HPA's series -------------------------
fails=0
python3 "$DEPLOY_ROOT/scripts/deploy-check-grafana.py" --prometheus "$PROM" --start "$start" --step 5 || fails=1
sq=$(python3 -c '
import sys, yaml
cm = yaml.safe_load(open(sys.argv[1]))
for r in yaml.safe_load(cm["data"]["config.yaml"])["rules"]:
    print(r["seriesQuery"].replace(",namespace!=\"\",pod!=\"\"", ""))
' "$DEPLOY_ROOT/deploy/k8s/prometheus-adapter-rules.yaml")
while read -r q; do
    n=$(curl -fsS "$PROM/api/v1/series" --data-urlencode "match[]=$q" --data-urlencode "start=$start" |
        python3 -c 'import json,sys; print(len({s["__name__"] for s in json.load(sys.stdin)["data"]}))')
    if ((n >= 2)); then echo "ok   HPA adapter seriesQuery $q: $n metrics in Prometheus"; else
        echo "FAIL HPA adapter seriesQuery $q: $n metrics in Prometheus"; fails=1; fi
done <<<"$sq"

# Stop: wushkv drains on SIGTERM and exits 0.
t2=$SECONDS
compose stop -t 40 >/dev/null 2>&1 || true
code=$(podman inspect -f '{{.State.ExitCode}}' "${PROJECT}_wushkv_1" 2>/dev/null || echo '?')
if [[ $code == 0 ]]; then echo "ok   wushkv stopped, exit 0 ($((SECONDS - t2)) s)"; else echo "FAIL wushkv exit code $code"; fails=1; fi
echo "deploy-test-compose: total $((SECONDS - t0)) s"
((fails == 0)) && echo "deploy-test-compose: all checks passed"
exit "$fails"

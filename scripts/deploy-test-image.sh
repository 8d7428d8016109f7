#!/usr/bin/env bash
# Tests the container image of deploy/Dockerfile for real with podman: builds it (making the
# debian:bookworm base with debootstrap when no registry answers), runs it, waits for /health,
# checks it runs as non-root and its HEALTHCHECK passes, sends a completion and a streaming chat
# with curl and checks the answers, then stops it (SIGTERM: drain, exit 0). Not in the default
# test run: the build compiles everything inside the container (~10 min on 2 cores).
# usage: scripts/deploy-test-image.sh [--no-build | --no-cache]   (as root; env: WUSHKV_IMAGE, PORT)
# --no-build: test the image as it is; --no-cache: rebuild every layer (a cold build's time).
# Results recorded in docs/deploy.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deploy-lib.sh"

build=1
cache=()
for arg in "$@"; do
    case $arg in
    --no-build) build=0 ;;
    --no-cache) cache=(--no-cache) ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) dlog "unknown argument '$arg' (see --help)"; exit 2 ;;
    esac
done
need_cmds podman curl python3
PORT=${PORT:-18080}
NAME=wushkv-test-$$
URL=http://127.0.0.1:$PORT
t0=$SECONDS

if ((build)); then
    dlog "building $IMAGE"
    build_image "${cache[@]}"
    dlog "image built in $((SECONDS - t0)) s"
fi
podman image exists "$IMAGE" || { dlog "no image $IMAGE (run without --no-build)"; exit 1; }
dlog "image $IMAGE: $(podman image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"

cleanup() { podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
t1=$SECONDS
# Without systemd podman cannot time the HEALTHCHECK (it would log errors): no timer, and the
# check is run below with `podman healthcheck run`.
podman run -d --name "$NAME" --health-interval disable -p "127.0.0.1:$PORT:8080" "$IMAGE" >/dev/null
if ! wait_http "$URL/health" 600; then
    podman logs "$NAME" 2>&1 | tail -n 30 >&2
    dlog "FAIL: /health not 200 within 600 s"
    exit 1
fi
dlog "ready (/health 200) $((SECONDS - t1)) s after podman run"
podman logs "$NAME" 2>&1 | grep -m1 'wushkv: ready' >&2 || true

fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

uid=$(podman exec "$NAME" id -u)
[[ $uid != 0 ]] && ok "runs as uid $uid ($(podman exec "$NAME" id -un))" || bad "runs as root"
if podman healthcheck run "$NAME" >/dev/null 2>&1; then ok "HEALTHCHECK passes"; else bad "HEALTHCHECK fails"; fi

# A completion: the text, its token counts and its KV bytes.
resp=$(curl -fsS "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}') || resp=
if out=$(python3 -c '
import json, sys
r = json.loads(sys.argv[1])
c = r["choices"][0]; u = r["usage"]
assert r["object"] == "text_completion", r["object"]
assert c["text"].strip(), "empty text"
assert 1 <= u["completion_tokens"] <= 8 and u["prompt_tokens"] > 0, u
assert u["kv_cache"]["bytes"] > 0, u
print("%r (%d+%d tokens, kv_cache %d bytes, %s)" % (c["text"], u["prompt_tokens"], u["completion_tokens"],
                                                   u["kv_cache"]["bytes"], c["finish_reason"]))
' "$resp" 2>&1); then ok "completion: $out"; else bad "completion: $out; response: ${resp:0:300}"; fi

# A streaming chat: content chunks, a usage chunk, then [DONE].
stream=$(curl -fsSN "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 16,
         "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}') || stream=
if out=$(python3 -c '
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.strip()]
assert lines and all(l.startswith("data: ") for l in lines), "not SSE data lines"
assert lines[-1] == "data: [DONE]", "no [DONE] at the end"
chunks = [json.loads(l[6:]) for l in lines[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
assert text.strip(), "no content"
usage = [c["usage"] for c in chunks if c.get("usage")]
assert usage and usage[-1]["completion_tokens"] >= 1, "no usage chunk"
print("%d chunks, %r, usage %d+%d tokens" % (len(chunks), text, usage[-1]["prompt_tokens"], usage[-1]["completion_tokens"]))
' "$stream" 2>&1); then ok "streaming chat: $out"; else bad "streaming chat: $out; stream: ${stream:0:300}"; fi

metrics=$(curl -fsS "$URL/metrics" || true)
n=$(grep -c '^wushkv:request_success_total' <<<"$metrics" || true)
done_=$(awk '/^wushkv:request_success_total/ {s += $2} END {print s + 0}' <<<"$metrics")
[[ $done_ -ge 2 ]] && ok "/metrics: request_success_total sums to $done_ ($n series)" || bad "/metrics: request_success_total $done_ < 2"

# SIGTERM drains and exits 0 (podman stop's grace period must exceed the drain).
t2=$SECONDS
podman stop -t 40 "$NAME" >/dev/null
code=$(podman inspect -f '{{.State.ExitCode}}' "$NAME")
[[ $code == 0 ]] && ok "podman stop: exit 0 after $((SECONDS - t2)) s" || bad "podman stop: exit code $code"
podman logs "$NAME" 2>&1 | tail -n 2 >&2

echo "deploy-test-image: total $((SECONDS - t0)) s"
echo "$((4 + 2 - fails)) passed, $fails failed"
((fails == 0))

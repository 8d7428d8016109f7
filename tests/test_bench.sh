#!/usr/bin/env bash
# `wushkv bench` engine mode on a tiny random-weight model (written here): the JSON report, the
# text table, and the --peer paths (a stand-in llama-bench that prints canned JSON, one that fails,
# and a missing one). Needs a Vulkan device (lavapipe will do); the model is small, so each run
# takes well under a second.
# Usage: test_bench.sh path/to/wushkv path/to/write_tiny_model
set -u
exe=${1:?usage: test_bench.sh path/to/wushkv path/to/write_tiny_model}
writer=${2:?usage: test_bench.sh path/to/wushkv path/to/write_tiny_model}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    printf 'FAIL: %s\n' "$1"
    [[ -n ${2:-} ]] && printf '  output: %s\n' "$2"
}

# check NAME OUT PY: runs the Python expression PY with `j` = the JSON object on OUT's last line.
check() {
    local name=$1 out=$2 expr=$3
    if python3 -c '
import json, sys
j = json.loads(sys.argv[1].strip().splitlines()[-1])
if not (eval(sys.argv[2])):
    sys.exit(1)
' "$out" "$expr" 2>/dev/null; then ok; else bad "$name: $expr" "$out"; fi
}

model=$tmp/tiny.gguf
# The default KV format's WUSH sidecar: calibrated once into this test's own cache (512 tokens of
# the built-in text: seconds on the tiny model), then reused.
export WUSHKV_CACHE_DIR=$tmp/cache WUSHKV_CALIB_TOKENS=512
"$writer" "$model" gemma3 || { echo "FAIL: cannot write the tiny model"; exit 1; }

# 1. JSON: positive speeds, the token counts the sequence evaluated, the model's KV figures.
out=$("$exe" bench -m "$model" -p 32 -n 8 -r 1 --kv f16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench --json exit status $rc" "$(cat "$tmp/err")"
check "json counts" "$out" 'j["n_prompt"] == 32 and j["n_gen"] == 8 and j["repetitions"] == 1'
check "json speeds" "$out" 'j["prefill_tokens_per_s"] > 0 and j["decode_tokens_per_s"] > 0'
check "json runs" "$out" 'len(j["prefill_runs_tokens_per_s"]) == 1 and len(j["decode_runs_tokens_per_s"]) == 1'
check "json kv" "$out" 'j["kv"] == "f16" and j["bits_per_element"] == 16 and j["kv_bytes_per_token"] > 0'
check "json device" "$out" 'j["device"] != "" and j["model"] == "tiny-gemma3" and "peer" not in j'

# 2. The default KV format (int2 + WUSH from the cache, f16 windows), several runs, prefill split
# into batches: counts and per-run speeds; then plain int2 (no transform, no windows).
out=$("$exe" bench -m "$model" -p 40 -n 4 -r 2 --batch-tokens 16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench (default KV) exit status $rc" "$(cat "$tmp/err")"
check "default kv" "$out" 'j["kv"] == "int2 quest G32 wush sink4 recent64" and j["bits_per_element"] > 2.5'
grep -q 'no WUSH-KV sidecar for this model' "$tmp/err" && ok || bad "bench calibrates the default's sidecar" "$(cat "$tmp/err")"
out=$("$exe" bench -m "$model" -p 40 -n 4 -r 2 --batch-tokens 16 --kv int2 --kv-transform none --kv-sink 0 --kv-recent 0 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench --kv int2 exit status $rc" "$(cat "$tmp/err")"
check "int2 counts" "$out" 'j["n_prompt"] == 40 and j["n_gen"] == 4 and j["batch_tokens"] == 16'
check "int2 kv" "$out" 'j["kv"] == "int2 quest G32" and j["bits_per_element"] < 4'
check "int2 runs" "$out" 'len(j["decode_runs_tokens_per_s"]) == 2 and min(j["decode_runs_tokens_per_s"]) > 0'
[[ $(grep -c '^run [12]/2: prefill 40 tokens' "$tmp/err") -eq 2 ]] && ok || bad "progress lines" "$(cat "$tmp/err")"

# 3. Text: the device, and one row per test.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 2>/dev/null)
grep -q '^device: llvmpipe\|^device: ' <<<"$out" && grep -qE '^\| pp16 +\| +[0-9.]+ \+/- ' <<<"$out" &&
    grep -qE '^\| tg4 +\| +[0-9.]+ \+/- ' <<<"$out" && ok || bad "text table" "$out"

# 4. A stand-in peer: prints llama-bench's JSON; the ratio is ours over its avg_ts.
cat >"$tmp/fake-bench" <<'EOF'
#!/usr/bin/env bash
echo "$@" >"$(dirname "$0")/args"
echo "loading model (stderr noise)" >&2
cat <<'JSON'
[
  {"model_filename": "x", "n_prompt": 16, "n_gen": 0, "avg_ts": 100.0, "stddev_ts": 1.5},
  {"model_filename": "x", "n_prompt": 0, "n_gen": 4, "avg_ts": 10.0, "stddev_ts": 0.5}
]
JSON
EOF
chmod +x "$tmp/fake-bench"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --json --peer "$tmp/fake-bench" 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "fake peer exit status $rc" "$(cat "$tmp/err")"
check "peer values" "$out" 'j["peer"]["prefill_tokens_per_s"] == 100 and j["peer"]["decode_tokens_per_s_stddev"] == 0.5'
check "peer ratios" "$out" 'abs(j["ratio_prefill"] - j["prefill_tokens_per_s"] / 100) < 0.002 and abs(j["ratio_decode"] - j["decode_tokens_per_s"] / 10) < 0.002'
grep -qE -- "^-m $model -p 16 -n 4 -r 1 -o json -t [1-9][0-9]*$" "$tmp/args" && ok ||
    bad "peer arguments" "$(cat "$tmp/args")"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --peer "$tmp/fake-bench" 2>/dev/null)
grep -qE '^\| pp16 +\|.*\| +100\.00 \+/- 1\.50 +\| +[0-9.]+ \|$' <<<"$out" && ok || bad "peer text row" "$out"

# 5. A peer that fails: its last stderr line in the message, exit 1, our numbers still printed.
printf '#!/bin/sh\necho "error: model is broken" >&2\nexit 3\n' >"$tmp/failing-bench"
chmod +x "$tmp/failing-bench"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --json --peer "$tmp/failing-bench" 2>"$tmp/err")
rc=$?
[[ $rc -eq 1 ]] && grep -q 'exited with status 3: error: model is broken' "$tmp/err" && ok ||
    bad "failing peer: rc=$rc" "$(cat "$tmp/err")"
check "failing peer json" "$out" 'j["prefill_tokens_per_s"] > 0 and "status 3" in j["peer"]["error"] and j["ratio_prefill"] is None'

# 6. A missing peer: a clear message, exit 1, our numbers still printed.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --peer /nonexistent/llama-bench 2>"$tmp/err")
rc=$?
[[ $rc -eq 1 ]] && grep -q 'cannot run the peer /nonexistent/llama-bench: No such file' "$tmp/err" && ok ||
    bad "missing peer: rc=$rc" "$(cat "$tmp/err")"
grep -qE '^\| pp16 +\| +[0-9.]+ \+/- .*\| failed' <<<"$out" && ok || bad "missing peer table" "$out"

# 7. A model that does not exist: exit 1 with the path named.
"$exe" bench -m "$tmp/none.gguf" -p 8 -n 2 -r 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "cannot open $tmp/none.gguf" "$tmp/err" && ok || bad "missing model: rc=$rc" "$(cat "$tmp/err")"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]

#!/usr/bin/env bash
# `wushkv bench` engine mode on a tiny random-weight model (written here): the JSON report, the
# text table, and the --peer paths (a stand-in llama-bench that prints canned JSON, one that fails,
# and a missing one), depths (-d) with the KV bytes read per decode step and the profile's bandwidth,
# and --vs-kv (a second format run for run beside ours, with the ratios).
# Needs a Vulkan device (lavapipe will do); the model is small, so each run
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

# 2. The default KV format (int2 + WUSH from the cache, its group 128 halved to the tiny model's
# head_dim of 64, sliding layers int4, f16 windows), several runs, prefill split
# into batches: counts and per-run speeds; then plain int2 (no transform, no windows).
out=$("$exe" bench -m "$model" -p 40 -n 4 -r 2 --batch-tokens 16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench (default KV) exit status $rc" "$(cat "$tmp/err")"
check "default kv" "$out" 'j["kv"] == "int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@5 swa:sink0:recent32" and j["bits_per_element"] > 2.25'
grep -q 'no WUSH-KV sidecar for this model' "$tmp/err" && ok || bad "bench calibrates the default's sidecar" "$(cat "$tmp/err")"
out=$("$exe" bench -m "$model" -p 40 -n 4 -r 2 --batch-tokens 16 --kv int2 --kv-transform none --kv-sink 0 --kv-recent 0 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench --kv int2 exit status $rc" "$(cat "$tmp/err")"
check "int2 counts" "$out" 'j["n_prompt"] == 40 and j["n_gen"] == 4 and j["batch_tokens"] == 16'
check "int2 kv" "$out" 'j["kv"] == "int2 quest G32" and j["bits_per_element"] < 4'
check "int2 runs" "$out" 'len(j["decode_runs_tokens_per_s"]) == 2 and min(j["decode_runs_tokens_per_s"]) > 0'
[[ $(grep -c '^pp40 run [12]/2: prefill 40 tokens' "$tmp/err") -eq 2 ]] && ok || bad "progress lines" "$(cat "$tmp/err")"

# 2b. Depths (-d, llama-bench's): one row per test and depth, in llama-bench's order and names; the
# sequence held exactly the depth before each test (depth_tokens) and the test's tokens on top;
# the KV bytes a decode step reads grow with the depth. Default format (int2 + WUSH + windows).
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 2 -d 0,24 --batch-tokens 16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench -d exit status $rc" "$(cat "$tmp/err")"
check "depths" "$out" 'j["depths"] == [0, 24] and [t["test"] for t in j["tests"]] == ["pp16", "tg4", "pp16 @ d24", "tg4 @ d24"]'
check "depth filled" "$out" 'all(t["depth_tokens"] == t["n_depth"] and t["tokens"] == t["n_prompt"] + t["n_gen"] for t in j["tests"])'
check "depth rows" "$out" '[(t["n_prompt"], t["n_gen"], t["n_depth"]) for t in j["tests"]] == [(16, 0, 0), (0, 4, 0), (16, 0, 24), (0, 4, 24)]'
check "depth speeds" "$out" 'all(t["tokens_per_s"] > 0 and len(t["runs_tokens_per_s"]) == 2 for t in j["tests"])'
# (At depth 0 nothing is cached: with windows the step's own key and value come from its activations.)
check "kv read bytes" "$out" '"kv_read_bytes_per_token" not in j["tests"][0] and j["tests"][1]["kv_read_bytes_per_token"] == 0 < j["tests"][3]["kv_read_bytes_per_token"]'
check "flat keys = first depth" "$out" 'j["prefill_tokens_per_s"] == j["tests"][0]["tokens_per_s"] and j["decode_tokens_per_s"] == j["tests"][1]["tokens_per_s"]'
check "device fields" "$out" 'j["device_type"] in ("CPU", "discrete GPU", "integrated GPU", "virtual GPU", "other") and j["subgroup_size"] >= 4 and j["shared_memory_bytes"] > 0'
[[ $(grep -c '^tg4 @ d24 run [12]/2: depth 24 tokens in' "$tmp/err") -eq 2 ]] && ok || bad "depth progress lines" "$(cat "$tmp/err")"
# The kernel set: "cpu" on a CPU device unless forced; WUSHKV_KERNELS=gpu forces the GPU variants.
check "kernel set by device type" "$out" 'j["kernels"] in ("cpu", "gpu") and (j["device_type"] != "CPU" or j["kernels"] == "cpu")'
out=$(WUSHKV_KERNELS=gpu "$exe" bench -m "$model" -p 8 -n 2 -r 1 --kv f16 --json 2>"$tmp/err")
check "WUSHKV_KERNELS=gpu" "$out" 'j["kernels"] == "gpu" and j["prefill_tokens_per_s"] > 0'
WUSHKV_KERNELS=fast "$exe" bench -m "$model" -p 8 -n 2 -r 1 --json >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -ne 0 ]] && grep -q "WUSHKV_KERNELS='fast': expected cpu, gpu or auto" "$tmp/err" && ok || bad "WUSHKV_KERNELS=fast refused (rc $rc)" "$(cat "$tmp/err")"
check "WUSHKV_KERNELS=gpu variants" "$out" 'j["kernel_variants"].startswith("matmul=tiled,") and "attention=lanes,splits=gpu" in j["kernel_variants"]'
# Single variants on top of a set (or of auto), read back in the same syntax; a bad one refused.
out=$(WUSHKV_KERNELS=cpu,attention=lanes,splits=gpu "$exe" bench -m "$model" -p 8 -n 2 -r 1 --kv f16 --json 2>"$tmp/err")
check "WUSHKV_KERNELS=cpu,attention=lanes" "$out" 'j["kernels"] == "cpu" and j["kernel_variants"].startswith("matmul=register,") and j["kernel_variants"].endswith(",matvec=1,attention=lanes,splits=gpu,transform_rope=on,store=invocation,head=" + ("host" if j["device_type"] == "CPU" else "device") + ",linear=" + ("host" if j["device_type"] == "CPU" else "device") + ",kv_write=" + ("host" if j["device_type"] == "CPU" else "device") + ",paged_attention=" + ("host" if j["device_type"] == "CPU" else "device")) and j["decode_tokens_per_s"] > 0'
out=$(WUSHKV_KERNELS=matvec=2 "$exe" bench -m "$model" -p 8 -n 2 -r 1 --kv f16 --json 2>"$tmp/err")
check "WUSHKV_KERNELS=matvec=2 (auto set)" "$out" '",matvec=2," in j["kernel_variants"] and j["decode_tokens_per_s"] > 0'
WUSHKV_KERNELS=gpu,attention=fast "$exe" bench -m "$model" -p 8 -n 2 -r 1 --json >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -ne 0 ]] && grep -q "kernel variant attention=fast: expected subgroup or lanes" "$tmp/err" && ok || bad "WUSHKV_KERNELS=gpu,attention=fast refused (rc $rc)" "$(cat "$tmp/err")"
# f16 at depth 24 on the tiny model (its own figures from the layout: every key and value f16).
out=$("$exe" bench -m "$model" -p 0 -n 2 -r 1 -d 8-32*2 --kv f16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "bench -d range exit status $rc" "$(cat "$tmp/err")"
check "depth range" "$out" 'j["depths"] == [8, 16, 32] and [t["test"] for t in j["tests"]] == ["tg2 @ d8", "tg2 @ d16", "tg2 @ d32"] and j["n_prompt"] == 0'
check "f16 depth filled" "$out" '[t["depth_tokens"] for t in j["tests"]] == [8, 16, 32] and j["ctx"] == 34'
# f16: every visible key and value is one f16 row per layer. The tiny Gemma slides over 16 tokens
# in some layers: at depth 8 every layer sees 9 keys, at 16 a full layer 17 and a sliding one 16,
# at 32 33 and 16. So with F = a full layer's bytes per key and A = all layers': b8 = 9A,
# b32 - b16 = 16F, b16 = 17F + 16(A - F), and 0 < F < A.
check "f16 read bytes by layer class" "$out" '(lambda b: b[0] % 9 == 0 and (b[2] - b[1]) % 16 == 0 and (lambda F, A: 0 < F < A and b[1] == 17 * F + 16 * (A - F))((b[2] - b[1]) // 16, b[0] // 9))([t["kv_read_bytes_per_token"] for t in j["tests"]])'
# The profile (WUSHKV_PROFILE=1): the attention's GPU time and bytes/s per tg row.
out=$(WUSHKV_PROFILE=1 "$exe" bench -m "$model" -p 0 -n 2 -r 1 -d 16 --kv f16 --json 2>"$tmp/err")
# pp rows report the attention's time too (no bandwidth: their reads are not modelled).
ppout=$(WUSHKV_PROFILE=1 "$exe" bench -m "$model" -p 8 -n 0 -r 1 -d 16 --kv f16 --json 2>/dev/null)
if python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1].strip().splitlines()[-1])["profile"] else 1)' "$out" 2>/dev/null; then
    check "profile bandwidth" "$out" 'j["tests"][0]["attention_ms_per_token"] > 0 and j["tests"][0]["attention_bytes_per_s"] > 0'
    check "profile prefill attention" "$ppout" 'j["tests"][0]["attention_ms_per_token"] > 0 and "attention_bytes_per_s" not in j["tests"][0]'
    # The attention: the decode pipelines', or the host's on a CPU device (paged_attention=host).
    grep -qE 'attention_(decode|host) ' "$tmp/err" && ok || bad "profile printed" "$(cat "$tmp/err")"
    # Each row's own profile: per token, its pipelines largest first, the decode attention among them.
    grep -qE '^tg2 @ d16 where GPU time goes, per token: [0-9.]+ ms in all' "$tmp/err" &&
        grep -qE '^  attention_(decode|host) +[0-9.]+ ms +[0-9.]+% +[0-9.]+ dispatches' "$tmp/err" && ok ||
        bad "row profile printed" "$(cat "$tmp/err")"
    # On a CPU device the host's own limits come with it (C microbenchmarks in the same run).
    check "host limits on a CPU" "$out" '(j["device_type"] != "CPU" and "host" not in j) or (j["host"]["threads"] >= 1 and j["host"]["memory_read_bytes_per_s"] > 1e8 and j["host"]["f32_fma_flops_per_s"] > 1e8)'
else
    check "no profile: null bandwidth" "$out" 'j["tests"][0]["attention_bytes_per_s"] is None'
fi
out=$("$exe" bench -m "$model" -p 0 -n 2 -r 1 --kv f16 --json 2>/dev/null)
check "no profile asked" "$out" 'j["profile"] is False and j["tests"][0]["attention_bytes_per_s"] is None and "host" not in j'

# 3. Text: the device, and one row per test.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 2>/dev/null)
grep -q '^device: llvmpipe\|^device: ' <<<"$out" && grep -qE '^\| pp16 +\| +[0-9.]+ \+/- ' <<<"$out" &&
    grep -qE '^\| tg4 +\| +[0-9.]+ \+/- ' <<<"$out" && ok || bad "text table" "$out"

# 4. A stand-in peer: prints llama-bench's JSON (tests at depths 0 and 24; a tg test at depth 0 that
# no row asked for); the ratio is ours over its avg_ts, row by row.
cat >"$tmp/fake-bench" <<'EOF'
#!/usr/bin/env bash
echo "$@" >"$(dirname "$0")/args"
echo "loading model (stderr noise)" >&2
cat <<'JSON'
[
  {"model_filename": "x", "n_prompt": 16, "n_gen": 0, "n_depth": 0, "avg_ts": 100.0, "stddev_ts": 1.5},
  {"model_filename": "x", "n_prompt": 0, "n_gen": 4, "n_depth": 0, "avg_ts": 10.0, "stddev_ts": 0.5},
  {"model_filename": "x", "n_prompt": 0, "n_gen": 8, "n_depth": 0, "avg_ts": 7.0, "stddev_ts": 0.5},
  {"model_filename": "x", "n_prompt": 16, "n_gen": 0, "n_depth": 24, "avg_ts": 80.0, "stddev_ts": 1.0},
  {"model_filename": "x", "n_prompt": 0, "n_gen": 4, "n_depth": 24, "avg_ts": 5.0, "stddev_ts": 0.25}
]
JSON
EOF
chmod +x "$tmp/fake-bench"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --json --peer "$tmp/fake-bench" 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "fake peer exit status $rc" "$(cat "$tmp/err")"
check "peer values" "$out" 'j["peer"]["prefill_tokens_per_s"] == 100 and j["peer"]["decode_tokens_per_s_stddev"] == 0.5'
check "peer ratios" "$out" 'abs(j["ratio_prefill"] - j["prefill_tokens_per_s"] / 100) < 0.002 and abs(j["ratio_decode"] - j["decode_tokens_per_s"] / 10) < 0.002'
grep -qE -- "^-m $model -p 16 -n 4 -d 0 -r 1 -o json -t [1-9][0-9]* -ctk f16 -ctv f16$" "$tmp/args" && ok ||
    bad "peer arguments" "$(cat "$tmp/args")"
check "peer kv (default int2)" "$out" 'j["peer"]["kv"] == "f16" and "no 2- or 3-bit" in j["peer"]["kv_why"]'
# Depths: the same -d to the peer, each row against the peer's test of its depth.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 -d 0,24 --json --peer "$tmp/fake-bench" 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "fake peer -d exit status $rc" "$(cat "$tmp/err")"
grep -qE -- " -p 16 -n 4 -d 0,24 -r 1 " "$tmp/args" && ok || bad "peer -d" "$(cat "$tmp/args")"
check "peer rows" "$out" '[t["peer_tokens_per_s"] for t in j["tests"]] == [100, 10, 80, 5] and j["tests"][3]["peer_tokens_per_s_stddev"] == 0.25'
check "peer row ratios" "$out" 'all(abs(t["ratio"] - t["tokens_per_s"] / t["peer_tokens_per_s"]) < 0.002 for t in j["tests"])'
# int4 compares with llama.cpp's q4_0 (with flash attention, which its quantized V cache needs);
# --peer-kv picks another.
"$exe" bench -m "$model" -p 16 -n 4 -r 1 --kv int4 --kv-transform none --json --peer "$tmp/fake-bench" >/dev/null 2>&1
grep -qE -- " -ctk q4_0 -ctv q4_0 -fa 1$" "$tmp/args" && ok || bad "peer q4_0 for int4" "$(cat "$tmp/args")"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --kv f16 --peer "$tmp/fake-bench" --peer-kv q8_0 2>/dev/null)
grep -qE -- " -ctk q8_0 -ctv q8_0 -fa 1$" "$tmp/args" && grep -q '^peer: .*, KV cache q8_0 (--peer-kv)$' <<<"$out" && ok ||
    bad "--peer-kv q8_0" "$(cat "$tmp/args") $out"
# A peer without the depth asked for: its missing test is named, exit 1.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 -d 48 --kv f16 --json --peer "$tmp/fake-bench" 2>"$tmp/err")
rc=$?
[[ $rc -eq 1 ]] && grep -q 'its JSON has no pp16 @ d48 result' "$tmp/err" && ok || bad "peer missing depth: rc=$rc" "$(cat "$tmp/err")"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 1 --peer "$tmp/fake-bench" 2>/dev/null)
grep -qE '^\| pp16 +\|.*\| +- \| +100\.00 \+/- 1\.50 +\| +[0-9.]+ \|$' <<<"$out" && ok || bad "peer text row" "$out"

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
grep -qE '^\| tg4 +\| +[0-9.]+ \+/- [0-9.]+ +\| +[0-9.]+ (B|KiB|MiB) \|' <<<"$out" && ok || bad "KV read column" "$out"

# 8. --vs-kv: a second engine (f16 here) runs every test run for run beside ours, alternating who goes
# first; each row's ratio is ours / its tok/s of the same run, their mean the row's.
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 3 -d 0,24 --batch-tokens 16 --vs-kv f16 --json 2>"$tmp/err")
rc=$?
[[ $rc -eq 0 ]] && ok || bad "--vs-kv exit status $rc" "$(cat "$tmp/err")"
check "vs kv" "$out" 'j["vs"]["kv"] == "f16" and j["vs"]["bits_per_element"] >= 16 and j["kv"].startswith("int2")'
check "vs rows" "$out" 'len(j["tests"]) == 4 and all(t["vs_tokens_per_s"] > 0 and len(t["vs_runs_tokens_per_s"]) == 3 for t in j["tests"])'
check "vs ratio runs" "$out" 'all(abs(r - a / b) < 2e-3 * max(1, r) for t in j["tests"] for r, a, b in zip(t["vs_ratio_runs"], t["runs_tokens_per_s"], t["vs_runs_tokens_per_s"]))'
check "vs ratio mean" "$out" 'all(abs(t["vs_ratio"] - sum(t["vs_ratio_runs"]) / 3) < 2e-3 for t in j["tests"])'
check "vs kv read" "$out" '[t["vs_kv_read_bytes_per_token"] for t in j["tests"] if t["n_gen"]][1] > [t["vs_kv_read_bytes_per_token"] for t in j["tests"] if t["n_gen"]][0]'
# The order of the runs on stderr: ours first in run 1, the other first in run 2, ours again in 3.
order=$(grep -oE '^tg4 @ d24( \[f16\])? run [0-9]' "$tmp/err" | tr '\n' ';')
[[ $order == "tg4 @ d24 run 1;tg4 @ d24 [f16] run 1;tg4 @ d24 [f16] run 2;tg4 @ d24 run 2;tg4 @ d24 run 3;tg4 @ d24 [f16] run 3;" ]] &&
    ok || bad "--vs-kv run order" "$order"
# The second half of the runs reopens both engines the other way round (the first opened runs slower).
"$exe" bench -m "$model" -p 16 -n 4 -r 2 --vs-kv f16 -v >/dev/null 2>"$tmp/err"
opens=$(grep -oE 'opened an engine with KV (f16|int2)' "$tmp/err" | awk '{print $NF}' | tr '\n' ' ')
[[ $opens == "int2 f16 f16 int2 " ]] && grep -q 'from run 2 on, both opened again, the other first' "$tmp/err" &&
    ok || bad "--vs-kv open order" "$opens $(grep vs "$tmp/err")"
out=$("$exe" bench -m "$model" -p 16 -n 4 -r 2 --vs-kv f16 2>/dev/null)
grep -qE '^vs:     f16, [0-9.]+ bits/element' <<<"$out" && grep -qE '^\| tg4 +\|.*\| +[0-9.]+ \+/- [0-9.]+ +\| +[0-9.]+ \+/- [0-9.]+ +\|$' <<<"$out" &&
    ok || bad "--vs-kv text" "$out"
"$exe" bench -m "$model" -p 16 -n 4 -r 1 --vs-kv int5 >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--vs-kv" "$tmp/err" && ok || bad "--vs-kv int5: rc=$rc" "$(cat "$tmp/err")"
# --vs-kernels: the same KV format with another kernel spec beside ours; the environment's
# WUSHKV_KERNELS reaches ours only.
out=$(WUSHKV_KERNELS=cpu,matvec=2 "$exe" bench -m "$model" -p 8 -n 2 -r 2 --kv f16 --vs-kernels gpu,head=device --json 2>"$tmp/err")
check "--vs-kernels" "$out" 'j["vs"]["kv"] == j["kv"] == "f16" and j["vs"]["kernels_chosen"].startswith("gpu: matmul=tiled,") and j["vs"]["kernels_chosen"].endswith(",head=device,linear=device,kv_write=device,paged_attention=device") and j["kernels_chosen"].startswith("cpu: matmul=register,matmul_shuffle=on,matvec=2,") and all(t["vs_tokens_per_s"] > 0 for t in j["tests"])'
out=$("$exe" bench -m "$model" -p 8 -n 2 -r 2 --vs-kv f16 --vs-kernels matvec=2 --json 2>"$tmp/err")
check "--vs-kernels with --vs-kv" "$out" 'j["vs"]["kv"] == "f16" and j["kv"].startswith("int2") and ",matvec=2," in j["vs"]["kernels_chosen"] and ",matvec=1," in j["kernels_chosen"]'
"$exe" bench -m "$model" -p 8 -n 2 -r 1 --vs-kernels fast >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--vs-kernels 'fast': expected cpu, gpu or auto" "$tmp/err" && ok || bad "--vs-kernels fast: rc=$rc" "$(cat "$tmp/err")"
"$exe" bench -m "$model" -p 8 -n 2 -r 1 --vs-kernels cpu,head=fast >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -ne 0 ]] && grep -q "kernel variant head=fast: expected device or host" "$tmp/err" && ok || bad "--vs-kernels cpu,head=fast: rc=$rc" "$(cat "$tmp/err")"
"$exe" bench --url http://127.0.0.1:1 --vs-kv f16 >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--vs-kv is an engine-mode flag" "$tmp/err" && ok || bad "--vs-kv with --url: rc=$rc" "$(cat "$tmp/err")"

# 7. A model that does not exist: exit 1 with the path named.
"$exe" bench -m "$tmp/none.gguf" -p 8 -n 2 -r 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "cannot open $tmp/none.gguf" "$tmp/err" && ok || bad "missing model: rc=$rc" "$(cat "$tmp/err")"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]

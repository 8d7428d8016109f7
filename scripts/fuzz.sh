#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets (build-fuzz/: CC=clang, -Dfuzz=true, ASan + UBSan), replays
# every kept crash input (tests/fuzz/regressions/<target>/), then runs each target for SECONDS
# (default 60) on a copy of its seed corpus (tests/fuzz/corpus/<target>/). Prints one line per
# target: "fuzz <target>: N executions, C crashes"; exits non-zero on any crash, failed replay or
# failed build. Crash inputs found land in build-fuzz/fuzz-artifacts/<target>/.
#   FUZZ_TARGETS="gguf http"  only these targets (default: all)
#   FUZZ_JOBS=2               targets run at once (default: 1)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
    echo "usage: scripts/fuzz.sh [SECONDS]   (seconds per target, default 60)" >&2
    exit 2
fi
all_targets=(gguf sidecar tokenizer http openai_request chat_template grammar tool_reply)
read -r -a targets <<<"${FUZZ_TARGETS:-${all_targets[*]}}"
jobs=${FUZZ_JOBS:-1}
build=build-fuzz

command -v clang >/dev/null || { echo "fuzz.sh: clang not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
if [[ ! -f $build/build.ninja ]]; then
    CC=clang meson setup "$build" --buildtype=debugoptimized -Dfuzz=true >/dev/null || {
        echo "fuzz.sh: meson setup $build failed" >&2
        exit 1
    }
fi
ninja_targets=()
for t in "${targets[@]}"; do ninja_targets+=("tests/fuzz/fuzz_$t"); done
ninja -C "$build" "${ninja_targets[@]}" >/dev/null || { echo "fuzz.sh: build failed" >&2; exit 1; }

# UB is already fatal (-fno-sanitize-recover); leaks count as crashes.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

out=$build/fuzz-results
rm -rf "$out"
mkdir -p "$out"

# run_target T: replay its regressions, fuzz it, write "T EXECS CRASHES" to $out/T.result.
run_target() {
    local t=$1 bin=$build/tests/fuzz/fuzz_$t
    local art=$build/fuzz-artifacts/$t work=$out/$t.corpus log=$out/$t.log
    local crashes=0 execs=0 rc
    rm -rf "$art"
    mkdir -p "$art" "$work"
    # 1. the kept crash inputs: each must now pass (libFuzzer runs each file once)
    local reg=tests/fuzz/regressions/$t
    if [[ -d $reg ]] && [[ -n $(ls -A "$reg") ]]; then
        if ! "$bin" -runs=1 "$reg"/* >"$out/$t.replay.log" 2>&1; then
            echo "fuzz $t: a regression input fails again (see $out/$t.replay.log)" >&2
            crashes=$((crashes + 1))
        fi
    fi
    # 2. fuzz on a copy of the seeds (the seeds in git stay as they are)
    cp tests/fuzz/corpus/"$t"/* "$work"/
    "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" "$work" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    [[ -z $execs ]] && execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    local found
    found=$(find "$art" -type f | wc -l)
    if ((rc != 0 || found > 0)); then
        crashes=$((crashes + (found > 0 ? found : 1)))
        echo "fuzz $t: crash (exit $rc); input(s) in $art, log $log" >&2
        grep -m 5 -E 'ERROR|invariant|SUMMARY' "$log" >&2
    fi
    echo "$t ${execs:-0} $crashes" >"$out/$t.result"
}

running=0
for t in "${targets[@]}"; do
    run_target "$t" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n
        running=$((running - 1))
    fi
done
wait

status=0
for t in "${targets[@]}"; do
    if [[ -s $out/$t.result ]]; then
        read -r _ execs crashes <"$out/$t.result"
    else
        execs=0 crashes=1
    fi
    echo "fuzz $t: $execs executions, $crashes crashes"
    ((crashes == 0)) || status=1
done
exit $status

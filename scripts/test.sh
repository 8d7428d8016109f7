#!/usr/bin/env bash
# THE test command: installs what is missing, builds release and ASan+UBSan, runs every meson
# suite (release), the unit suite again under ASan+UBSan, the fuzz targets for a short bound
# (scripts/fuzz.sh, FUZZ_SECONDS per target, default 30; 0 skips), and the Python tests when
# there are any; ends with one line "N passed, N failed[, N skipped]" and a non-zero exit on any failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

passed=0
failed=0
skipped=0

finish() {
    local line="$passed passed, $failed failed"
    ((skipped)) && line+=", $skipped skipped"
    echo "$line"
    ((failed == 0))
    exit
}

# A step that fails before any test runs still counts, so the summary never reads "0 failed".
die_step() {
    echo "test.sh: $1 failed" >&2
    failed=$((failed + 1))
    finish
}

# count_meson DIR RC: adds meson's per-test results from DIR/meson-logs/testlog.json.
count_meson() {
    local log=$1/meson-logs/testlog.json rc=$2 counts p f s
    if [[ ! -s $log ]]; then
        echo "test.sh: no test log in $1 (meson test exited $rc)" >&2
        failed=$((failed + 1))
        return
    fi
    counts=$(python3 - "$log" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"):
        p += 1
    elif r == "SKIP":
        s += 1
    else:  # FAIL, UNEXPECTEDPASS, TIMEOUT, ERROR, INTERRUPT
        f += 1
print(p, f, s)
PY
    ) || counts="0 1 0"
    read -r p f s <<<"$counts"
    # meson failing with every test green means it broke itself (build step, bad option).
    if ((rc != 0 && f == 0)); then
        echo "test.sh: meson test in $1 exited $rc" >&2
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
}

model=$(bash scripts/install-deps.sh) || die_step "scripts/install-deps.sh"
model=$(tail -n 1 <<<"$model")
bash scripts/build.sh --asan || die_step "scripts/build.sh --asan"

# Tests that need the real model read it from here, and skip without it.
export WUSHKV_MODEL=$model
# One WUSH sidecar cache for the whole run (meson suites and pytest): a server or command in the
# default format calibrates the real model once per run at most (kept in build/ between runs).
export WUSHKV_CACHE_DIR=${WUSHKV_CACHE_DIR:-$PWD/build/wush-cache}

echo "== meson test -C build (all suites)" >&2
rm -f build/meson-logs/testlog.json
meson test -C build --print-errorlogs
count_meson build $?

echo "== meson test -C build-asan --suite unit (ASan + UBSan)" >&2
rm -f build-asan/meson-logs/testlog.json
# UBSan only reports and goes on unless told to halt; meson 1.0 sets neither option itself.
ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:print_summary=1 \
    UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1 \
    meson test -C build-asan --suite unit --print-errorlogs --timeout-multiplier 3
count_meson build-asan $?

# Fuzzing: each target's kept crash inputs replayed, then FUZZ_SECONDS of fuzzing per target, two
# targets at a time (about 3 x FUZZ_SECONDS plus the clang build); each target counts as one test.
fuzz_seconds=${FUZZ_SECONDS:-30}
if [[ $fuzz_seconds =~ ^[0-9]+$ ]] && ((fuzz_seconds > 0)); then
    echo "== scripts/fuzz.sh $fuzz_seconds (seconds per target)" >&2
    mkdir -p build
    fuzz_log=build/fuzz-summary.txt
    FUZZ_JOBS=${FUZZ_JOBS:-2} bash scripts/fuzz.sh "$fuzz_seconds" | tee "$fuzz_log"
    fuzz_rc=${PIPESTATUS[0]}
    fp=0 ff=0
    while read -r _ target execs _ crashes _; do
        if [[ $crashes == 0 ]]; then fp=$((fp + 1)); else ff=$((ff + 1)); fi
    done < <(grep -E '^fuzz [a-z_]+: [0-9]+ executions, [0-9]+ crashes$' "$fuzz_log")
    # the script failing with no target failed means the build or the setup did
    ((fuzz_rc != 0 && ff == 0)) && ff=1
    passed=$((passed + fp))
    failed=$((failed + ff))
fi

# run_pytest JUNIT ARGS...: one pytest run, its results counted from its JUnit report.
run_pytest() {
    local junit=$1 rc p f s
    shift
    rm -f "$junit"
    python3 -m pytest -q -p no:cacheprovider --junitxml="$junit" "$@"
    rc=$?
    if [[ -s $junit ]]; then
        read -r p f s < <(python3 - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
t = sum(int(x.get("tests", 0)) for x in suites)
f = sum(int(x.get("failures", 0)) + int(x.get("errors", 0)) for x in suites)
s = sum(int(x.get("skipped", 0)) for x in suites)
print(t - f - s, f, s)
PY
        ) || { p=0; f=1; s=0; }
        # 5 = no test collected: nothing to count, not a failure.
        ((rc != 0 && rc != 5 && f == 0)) && f=1
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + s))
    elif ((rc != 5)); then
        failed=$((failed + 1))
    fi
}

if [[ -d tests/py ]] && find tests/py -name 'test_*.py' -o -name '*_test.py' | grep -q .; then
    echo "== pytest tests/py" >&2
    run_pytest build/pytest-junit.xml tests/py
    # The adversarial suite (and the newest request paths: the Responses API, structured output's
    # refusals, limits, masks and bounded costs, tool calling, scored prompts, the end-of-generation
    # controls) again against the ASan + UBSan daemon: any sanitizer report aborts
    # the server, which fails the test in flight or the clean-exit check at the end (the options are
    # docs/reliability.md's "Running the daemon under the sanitizers").
    so=tests/py/test_structured_output.py tc=tests/py/test_tool_calls.py
    echo "== pytest tests/py/test_bad_input.py tests/py/test_strict_input.py tests/py/test_responses.py tests/py/test_echo.py tests/py/test_stop_controls.py, part of $so and $tc (daemon under ASan + UBSan)" >&2
    WUSHKV_BIN=build-asan/wushkv \
        ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:quarantine_size_mb=16 \
        UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
        run_pytest build-asan/pytest-junit.xml tests/py/test_bad_input.py tests/py/test_strict_input.py \
        tests/py/test_responses.py tests/py/test_echo.py tests/py/test_stop_controls.py --deselect tests/py/test_echo.py::test_scored_entries_are_bounded \
        "$so::test_bad_constraints" "$so::test_huge_constraints_are_refused_quickly" \
        "$so::test_finished_grammar_stops_and_length_cuts" "$so::test_logprobs_under_a_grammar" \
        "$so::test_vllm_and_llama_cpp_fields" "$so::test_null_and_text_ask_for_nothing" "$so::test_costly_grammars_are_bounded" \
        "$tc::test_bad_tools" "$tc::test_the_model_reads_tools_calls_and_results" "$tc::test_stream_gives_the_same_call" "$tc::test_auto_answer_streams_as_it_comes" \
        "$tc::test_responses_function_tools" "$tc::test_responses_auto_answer_is_its_text" \
        "$tc::test_tool_schemas_keep_their_references[defs]" "$tc::test_tool_schemas_keep_their_references[no-parameters]" \
        "$tc::test_tools_with_response_format" "$tc::test_streamed_logprobs_add_up_to_the_whole[required]"
    # (the cut replies' calls are read by tool_reply_scan.c, which the unit suite and fuzz_tool_reply
    # run under the sanitizers above; their daemon tests, 60 s here, are left to the release pass, as
    # is the scored-entries bound: a refusal, and 15 small choices, 20 s here)
fi

finish

#!/usr/bin/env bash
# Runs the Vulkan test suites on the system's Mesa (22.3 on Debian 12) and on Mesa 25's lavapipe
# (scripts/mesa25.sh fetches it beside the system driver), one driver after the other, and ends
# with one line per driver and a `N passed, N failed` total.
#
#   scripts/test-drivers.sh [TEST...]     default: every test of the `vulkan` suite
#
# TEST names meson tests (e.g. `paged_attention forward`). Needs a configured build/ (scripts/build.sh).
# Env: MESON_TEST_ARGS adds arguments to `meson test` (e.g. `--timeout-multiplier 3` on a busy machine).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
[[ -f build/build.ninja ]] || {
    echo "test-drivers: no build/ (run scripts/build.sh first)" >&2
    exit 2
}
what=("$@")
((${#what[@]})) || what=(--suite vulkan)
read -r -a extra <<<"${MESON_TEST_ARGS:-}"

passed=0 failed=0 summary=()
run_on() { # NAME CMD...: meson test under CMD's environment, counting its results
    local name=$1
    shift
    local log=build/meson-logs/test-drivers-$name.txt
    echo "== $name: $("$@" bash -c 'vulkaninfo --summary 2>/dev/null | sed -n "s/.*driverInfo *= *//p" | head -n 1')" >&2
    "$@" meson test -C build --print-errorlogs "${extra[@]}" "${what[@]}" 2>&1 | tee "$log" >&2
    local ok fail
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    fail=$(($(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -n 1) + $(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)))
    if [[ -z $ok ]]; then # meson itself failed: count the run as one failure
        ok=0 fail=1
    fi
    passed=$((passed + ok)) failed=$((failed + fail))
    summary+=("$name: $ok passed, $fail failed")
}

run_on mesa-system env
run_on mesa25 bash scripts/mesa25.sh run
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
((failed == 0))

#!/usr/bin/env bash
# Builds wushkv: build/ (release) always, build-asan/ (debug, ASan + UBSan) with --asan.
# Configures a build folder only the first time; after that ninja re-runs meson by itself
# when a meson.build changes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

asan=0
for arg in "$@"; do
    case $arg in
    --asan) asan=1 ;;
    -h | --help)
        echo "usage: scripts/build.sh [--asan]"
        echo "  builds build/ (release); --asan also builds build-asan/ (ASan + UBSan, debug)"
        exit 0
        ;;
    *)
        echo "build.sh: unknown argument '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
done

# setup DIR ARGS...: meson setup unless DIR is already configured.
setup() {
    local dir=$1
    shift
    if [[ ! -f $dir/build.ninja ]]; then
        # A half-made folder (setup died) would make meson refuse; --wipe starts it over.
        local wipe=()
        [[ -d $dir/meson-private ]] && wipe=(--wipe)
        meson setup "${wipe[@]}" "$dir" "$@"
    fi
}

setup build --buildtype=release
ninja -C build

if ((asan)); then
    # b_lundef=false: the sanitizer runtimes resolve symbols at load time.
    setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debug -Db_lundef=false
    ninja -C build-asan
fi

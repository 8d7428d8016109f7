#!/usr/bin/env bash
# Fetches Mesa 25's lavapipe from Debian 12's backports suite into a folder of its own, without
# installing it (the system Mesa stays the default driver), and runs commands on it.
#
#   scripts/mesa25.sh fetch         download and unpack it (once; later calls reuse the folder)
#   scripts/mesa25.sh env           fetch if needed, print the `export ...` line that selects it
#   scripts/mesa25.sh run CMD ...   fetch if needed, run CMD with that driver selected
#
# The folder is $WUSHKV_MESA25_DIR (default ~/.cache/wushkv/mesa25). apt runs with a sources file,
# lists and cache of its own in a temporary folder, pointing at the same mirror as the system's
# <codename> entry but the <codename>-backports suite, so the system's apt state is untouched.
# Needs apt-get and dpkg-deb (Debian 12). Packages: mesa-vulkan-drivers and the newer libdrm it
# asks for (libdrm2, libdrm-amdgpu1 >= 2.4.121: `apt-cache show mesa-vulkan-drivers=25...`); its
# other dependencies (libLLVM-15, xcb, ...) are those the system's Mesa 22 already uses.
set -euo pipefail

dir=${WUSHKV_MESA25_DIR:-$HOME/.cache/wushkv/mesa25}
pkgs=(mesa-vulkan-drivers libdrm2 libdrm-amdgpu1)
icd=$dir/lvp_icd.json
multiarch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu) # Debian's library folder, e.g. x86_64-linux-gnu
libdir=$dir/tree/usr/lib/$multiarch

log() { echo "mesa25: $*" >&2; }

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

fetch() {
    [[ -f $icd && -f $libdir/libvulkan_lvp.so ]] && return 0
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
        log "needs apt-get and dpkg-deb (Debian)"
        exit 1
    }
    local codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    local suite=${WUSHKV_MESA25_SUITE:-$codename-backports}
    # The mirror the system already uses for its own release (apt's configuration names it).
    local uri
    uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | awk -v r="$codename" '$2 == r { print $1; exit }')
    if [[ -z $uri ]]; then
        log "no apt source for '$codename' in the system's configuration to take the mirror from"
        exit 1
    fi
    tmp=$(mktemp -d) # global: the EXIT trap runs after fetch returns
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    echo "deb [signed-by=$keyring] $uri $suite main" >"$tmp/sources.list"
    local apt_o=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
    log "apt-get update ($suite, private lists)"
    apt-get "${apt_o[@]}" update -q >&2
    local want=()
    for p in "${pkgs[@]}"; do want+=("$p/$suite"); done
    log "apt-get download ${want[*]}"
    (cd "$tmp/debs" && apt-get "${apt_o[@]}" download -q "${want[@]}" >&2)
    rm -rf "$dir.new"
    mkdir -p "$dir.new/tree"
    for f in "$tmp"/debs/*.deb; do dpkg-deb -x "$f" "$dir.new/tree"; done
    [[ -f $dir.new/tree/usr/lib/$multiarch/libvulkan_lvp.so ]] || {
        log "no libvulkan_lvp.so in the packages"
        exit 1
    }
    # The packaged ICD json names the library without a path; ours names it absolutely.
    local api
    api=$(sed -n 's/.*"api_version": *"\([^"]*\)".*/\1/p' "$dir.new/tree/usr/share/vulkan/icd.d/lvp_icd.json")
    printf '{\n    "ICD": {\n        "api_version": "%s",\n        "library_path": "%s/libvulkan_lvp.so"\n    },\n    "file_format_version": "1.0.0"\n}\n' \
        "${api:-1.3.0}" "$libdir" >"$dir.new/lvp_icd.json"
    (cd "$tmp/debs" && ls *.deb) >"$dir.new/packages.txt"
    rm -rf "$dir"
    mv "$dir.new" "$dir"
    local missing
    missing=$(LD_LIBRARY_PATH=$libdir ldd "$libdir/libvulkan_lvp.so" | grep 'not found' || true)
    if [[ -n $missing ]]; then
        log "libvulkan_lvp.so lacks libraries (install them with apt-get):"
        echo "$missing" >&2
        exit 1
    fi
    log "unpacked into $dir: $(tr '\n' ' ' <"$dir/packages.txt")"
}

# The two variables that select it: the ICD, and its newer libdrm ahead of the system's.
env_line() {
    echo "export VK_ICD_FILENAMES=$icd LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

case ${1:-} in
fetch) fetch ;;
env)
    fetch
    env_line
    ;;
run)
    shift
    (($#)) || {
        log "run: no command"
        exit 2
    }
    fetch
    export VK_ICD_FILENAMES=$icd LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    exec "$@"
    ;;
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac

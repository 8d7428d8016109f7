#!/usr/bin/env bash
# Shared by scripts/deploy-test-image.sh and scripts/deploy-test-compose.sh (sourced, not run):
# the podman setup of the project's machines, the debian:bookworm base image made locally with
# debootstrap when no registry can be reached, the wushkv image build, and small waits.

DEPLOY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# runc, cgroupfs and ulimits within the host's: deploy/podman/containers.conf says why.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$DEPLOY_ROOT/deploy/podman/containers.conf}
IMAGE=${WUSHKV_IMAGE:-localhost/wushkv:latest}
BASE=docker.io/library/debian:bookworm

dlog() { echo "$(basename "$0"): $*" >&2; }

# need_cmds CMD...: stop with the Debian packages to install when a tool is missing.
need_cmds() {
    local missing=()
    for c in "$@"; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
    if ((${#missing[@]})); then
        dlog "missing ${missing[*]}: apt-get install podman runc debootstrap podman-compose prometheus curl python3-yaml"
        exit 1
    fi
}

# ensure_base: the Dockerfile's FROM debian:bookworm. Pulled if a registry answers; else made
# with debootstrap (minbase) from the first Debian mirror of this machine's apt sources and
# imported under the same name, so the Dockerfile builds unchanged.
ensure_base() {
    if podman image exists "$BASE"; then return 0; fi
    if timeout 60 podman pull -q "$BASE" >/dev/null 2>&1; then return 0; fi
    local mirror
    mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n 1 | awk '{print $2}')
    mirror=${mirror:-http://deb.debian.org/debian}
    local dir
    dir=$(mktemp -d /var/tmp/wushkv-bookworm.XXXXXX)
    dlog "no registry: making $BASE with debootstrap from $mirror (a few minutes)"
    debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.log" 2>&1 ||
        { tail -n 20 "$dir.log" >&2; rm -rf "$dir"; return 1; }
    # Like the registry's image: no apt lists or caches.
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin
    tar -C "$dir" -c . | podman import -q --change 'CMD ["bash"]' - "$BASE" >/dev/null
    rm -rf "$dir" "$dir.log"
}

# build_image [PODMAN_BUILD_ARGS...]: the wushkv image from deploy/Dockerfile, the repository as
# context.
# --format docker keeps the HEALTHCHECK (OCI drops it). When this machine's pip trusts an extra CA
# (PIP_CERT, e.g. a TLS-intercepting proxy's), the model stage's pip gets it as the secret pip_ca.
build_image() {
    ensure_base
    local secret=()
    [[ -n ${PIP_CERT:-} && -r ${PIP_CERT:-} ]] && secret=(--secret "id=pip_ca,src=$PIP_CERT")
    nice -n 10 podman build --format docker --pull=never "${secret[@]}" "$@" \
        -f "$DEPLOY_ROOT/deploy/Dockerfile" -t "$IMAGE" "$DEPLOY_ROOT"
}

# wait_http URL SECONDS: until URL answers 2xx; non-zero on timeout.
wait_http() {
    local url=$1 deadline=$((SECONDS + $2))
    until curl -fsS -o /dev/null "$url" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 2
    done
}

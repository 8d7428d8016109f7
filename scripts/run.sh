#!/usr/bin/env bash
# THE "do everything and start the server" command: installs what is missing, builds, and starts
# `wushkv serve` on the default model at 127.0.0.1:8080. Extra arguments go to wushkv serve
# (e.g. --port 9000, --host 0.0.0.0, -m FILE). Ctrl-C (SIGINT) drains and stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh >/dev/null
bash scripts/build.sh

exec build/wushkv serve "$@"

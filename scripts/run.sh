#!/usr/bin/env bash
# THE "do everything and start" command: installs what is missing, builds, and runs wushkv on the
# default model. Extra arguments go to wushkv (a later flag overrides an earlier one, e.g. -n 64).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh >/dev/null
bash scripts/build.sh

# Until the daemon exists, "start" means one generation on the default model (greedy).
# When issue 4 lands (`wushkv serve`), this line becomes: exec build/wushkv serve "$@"
exec build/wushkv generate -p "${PROMPT:-The capital of France is}" -n 32 "$@"

#!/usr/bin/env bash
# The main job: builds moefuse-bench and runs it (default preset, or the arguments given).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
exec build/release/moefuse-bench "$@"

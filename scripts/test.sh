#!/usr/bin/env bash
# The test command: builds everything, then runs every ctest suite. On a machine without an sm_90
# GPU the GPU tests report themselves skipped with the reason; the CPU tests run everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset release -j "$(nproc)" "$@"

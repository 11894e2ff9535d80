#!/usr/bin/env bash
# The test command: builds everything, then runs every ctest suite and the Python tests
# (python/tests). On a machine without an sm_90 GPU (or without torch) the GPU tests report
# themselves skipped with the reason; the CPU tests run everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset release -j "$(nproc)" "$@"
# The Python package over build/release/libmoefuse_c.so. Exit code 5 is "no tests collected".
status=0
MOEFUSE_LIBRARY="$PWD/build/release/libmoefuse_c.so" \
  python3 -m pytest -q -rs -p no:cacheprovider python/tests || status=$?
[ "$status" -eq 0 ] || [ "$status" -eq 5 ] || exit "$status"

#!/usr/bin/env bash
# Session 51, call 9: main 46061a7's exact build (the session's final code: session 48's library,
# run 51's docs, scripts and tests).
# 1. The whole GPU suite. Prediction: 202 passed, 2 skipped (as call 1: the library is the same).
# 2. The Python suite against this build. Prediction: 135 passed, 12 skipped (run 49), plus the
#    CPU-side tests added since (replay line, margins, gpu_check, ab_bench's switches).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
python3 -c "import tarfile; tarfile.open('.gpu/s51/F.tar.xz').extractall('.gpu/s51/F')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s51/F/b OUT=$R timeout 200 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack
BUILD=.gpu/s51/F/b OUT=$R timeout 200 scripts/gpu_check.sh python > "$R/python.log" 2>&1
grep -E "passed|failed" "$R/python.log" | tail -n 3
pack

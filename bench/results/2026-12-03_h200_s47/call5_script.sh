#!/usr/bin/env bash
# Session 47, call 5, on F (main f2e1d71 = the final code; later commits are docs): the whole GPU
# suite on exactly this build (call 1 ran it on c7b9276's code plus the zero-tail change).
# Prediction: 202 passed, 2 skipped.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s47/F.tar.xz').extractall('.gpu/s47/F')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s47/F/b OUT=$R timeout 280 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 6
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

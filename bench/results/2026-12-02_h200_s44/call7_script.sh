#!/usr/bin/env bash
# Session 44, call 7: the exact final code, g = main 7d2267d (f's kernels; the d_b2 units'
# scratch check shared with the MXFP8 twin since): the whole GPU suite and the Python suite.
# Prediction: 199 passed, 2 skipped; Python 133 passed, 12 skipped (as call 3).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s44/g.tar.xz').extractall('.gpu/s44/g')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s44/g/b OUT=$R timeout 280 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

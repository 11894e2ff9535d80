#!/usr/bin/env bash
# Session 43, call 6: the exact final code, f = main 017f924 (kernels as call 5's x; 105d9a5
# changed a comment): the whole GPU suite and the Python suite. Prediction: 200 passed (the two
# new 1024-expert tests), 2 skipped; Python 132 passed, 8 skipped (as session 42's).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s43/f.tar.xz').extractall('.gpu/s43/f')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s43/f/b OUT=$R timeout 250 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

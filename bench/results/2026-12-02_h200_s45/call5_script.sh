#!/usr/bin/env bash
# Session 45, call 5: the exact final code, F = main 9911205 (91e7692's kernels: the FP8 wgrad's
# scale loads by LDS; comments and docs since): the whole GPU suite, the Python suite, and
# compute-sanitizer (memcheck, racecheck, synccheck) over the FP8 wgrad tests.
# Prediction: 199 passed, 2 skipped; Python 133 passed, 12 skipped (as run 44); 0 findings.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s45/F.tar.xz').extractall('.gpu/s45/F')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s45/F/b OUT=$R timeout 290 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
SANITIZE_FILTER='GroupedGemmFp8Wgrad.RaggedExpertsWithEmptyOnesAndTails:GroupedGemmFp8Wgrad.AccumulateLeavesEmptyExpertsUntouched:GroupedGemmFp8Wgrad.SmallFeaturesAndOneRow:GroupedGemmFp8Wgrad.SeveralTilesPerCtaWithEmptyExperts' \
  SANITIZE_TOOLS='memcheck racecheck synccheck' SANITIZE_TIMEOUT=150 BUILD=.gpu/s45/F/b \
  OUT=$R/s timeout 200 scripts/gpu_check.sh sanitize > "$R/sanitize.log" 2>&1
grep -E "finding|FAIL|TIMEOUT|tool|clean|==" "$R/sanitize.log" | tail -n 12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

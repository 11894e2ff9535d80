#!/usr/bin/env bash
# Session 37, call 6: f = main b5e0027, the final code (its library's SASS text is call 5's p,
# diffed; every kernel but the dGLU dgrads' and the FP8 kernels' (which share the drain) is main
# d71ff41's): the whole GPU suite, CPU tests, Python; memcheck / racecheck / synccheck over the
# dGLU dgrad tests (BF16 wide, narrow, clusters; FP8); issue 5's table (gemm-backward, torch).
# Predictions: GPU suite 194 passed / 2 skipped (two-device tests); CPU 275 + 1; Python 131 / 9;
# 0 sanitizer findings; fused FC2 dgrad of dense qwen3 0.53-0.55, gpt-oss 0.56-0.59, mixtral
# 0.84-0.86, deepseek 0.91-0.93.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s37f/bins.tar.xz').extractall('.gpu/s37f')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/s37f/b OUT=$R scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
F='GroupedGemmBackward.Fc2DgradEveryActivationFusedAndUnfused:GroupedGemmBackward.Fc2DgradWideShapeForALongHidden:GroupedGemmBackward.Fc2DgradClusterGroupsAndPhantoms:*Fp8Dgrad*'
for tool in memcheck racecheck synccheck; do
  timeout 200 compute-sanitizer --tool $tool .gpu/s37f/b/moefuse_gpu_tests --gtest_filter="$F" \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
timeout 300 .gpu/s37f/b/moefuse-bench gemm-backward --preset all --json "$R/gemm_backward.json" \
  > "$R/gemm_backward.txt" 2>&1
grep -E "fc2 dgrad|fc1 dgrad" "$R/gemm_backward.txt" | head -24
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

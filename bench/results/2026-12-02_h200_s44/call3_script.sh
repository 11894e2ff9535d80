#!/usr/bin/env bash
# Session 44, call 3: the exact final code, f = main 7266492 (a1389e3's kernels; docs, the
# documented workspace's test since). Prediction: the whole GPU suite 199 passed, 2 skipped
# (call 1's); Python 133 passed, 12 skipped (call 1's failure fixed); compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck over the bias-sums tests and the gpt-oss layer
# tests, fused and unfused (the units' kernels, both scratch users): 0 findings.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s44/f.tar.xz').extractall('.gpu/s44/f')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s44/f/b OUT=$R timeout 280 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
SANITIZE_FILTER='GroupedGemmBackward.Fc2DgradBiasSumsOverASkewedLoad:GroupedGemmBackward.Fc2DgradEveryActivationFusedAndUnfused:Layer/LayerReference.ForwardAndBackwardMatchReference/gptoss_fused:Layer/LayerAccumulate.BackwardAddsEachStepsGradientsOnce/gptoss_unfused' \
  SANITIZE_TIMEOUT=150 BUILD=.gpu/s44/f/b OUT=$R/s timeout 300 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "finding|FAIL|TIMEOUT|tool|clean|==" "$R/sanitize.log" | tail -n 12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 41, call 1: s = 10a63b4 (wip/dgrad-permute): the FC1 dgrad's epilogue warps permute x
# into dW1's xs between their tiles (GroupedGemmDgradArgs::permute), so the fused bf16 backward
# drops its separate permute pass; m = main 4658cc4. GPU tests of the change (DgradPermute, the
# backward GEMMs, every Layer test) and memcheck over DgradPermute (the change touches no shared memory); then the bf16
# layer (fused, no torch), m against s, interleaved.
# Prediction: tests pass, sanitizers 0; per step the fc1_wgrad stage loses the permute (qwen3
# ~165 us, gpt-oss ~120, deepseek ~240, mixtral ~40) and fc1_dgrad gains 20-50% of that (its
# HBM traffic and its epilogue warps' issue): forward+backward 0.985-0.99x on qwen3 and
# deepseek, 0.99-0.995x gpt-oss, ~1.0 mixtral; forward unchanged.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m s; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='DgradPermute.*:GroupedGemmBackward*:Layer*' TEST_TIMEOUT=300 BUILD=.gpu/s/b \
  OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
SANITIZE_FILTER='DgradPermute.*' SANITIZE_TOOLS=memcheck SANITIZE_JOBS=4 \
  SANITIZE_TIMEOUT=240 BUILD=.gpu/s/b OUT=$R/s timeout 260 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head
BENCH_ARGS="--mode fused --no-torch" OUT=$R timeout 420 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 2 m=.gpu/m/b s=.gpu/s/b \
  > "$R/ab_layer.txt" 2>&1
grep -E "fc1_dgrad|fc1_wgrad|fwd|clock" "$R/ab_layer.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

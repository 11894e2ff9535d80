#!/usr/bin/env bash
# Session 41, call 5: p = b2e9934 (wip/fp8-side-permute): PermuteViews (dispatch.h) shared by the
# two GEMMs that run a permute beside their tiles; the FP8 GEMM's bf16 output runs one too
# (GroupedGemmFp8Args::permute), and the FP8 layer with bf16 wgrads (config.bf16_wgrad) builds
# dW1's xs inside its FP8 FC1 dgrad instead of a pass before dW1. f = 7e8b281 (main's kernels).
# 1. The whole GPU suite and the Python tests on p. Prediction: 197 passed (196 - DgradPermute's 2 + SidePermute's
#    3), 2 skipped; Python 132 passed, 8 skipped.
# 2. The FP8 layer with bf16 wgrads, f against p, three rounds (`layer --mode fused --precision
#    fp8 --fp8-wgrad bf16 --no-torch`). Prediction: forward + backward 0.985-0.995x on qwen3 and
#    gpt-oss (the bf16 layer's 0.988-0.994 / 0.996-1.005 in calls 1-2), ~0.997 deepseek and
#    mixtral; the forward unchanged.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in f p; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/p/b OUT=$R/t scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
BENCH_ARGS="--mode fused --precision fp8 --fp8-wgrad bf16 --no-torch" OUT=$R timeout 250 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 3 \
  f=.gpu/f/b p=.gpu/p/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fc1_dgrad|fc1_wgrad|graph|^[fp]:" "$R/ab_layer_fp8.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

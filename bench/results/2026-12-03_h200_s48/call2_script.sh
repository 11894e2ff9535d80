#!/usr/bin/env bash
# Session 48, call 2. A = main 3f89d4a; G = wip/fwd-group16 ca4aeb8 (BF16 forward raster groups
# of 16 m-blocks; call 1: deepseek fused FC2 0.967x in each of three rounds, FC1 0.987-0.994x);
# D = wip/group16-dgrads (G + the BF16 dgrads' and the FP8 forward/dgrads' groups of 16).
# 1. GPU tests of the grouped GEMMs, FP8 dgrad and FP8 layer on D. Prediction: all pass.
# (G is not carried: its BF16 forward is D's, its backward and FP8 kernels A's.)
# 2. gemm A/D qwen3, gpt-oss, mixtral, two rounds. Prediction: qwen3 and gpt-oss 1.00 +- 1 %
#    (experts of 4-9 m-blocks), mixtral fused FC1 / FC2 0.98-0.99x.
# 3. gemm-backward A/D all presets, two rounds. Prediction: deepseek and mixtral dgrads
#    0.97-0.99x, qwen3 / gpt-oss 1.00 +- 1 %, wgrads 1.00 +- 1 % (unchanged kernels).
# 4. gemm-fp8 A/D deepseek, mixtral, two rounds. Prediction: 0.97-0.99x.
# 5. layer A/D all presets bf16, deepseek + mixtral fp8, two rounds. Prediction: deepseek and
#    mixtral bf16 steps 0.99x, fp8 0.98-0.99x; qwen3 / gpt-oss 1.00 +- 1.5 %.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A D; do
  [[ -d .gpu/s48/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s48/$d.tar.xz').extractall('.gpu/s48/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='*GroupedGemm*:*Fp8Dgrad*:*LayerFp8*:Layer/LayerFp8*' \
  TEST_TIMEOUT=120 BUILD=.gpu/s48/D/b OUT=$R timeout 100 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 4
BENCH_ARGS="--no-torch" OUT=$R/g timeout 80 scripts/ab_bench.sh gemm \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b" 2 A=.gpu/s48/A/b D=.gpu/s48/D/b > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse fused|^[AD]:" "$R/ab_gemm.txt" | head -16
BENCH_ARGS="--no-torch" OUT=$R/b timeout 120 scripts/ab_bench.sh gemm-backward \
  "deepseek-v3 mixtral-8x7b qwen3-30b-a3b gpt-oss-120b" 2 A=.gpu/s48/A/b D=.gpu/s48/D/b \
  > "$R/ab_gemm_backward.txt" 2>&1
grep -E "dgrad .*moefuse|^[AD]:" "$R/ab_gemm_backward.txt" | head -20
BENCH_ARGS="--no-torch" OUT=$R/f timeout 60 scripts/ab_bench.sh gemm-fp8 \
  "deepseek-v3 mixtral-8x7b" 2 A=.gpu/s48/A/b D=.gpu/s48/D/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "^[AD]:" "$R/ab_gemm_fp8.txt"
BENCH_ARGS="--mode fused --no-torch" OUT=$R/l timeout 120 scripts/ab_bench.sh layer \
  "deepseek-v3 mixtral-8x7b qwen3-30b-a3b gpt-oss-120b" 2 A=.gpu/s48/A/b D=.gpu/s48/D/b \
  > "$R/ab_layer.txt" 2>&1
grep -E "\(graph\)|^[AD]:" "$R/ab_layer.txt" | head -20
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 60 \
  scripts/ab_bench.sh layer "deepseek-v3 mixtral-8x7b" 2 A=.gpu/s48/A/b D=.gpu/s48/D/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|^[AD]:" "$R/ab_layer_fp8.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

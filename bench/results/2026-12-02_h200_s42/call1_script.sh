#!/usr/bin/env bash
# Session 42, call 1: w = wip/wgrad-direct-half 62955a0 (a 128 x 256 fp32 tile of the wgrad and
# the plain dgrad: columns 0-127 handed over and drained by bulk copies, columns 128-255 stored
# by the consumers straight from their registers, so they no longer wait for the first half's
# drain; the FP8 wgrad's fp32 part drained by bulk copies instead of registers); m = main 273e1a2.
# 1. The whole GPU suite on w. Prediction: 196 passed, 2 skipped.
# 2. gemm-backward, m / w, three rounds. Prediction: fp32 dW1 / dW2 0.95-0.98x the time on qwen3,
#    deepseek and mixtral (the first half's drain, 64 KiB through 96 threads' registers, was ~5-10%
#    of a qwen3 tile's K loop); gpt-oss (narrow fp32 tiles, one hand-off) and bf16 rows 1.00x.
# 3. The bf16 layer with fp32 expert gradients, m / w, four rounds. Prediction: fwd+bwd 0.985-0.995x
#    on qwen3 and deepseek, 1.00 on gpt-oss; fc1_wgrad / fc2_wgrad stages 0.95-0.98x.
# 4. The FP8 layer with fp32 expert gradients (FP8 wgrads), m / w, two rounds: neutral to 0.99x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m w; do
  python3 -c "import tarfile; tarfile.open('.gpu/s42/$d.tar.xz').extractall('.gpu/s42/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=300 BUILD=.gpu/s42/w/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests" "$R/check.log" | tail -n 6
BENCH_ARGS="--no-torch" OUT=$R timeout 240 scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 3 m=.gpu/s42/m/b w=.gpu/s42/w/b \
  > "$R/ab_gemm-backward.txt" 2>&1
grep -E "dW|dgrad|^[mw]:" "$R/ab_gemm-backward.txt" | head -60
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32" OUT=$R timeout 240 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 4 m=.gpu/s42/m/b w=.gpu/s42/w/b \
  > "$R/ab_layer.txt" 2>&1
grep -E "wgrad|graph|^[mw]:" "$R/ab_layer.txt" | head -40
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --precision fp8" OUT=$R/fp8 timeout 120 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 2 m=.gpu/s42/m/b w=.gpu/s42/w/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "wgrad|graph|^[mw]:" "$R/ab_layer_fp8.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

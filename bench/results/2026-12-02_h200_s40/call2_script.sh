#!/usr/bin/env bash
# Session 40, call 2: the same binary as call 1 (wip/fp8-wide), 128- against 192-wide FP8
# forward tiles (bf16 output: FC2, the FC1 dgrad, the plain GEMMs) by MOEFUSE_FP8_BLOCK_N.
# Call 1 (two rounds): no change at DeepGEMM's long-K shapes, gpt-oss FC1 / FC2 0.94 / 0.93,
# qwen3 FC2 0.81 with cuBLAS itself 0.91 between the same runs (noise).
# Prediction: qwen3 and gpt-oss FC2 0.90-0.94, gpt-oss FC1 0.94, deepseek 0.98-1.02; the FP8
# layer's fwd+bwd 0.98-0.99 on qwen3 and gpt-oss (FC2 forward and FC1 dgrad only).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s40a/bins.tar.xz').extractall('.gpu/s40a')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
B=$(realpath .gpu/s40a/b)
for w in 128 192; do
  mkdir -p ".gpu/w$w"
  printf '#!/bin/sh\nMOEFUSE_FP8_BLOCK_N=%s exec %s "$@"\n' $w "$B/moefuse-bench" > ".gpu/w$w/moefuse-bench"
  chmod +x ".gpu/w$w/moefuse-bench"
done
BENCH_ARGS="--no-torch" OUT=$R timeout 260 scripts/ab_bench.sh gemm-fp8 \
  "qwen3-30b-a3b gpt-oss-120b deepseek-v3" 2 w128=.gpu/w128 w192=.gpu/w192 > "$R/ab_gemm-fp8.txt" 2>&1
grep -E "fp8 grouped \||cublas|clock|w1" "$R/ab_gemm-fp8.txt" | grep -v deepgemm | head -40
grep -E "deepgemm" "$R/ab_gemm-fp8.txt" | grep "fp8 grouped |" | head -12
BENCH_ARGS="--mode fused --precision fp8 --no-torch" OUT=$R timeout 240 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b gpt-oss-120b" 2 w128=.gpu/w128 w192=.gpu/w192 > "$R/ab_layer.txt" 2>&1
grep -E "graph|fc2 |fc1_dgrad|clock|w1" "$R/ab_layer.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

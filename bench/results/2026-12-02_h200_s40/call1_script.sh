#!/usr/bin/env bash
# Session 40, call 1: the FP8 forward (bf16 output) in 128 x 160 and 128 x 192 tiles against
# 128 x 128, one binary (wip/fp8-wide), width by MOEFUSE_FP8_BLOCK_N.
# Prediction (docs/fp8.md "Speed": the 128-wide tile wants ~156 B/clk of shared memory at the
# full tensor rate against 128): 192 +8-15% on the DeepGEMM K = 7168 shapes (its N = 4096 tail
# costs 3%), 160 +5-10%; K = 2048 less; FP8 tests pass at every width.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s40a/bins.tar.xz').extractall('.gpu/s40a')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
B=$(realpath .gpu/s40a/b)
for w in 128 160 192; do
  MOEFUSE_FP8_BLOCK_N=$w timeout 200 "$B/moefuse_gpu_tests" \
    --gtest_filter='GroupedGemmFp8.*:Fp8Dgrad.Fc1*' > "$R/t_$w.log" 2>&1
  echo "tests $w: rc $? $(grep -E "PASSED|FAILED" "$R/t_$w.log" | tr '\n' ' ')"
  mkdir -p ".gpu/w$w"
  printf '#!/bin/sh\nMOEFUSE_FP8_BLOCK_N=%s exec %s "$@"\n' $w "$B/moefuse-bench" > ".gpu/w$w/moefuse-bench"
  chmod +x ".gpu/w$w/moefuse-bench"
done
BENCH_ARGS="--no-torch" OUT=$R timeout 330 scripts/ab_bench.sh gemm-fp8 "qwen3-30b-a3b gpt-oss-120b" 2 \
  w128=.gpu/w128 w160=.gpu/w160 w192=.gpu/w192 > "$R/ab_gemm-fp8.txt" 2>&1
grep -E "fp8 grouped|fc1 dgrad|clock" "$R/ab_gemm-fp8.txt" | head -60
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

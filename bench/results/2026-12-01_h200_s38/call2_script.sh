#!/usr/bin/env bash
# Session 38, call 2: r = the tree's drain on DGluLaneMap (dglu_lane_map.h; call 1's p with a
# lane's first octet guarding the row's work: narrow dGLU SASS 12272, wide 14272, FP8 dGLU
# 14696 / 11320); w = r with 8-lane row groups at every width (256: 4 octets a lane, one row in
# flight, two spilled; FP8's 128: 2 octets, two rows): wide 9232, FP8 13088 / 10144; m = main
# 313aec2 (14304, 14344, 14656 / 11272). Then the README's tables on r.
# Predictions: w's dgrad tests pass; fused FC2 dgrad r/m qwen3 0.93-0.95, gpt-oss 0.97-0.99 (call
# 1's p: 0.941, 0.984), mixtral and deepseek 0.99-1.01; w/r mixtral and deepseek 0.97-1.02 (fewer
# loads in flight may cost what fewer instructions save), qwen3 and gpt-oss 0.99-1.01; FP8 dGLU
# dgrad (gemm-fp8, qwen3) w/m 0.95-1.0, r/m 0.99-1.01. Layer fp32 grads fwd+bwd qwen3 476 -> 478-485,
# gpt-oss 467 -> 470-480.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s38m', '.gpu/s38r', '.gpu/s38w'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemmBackward.Fc2*:*Fp8Dgrad*:*Mxfp8*Dgrad*:Layer*Fp8*' TEST_TIMEOUT=300 \
  BUILD=.gpu/s38w/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check_w.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check_w.log"
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 2 m=.gpu/s38m/b r=.gpu/s38r/b \
  w=.gpu/s38w/b > "$R/ab_gemm_bwd.txt" 2>&1
grep -E "==|fc2 dgrad" "$R/ab_gemm_bwd.txt" | head -30
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-fp8 "qwen3-30b-a3b" 2 \
  m=.gpu/s38m/b r=.gpu/s38r/b w=.gpu/s38w/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "==|dgrad" "$R/ab_gemm_fp8.txt" | head -12
sed -n '/clocks while/,$p' "$R/ab_gemm_bwd.txt" | head -5
B=.gpu/s38r/b/moefuse-bench
run() { local name=$1; shift; timeout 300 $B "$@" --json "$R/$name.json" > "$R/$name.txt" 2>&1;
        echo "$name rc=$?"; }
run layer_fp32 layer --preset all --mode both --expert-grads fp32
grep -E "moefuse fused|speedup|torch|dense" "$R/layer_fp32.txt" | grep -v "^ *$" | tail -24
run layer_bf16 layer --preset all --mode fused --expert-grads bf16 --no-torch
grep -E "moefuse fused \(graph\)" "$R/layer_bf16.txt"
run gemm_backward gemm-backward --preset all
grep -E "moefuse fused|moefuse  |dW. +moefuse  " "$R/gemm_backward.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

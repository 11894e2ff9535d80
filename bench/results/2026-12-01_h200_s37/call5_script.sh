#!/usr/bin/env bash
# Session 37, call 5: p = the dGLU drain moves its row pointers (pre, d_pre, scaled_act, the
# row scale, dp's partial) by a 64-bit add a row instead of recomputing each from the row index
# (64-bit multiply-add and carry per pointer and row): the narrow dGLU kernel's SASS 14808 ->
# 14304 instructions, ~17 fewer a row's octet (of ~200). Calls 3-4 read the qwen3 fused FC2
# dgrad's time following its drain's instruction count (call 3: ~+8% instructions, +10% time);
# call 4's e1 (same count, earlier scale loads) was neutral. m = main d71ff41. Outputs bitwise m's.
# Predictions: tests pass; fused FC2 dgrad p/m qwen3 0.92-0.97, gpt-oss 0.95-0.98, mixtral and
# deepseek 0.98-1.0; FP8 dgrad (gemm-fp8) qwen3 0.95-1.0; every other row 0.99-1.01.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s37p', '.gpu/s37m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemmBackward*:*Fp8Dgrad*:*Mxfp8*:Layer*' TEST_TIMEOUT=300 \
  BUILD=.gpu/s37p/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 2 m=.gpu/s37m/b p=.gpu/s37p/b \
  > "$R/ab_gemm_bwd.txt" 2>&1
grep -E "==|fc2 dgrad|fc1 dgrad" "$R/ab_gemm_bwd.txt" | head -30
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-fp8 "qwen3-30b-a3b" 2 \
  m=.gpu/s37m/b p=.gpu/s37p/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "==|dgrad" "$R/ab_gemm_fp8.txt" | head -12
sed -n '/clocks while/,$p' "$R/ab_gemm_bwd.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

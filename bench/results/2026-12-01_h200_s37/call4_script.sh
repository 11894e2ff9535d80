#!/usr/bin/env bash
# Session 37, call 4: the dGLU drain's serial latencies. Call 3 showed the qwen3 fused FC2 dgrad
# bound by its drain (8% more drain instructions, 10% more time), whose SASS loads each row's
# routing-prob scale (LDG) after the row's pre arrived, then waits on it, and runs each row's
# dp shuffle tree (5 dependent shuffles) before the next row. e1 = the scales loaded with the
# rows' pre (one wait a batch of six rows); e2 = e1 + the rows' dp trees interleaved after the
# batch. m = main d71ff41. Outputs bitwise main's (same arithmetic, same order).
# Predictions: tests pass; fused FC2 dgrad e1/m qwen3 0.85-0.93, gpt-oss 0.90-0.96; e2/e1
# 0.97-1.0; mixtral, deepseek 0.97-1.0; the plain GEMM rows 0.99-1.01.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s37e1', '.gpu/s37e2', '.gpu/s37m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
for b in e1 e2; do
  GTEST_FILTER='GroupedGemmBackward*:*Fp8Dgrad*:*Mxfp8*:Layer*' \
    TEST_TIMEOUT=300 BUILD=.gpu/s37$b/b OUT=$R/t_$b scripts/gpu_check.sh tests > "$R/check_$b.log" 2>&1
  echo "$b: $(grep -E 'GPU tests' "$R/check_$b.log")"; grep -E "^(FAILED|TIMEOUT)" "$R/check_$b.log"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b" 2 m=.gpu/s37m/b e1=.gpu/s37e1/b e2=.gpu/s37e2/b \
  > "$R/ab_gemm_bwd.txt" 2>&1
grep -E "==|fc2 dgrad|fc1 dgrad" "$R/ab_gemm_bwd.txt" | head -30
sed -n '/clocks while/,$p' "$R/ab_gemm_bwd.txt" | head -5
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

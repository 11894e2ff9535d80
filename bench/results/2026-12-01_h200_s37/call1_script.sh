#!/usr/bin/env bash
# Session 37, call 1: n = the gather FC1 in 128 x 192 tiles with a fourth warpgroup draining (the
# overlapped epilogue; 512 threads, 128 registers, no spill), chosen where 192 divides N (qwen3's
# FC1 1536); m = main d71ff41 (every other kernel's SASS text identical in n, diffed).
# Predictions: GroupedGemm.*, Layer* pass; memcheck + racecheck clean on GatherFusedNarrowTiles;
# gemm qwen3 "gather-fused +swiglu +save pre" n/m 0.83-0.90 (1.56 -> 1.30-1.40 ms), "gather-fused
# +swiglu" 0.85-0.95, every other row 0.99-1.01; layer qwen3 fused (bf16 grads) fwd 497 -> 520-540
# TFLOP/s, fwd+bwd +2-3%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s37n', '.gpu/s37m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemm.*:Layer*' TEST_TIMEOUT=300 BUILD=.gpu/s37n/b OUT=$R \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 8
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 .gpu/s37n/b/moefuse_gpu_tests \
    --gtest_filter='GroupedGemm.GatherFusedNarrowTiles' > "$R/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/$tool.log" | tail -1)"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm "qwen3-30b-a3b" 3 \
  m=.gpu/s37m/b n=.gpu/s37n/b > "$R/ab_gemm.txt" 2>&1
grep -E "==|fc1|fc2" "$R/ab_gemm.txt" | head -40
BENCH_ARGS="--mode fused --no-torch --expert-grads bf16" OUT=$R scripts/ab_bench.sh layer \
  "qwen3-30b-a3b" 3 m=.gpu/s37m/b n=.gpu/s37n/b > "$R/ab_layer.txt" 2>&1
grep -E "==|graph|fc1 " "$R/ab_layer.txt" | head -30
MOEFUSE_LIBRARY=$PWD/.gpu/s37n/b/libmoefuse_c.so PYTHONPATH=python timeout 200 \
  python3 bench/layer_gaps.py --preset qwen3-30b-a3b --mode fused --kernels \
  > "$R/kern_qwen3_n.txt" 2>&1
grep -E "step|grouped_gemm" "$R/kern_qwen3_n.txt" | cut -c1-120
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

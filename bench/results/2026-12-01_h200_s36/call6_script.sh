#!/usr/bin/env bash
# Session 36, call 6: x = call 1's v (the first load before the zeroing, row_of loads before lane 0's wait) + call 3's t (four rows a stage where a row is not whole
# 256-byte units), against m = main f4dbcdc. Call 1 read v 4-row 0.862-0.864, call 3 t 0.855-0.856.
# Predictions: Dispatch*/Permute* tests pass; permute x/m gpt-oss 0.985-0.99 (0.86-0.865 of copy),
# qwen3 ~0.99 (0.91), mixtral and deepseek 0.995-1.0; in the layer graph gpt-oss permutes ~125 us.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s36x', '.gpu/s36m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='Dispatch*:*Permute*' TEST_TIMEOUT=300 BUILD=.gpu/s36x/b OUT=$R \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 6
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh dispatch \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 3 m=.gpu/s36m/b x=.gpu/s36x/b \
  > "$R/ab_dispatch.txt" 2>&1
grep -E "==| permute " "$R/ab_dispatch.txt" | head -40
for b in m x; do
  MOEFUSE_LIBRARY=$PWD/.gpu/s36$b/b/libmoefuse_c.so PYTHONPATH=python timeout 200 \
    python3 bench/layer_gaps.py --preset gpt-oss-120b --mode fused --kernels \
    > "$R/kern_gpt-oss-120b_$b.txt" 2>&1
  grep -E "step|permute_kernel" "$R/kern_gpt-oss-120b_$b.txt" | cut -c1-110
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

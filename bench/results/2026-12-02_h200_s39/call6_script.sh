#!/usr/bin/env bash
# Session 39, call 6: l = f (main e4e4a67) + the 16-byte cp.async (the gather FC1's and the
# gather wgrad's row copies, permute_backward_router's staging) with the L2::256B prefetch hint
# (SASS LDGSTS.E.BYPASS.LTC256B.128): each gathered 128-byte row piece also brings the row's
# next K block into L2, so that the next stage's copies of the row hit L2. The gather producer
# is latency-bound (docs/grouped_gemm.md).
# Predictions: tests pass; gather-fused FC1 l/f qwen3 0.96-1.00, deepseek 0.98-1.01; every
# other row 0.99-1.01; layer qwen3 fwd 0.98-1.00.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s39l', '.gpu/s39f'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemm.*:GroupedGemmBackward.Wgrad*:DispatchRows.*:LayerGraph.*:Layer/LayerReference.*' \
  TEST_TIMEOUT=200 BUILD=.gpu/s39l/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
BENCH_ARGS="--no-torch" OUT=$R timeout 150 scripts/ab_bench.sh gemm \
  "qwen3-30b-a3b deepseek-v3" 2 f=.gpu/s39f/b l=.gpu/s39l/b > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse (gather|unfused gather)" "$R/ab_gemm.txt" | head -20
BENCH_ARGS="--mode fused --no-torch" OUT=$R timeout 150 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b" 4 f=.gpu/s39f/b l=.gpu/s39l/b > "$R/ab_layer.txt" 2>&1
grep -E "graph|fused fc1 fwd|fused permute_bwd|fused fc1_wgrad" "$R/ab_layer.txt" | head
sed -n '/clocks while/,$p' "$R/ab_layer.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

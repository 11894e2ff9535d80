#!/usr/bin/env bash
# Session 36, call 4: w = d_b1 from the dW1 wgrad's own K loop (GroupedGemmWgradArgs::column_sums:
# one m64n8k16 wgmma against ones beside each K step of the n-block-0 tiles; the fused bf16 layer
# drops its d_b1 pass), against m = main f4dbcdc. Predictions: GroupedGemmBackward*, the layer
# tests, memcheck/racecheck on WgradColumnSums pass/clean; gemm-backward gpt-oss w/m: dW1 rows
# without sums 0.99-1.01, "bf16 out +d_b1" 1.00-1.01x of "bf16 out" and 0.93-0.95x of it + the
# d_b1 pass (~0.19 ms); graph gpt-oss: segment_sums 187 us gone, the dW1 wgrad +0-15 us, step
# -170..-190 us; layer gpt-oss fwd+bwd (bf16 grads) +0.8-1.1%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s36w', '.gpu/s36m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemmBackward*:Layer/LayerReference.*:LayerExpertGrads.*:Layer/LayerAccumulate.*:LayerGraph.*:LayerDeterminism.*' \
  TEST_TIMEOUT=300 BUILD=.gpu/s36w/b OUT=$R scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 8
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool .gpu/s36w/b/moefuse_gpu_tests \
    --gtest_filter='GroupedGemmBackward.WgradColumnSums' > "$R/$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward "gpt-oss-120b" 2 \
  m=.gpu/s36m/b w=.gpu/s36w/b > "$R/ab_gemm_backward.txt" 2>&1
grep -E "==|dW1" "$R/ab_gemm_backward.txt" | head -20
for b in m w; do
  MOEFUSE_LIBRARY=$PWD/.gpu/s36$b/b/libmoefuse_c.so PYTHONPATH=python timeout 200 \
    python3 bench/layer_gaps.py --preset gpt-oss-120b --mode fused --kernels \
    > "$R/kern_gpt-oss-120b_$b.txt" 2>&1
  grep -E "step|segment_sums|wgrad_kernel" "$R/kern_gpt-oss-120b_$b.txt" | cut -c1-100
done
BENCH_ARGS="--mode fused --no-torch --expert-grads bf16" OUT=$R scripts/ab_bench.sh layer \
  "gpt-oss-120b" 2 m=.gpu/s36m/b w=.gpu/s36w/b > "$R/ab_layer_bf16.txt" 2>&1
grep -E "==|graph" "$R/ab_layer_bf16.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 39, call 1: p = the gather FC1 (qwen3's and deepseek's layer FC1) in 2-CTA clusters:
# an m-pair's CTAs multicast one half of the weight tile each (cp.async still gathers each CTA's
# own rows), so a CTA reads 32 KB a K block from L2 instead of 48. m = main 7b63a02.
# The TMA forward in pairs (run 18): qwen3 fused FC1 0.971x, deepseek 1.003x.
# Predictions: tests pass, sanitizers 0; gemm "gather-fused" rows p/m qwen3 0.96-0.99, deepseek
# 0.98-1.01; every other row 0.98-1.02 (same kernels); layer fused qwen3 fwd 0.98-0.995, fwd+bwd
# 0.99-1.00, deepseek 0.99-1.01.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s39p', '.gpu/s39m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemm.*:LayerExpertGrads.*:LayerGraph.*:LayerDeterminism.*:LayerLossGrads.*:LayerNonFinite.*:Layer/LayerReference.*:Layer/LayerAccumulate.*' TEST_TIMEOUT=300 \
  BUILD=.gpu/s39p/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
F='GroupedGemm.GatherClusterPairsAndPhantoms:GroupedGemm.OneKBlockTilesOnOneCta'
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool .gpu/s39p/b/moefuse_gpu_tests --gtest_filter="$F" \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm "qwen3-30b-a3b deepseek-v3" 2 \
  m=.gpu/s39m/b p=.gpu/s39p/b > "$R/ab_gemm.txt" 2>&1
grep -E "==|gather|fused" "$R/ab_gemm.txt" | head -40
BENCH_ARGS="--mode fused --no-torch" OUT=$R scripts/ab_bench.sh layer \
  "qwen3-30b-a3b deepseek-v3" 3 m=.gpu/s39m/b p=.gpu/s39p/b > "$R/ab_layer.txt" 2>&1
grep -E "==|graph|fc1" "$R/ab_layer.txt" | head -30
sed -n '/clocks while/,$p' "$R/ab_layer.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

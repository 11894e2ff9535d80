#!/usr/bin/env bash
# Session 39, call 5: h2 = f (main e4e4a67) + tiles of at most 64 rows split by columns between
# the consumer warpgroups in the clustered 256-wide forward kernel only (every FC2 but gpt-oss's,
# mixtral's and deepseek's FC1; in clusters such tiles run as n-pairs, both CTAs split). Call 3
# split them everywhere: qwen3 FC2 0.949x in gemm and the qwen3 layer's graph forward 0.974x, but
# gpt-oss (192-wide, one CTA a tile) 1.02-1.08x. The 192-wide kernel's SASS is f's but for
# register choices (same count).
# Predictions: tests pass, sanitizers 0; fused FC2 h2/f qwen3 0.95-0.99, deepseek and mixtral
# 0.99-1.01; layer qwen3 fwd 0.97-0.995, fwd+bwd 0.99-1.00, deepseek 0.99-1.01.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s39h2', '.gpu/s39f'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemm.*:GroupedGemmFp8.*:LayerGraph.*:LayerDeterminism.*:Layer/LayerReference.*' \
  TEST_TIMEOUT=200 BUILD=.gpu/s39h2/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
F='GroupedGemm.HalfColumnTiles:GroupedGemm.ClusterPairsAndPhantoms'
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool .gpu/s39h2/b/moefuse_gpu_tests --gtest_filter="$F" \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool h2: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--mode fused --no-torch" OUT=$R timeout 200 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b" 4 f=.gpu/s39f/b h2=.gpu/s39h2/b > "$R/ab_layer.txt" 2>&1
grep -E "graph|fused fc. fwd" "$R/ab_layer.txt" | head -30
BENCH_ARGS="--no-torch" OUT=$R timeout 150 scripts/ab_bench.sh gemm \
  "qwen3-30b-a3b deepseek-v3" 2 f=.gpu/s39f/b h2=.gpu/s39h2/b > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse (fused|unfused) " "$R/ab_gemm.txt" | head -40
BENCH_ARGS="--mode fused --no-torch" OUT=$R timeout 100 scripts/ab_bench.sh layer \
  "deepseek-v3" 2 f=.gpu/s39f/b h2=.gpu/s39h2/b > "$R/ab_layer_ds.txt" 2>&1
grep -E "graph|fused fc. fwd" "$R/ab_layer_ds.txt" | head
sed -n '/clocks while/,$p' "$R/ab_layer.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 40, call 3: f = wip/fp8-wide 1e95007, the final code (the FP8 forward's bf16 output in
# 128 x 192 tiles; read_tile copying the slot in lane rank). The whole GPU suite, CPU and Python
# tests; compute-sanitizer's racecheck, memcheck and synccheck over the FP8 forward's cluster
# tests; the FP8 layer (all presets, beside bf16) and gemm-fp8 tables; the FP8 layer on qwen3
# and gpt-oss in three interleaved rounds against call 1's binary at its default width 128 (= main
# c7b3d44's FP8 code).
# Predictions: GPU 196 passed / 2 skipped (two new FP8 cases in existing tests), CPU 279 + 1
# skipped, Python 132 / 8; sanitizers 0; FP8 layer fwd 0.95 / 0.96, fwd+bwd 0.99-1.01 / 0.98
# against 128 (qwen3 / gpt-oss); DeepGEMM 4x8192 4096x7168 1050-1100 TFLOP/s.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in s40a s40c; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
B=.gpu/s40c/b/moefuse-bench
TEST_TIMEOUT=300 BUILD=.gpu/s40c/b OUT=$R scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
F='GroupedGemmFp8.ClusterPairsOddBlocksAndPhantoms:GroupedGemmFp8.SeveralUnitsPerClusterWithPhantoms'
for tool in racecheck memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool .gpu/s40c/b/moefuse_gpu_tests --gtest_filter="$F" \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--mode fused --precision fp8 --no-torch" OUT=$R timeout 200 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b gpt-oss-120b" 3 m=.gpu/s40a/b f=.gpu/s40c/b > "$R/ab_layer.txt" 2>&1
grep -E "graph|fp8 fc2 |fp8 fc1_dgrad|clock|^[mf]:" "$R/ab_layer.txt" | head -30
timeout 100 $B layer --preset all --mode fused --precision fp8 --no-torch \
  --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
grep -E "\(graph\)|speedup" "$R/layer_fp8.txt"
timeout 100 $B gemm-fp8 --preset all --no-torch --json "$R/gemm_fp8.json" > "$R/gemm_fp8.txt" 2>&1
grep -E "fp8 grouped +[0-9]|dense" "$R/gemm_fp8.txt" | head -30
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 47, call 3, on F (main f2e1d71, c7b9276's code): the grouped-GEMM tables (issues 3 and
# 5, against cuBLAS and torch in one process), the FP8 layer with bf16 wgrads, the Python suite.
# Predictions: forward fraction of dense within sessions 32-39's range (FC1 fused 0.78-0.98 /
# 0.79-0.81 / 0.95 / 0.96); backward FC2 dgrad 0.54-0.58 / 0.52-0.55 / 0.85-0.88 / 0.93-0.96,
# dW1 0.66-0.70 / 0.68-0.71 / 0.90-0.93 / 0.84-0.87; FP8 with bf16 wgrads 1.11-1.15 / 1.15-1.19
# / 1.24-1.28 / 1.22-1.26× bf16; Python 135 passed, 12 skipped.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
[[ -d .gpu/s47/F ]] ||
  python3 -c "import tarfile; tarfile.open('.gpu/s47/F.tar.xz').extractall('.gpu/s47/F')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s47/F/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
timeout 150 $B gemm --preset all --json "$R/gemm.json" > "$R/gemm.txt" 2>&1
echo "gemm rc=$?"
grep -E "moefuse fused|dense" "$R/gemm.txt" | head -24
timeout 150 $B gemm-backward --preset all --json "$R/gemm_backward.json" \
  > "$R/gemm_backward.txt" 2>&1
echo "gemm-backward rc=$?"
grep -E "fc2 dgrad .*fused|fc1 dgrad +moefuse|dW. +moefuse  " "$R/gemm_backward.txt" | head -20
timeout 150 $B layer --preset all --mode fused --precision fp8 --fp8-wgrad bf16 --no-torch \
  --json "$R/layer_fp8_bf16wgrad.json" > "$R/layer_fp8_bf16wgrad.txt" 2>&1
echo "fp8 bf16-wgrad rc=$?"
grep -E "\(graph\)|x bf16" "$R/layer_fp8_bf16wgrad.txt" | head -20
BUILD=.gpu/s47/F/b OUT=$R/p timeout 120 scripts/gpu_check.sh python > "$R/python.log" 2>&1
grep -E "passed|failed" "$R/python.log" | tail -n 3
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

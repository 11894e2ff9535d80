#!/usr/bin/env bash
# Session 39, call 7: f = main e4e4a67, the final code: the forward and backward grouped-GEMM
# tables (issue 3's and issue 5's, against cuBLAS and torch in the same process) on it.
# Predictions (run 37/38's tables): forward fraction of dense FC1 fused qwen3 0.78-0.98, gpt-oss
# 0.79-0.81, mixtral ~0.95, deepseek ~0.96; backward fused FC2 dgrad 0.55-0.58 / 0.52-0.55 /
# 0.85-0.88 / 0.93-0.96, dW1 0.66-0.69 / 0.68-0.71 / 0.90-0.93 / 0.84-0.87.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s39f/bins.tar.xz').extractall('.gpu/s39f')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s39f/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
timeout 150 $B gemm --preset all --json "$R/gemm.json" > "$R/gemm.txt" 2>&1
grep -E "moefuse fused|dense" "$R/gemm.txt" | head -24
timeout 150 $B gemm-backward --preset all --json "$R/gemm_backward.json" \
  > "$R/gemm_backward.txt" 2>&1
grep -E "fc2 dgrad .*fused|fc1 dgrad +moefuse|dW. +moefuse  " "$R/gemm_backward.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

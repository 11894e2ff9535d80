#!/usr/bin/env bash
# Session 48, call 5. S = main 7c9cc40 (the final code; call 4 ran the whole GPU suite on this
# build: 202 passed, 2 skipped).
# 1. The Python suite on S. Prediction: 135 passed, 12 skipped (as session 47).
# 2. The README's grouped-GEMM tables on S: gemm and gemm-backward --preset all with cuBLAS and
#    torch. Prediction: deepseek's fused FC2 0.95-0.97 of dense (session 47: 0.936), FC1 0.95;
#    mixtral's dgrads 0.88-0.89 / 1.02-1.04; qwen3 and gpt-oss within session 47's +- 2 %.
# r.tgz is rewritten after each step, so a step cut by the budget keeps the ones before it.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
[[ -d .gpu/s48/S ]] ||
  python3 -c "import tarfile; tarfile.open('.gpu/s48/S.tar.xz').extractall('.gpu/s48/S')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s48/S/b/moefuse-bench
pack() { tar czf "$OUT/r.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
BUILD=.gpu/s48/S/b OUT=$R/p timeout 110 scripts/gpu_check.sh python > "$R/python.log" 2>&1
grep -E "passed|failed" "$R/python.log" | tail -n 3
pack
timeout 100 $B gemm --preset all --json "$R/gemm.json" > "$R/gemm.txt" 2>&1
echo "gemm rc=$?"
grep -E "moefuse fused|dense" "$R/gemm.txt" | head -24
pack
timeout 110 $B gemm-backward --preset all --json "$R/gemm_backward.json" \
  > "$R/gemm_backward.txt" 2>&1
echo "gemm-backward rc=$?"
grep -E "fc2 dgrad .*fused|fc1 dgrad +moefuse|dW. +moefuse  " "$R/gemm_backward.txt" | head -20
pack

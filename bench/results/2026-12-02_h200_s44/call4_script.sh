#!/usr/bin/env bash
# Session 44, call 4: why the FP8 k-grouped wgrad runs at the BF16 wgrad's speed (gemm-fp8,
# session 40: 0.97 / 1.04 / 1.13 / 1.17x the BF16 wgrad on qwen3 / gpt-oss / mixtral /
# deepseek). ncu on f (main's kernels), mixtral's dW2 (the least output-bound shape), the BF16
# wgrad beside the FP8 one. Model: a wgmma m64n128k32 (FP8, both operands from shared memory)
# reads 6 KiB per 64 tensor cycles (96 B/clk) and the TMA writes the stage at 64 B/clk at full
# FP8 rate: 160 B/clk against shared memory's 128, where the BF16 m64n256k16 needs 80 + 47.
# Prediction: the FP8 wgrad's shared-memory pipe the busiest unit (>= 85% of peak), tensor
# pipe < 60% active; the BF16 wgrad's tensor pipe > 75%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s44/f.tar.xz').extractall('.gpu/s44/f')"
export PATH=/usr/local/cuda/bin:$PATH
timeout 400 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
  --section WarpStateStats -k regex:'wgrad_kernel' -c 3 \
  .gpu/s44/f/b/moefuse-bench gemm-fp8 --preset mixtral-8x7b --warmup 0 --iters 1 \
  > "$R/ncu_wgrad.txt" 2>&1
echo "ncu rc=$?"
grep -E "wgrad_kernel|Duration|Throughput|Busy|Bandwidth|Pipe|Shared|Hit Rate|Stall|Issue" \
  "$R/ncu_wgrad.txt" | cut -c1-150 | head -90
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

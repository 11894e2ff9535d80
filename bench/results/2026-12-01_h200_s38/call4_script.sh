#!/usr/bin/env bash
# Session 38, call 4 (the budget's remainder): ncu of the final code's fused FC2 dgrad (narrow
# dGLU, qwen3), as run 37 call 3 profiled main's (934 µs, L2 83%, SM 59%). Prediction: 850-900 µs,
# L2 86-90% (the same bytes in less time), issue slots busier: the kernel nearer L2-bound.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s38f/bins.tar.xz').extractall('.gpu/s38f')"
export PATH=/usr/local/cuda/bin:$PATH
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
   --section SchedulerStats --section SourceCounters"
timeout 150 ncu $S --kernel-name regex:dgrad_kernel --launch-skip 1 --launch-count 1 \
  .gpu/s38f/b/moefuse-bench gemm-backward --preset qwen3-30b-a3b --warmup 0 --iters 1 \
  --no-torch > "$R/ncu_dgrad_qwen3_f.txt" 2>&1
tr '\r' '\n' < "$R/ncu_dgrad_qwen3_f.txt" | grep -E "dgrad_kernel<|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|SM Frequency|Issued Warp|No Eligible|excessive sectors" | cut -c1-120

#!/usr/bin/env bash
# Session 40, call 8 (the budget's remainder): where the 192-wide FP8 forward's warps stall at
# DeepGEMM's 4 x 8192 x 4096 x 7168 (g, 742d418), for the next step on the long-K mainloop (79%
# tensor-pipe activity in call 4). Prediction: the consumers' top stalls the wgmma wait
# (warpgroup_wait / wait on the turn barrier) and the full-barrier wait, not memory throttles.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s40f/bins.tar.xz').extractall('.gpu/s40f')"
export PATH=/usr/local/cuda/bin:$PATH
timeout 150 ncu --section WarpStateStats --section SourceCounters --print-details all \
  --kernel-name regex:grouped_gemm_fp8_kernel --launch-skip 0 --launch-count 1 \
  .gpu/s40f/b/moefuse-bench gemm-fp8 --preset qwen3-30b-a3b --warmup 0 --iters 1 --no-torch \
  > "$R/ncu_fp8_stalls_g.txt" 2>&1
echo "rc $?"
tr '\r' '\n' < "$R/ncu_fp8_stalls_g.txt" | grep -iE "stall|Warp Cycles|Duration" | cut -c1-140 | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

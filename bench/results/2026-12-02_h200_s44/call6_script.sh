#!/usr/bin/env bash
# Session 44, call 6: where the FP8 wgrad's consumers wait (call 4: tensor pipe 46% busy; call 5:
# overlapping a warpgroup's own promotion with its next wgmmas made it slower). ncu on f, one
# launch of the FP8 wgrad on mixtral's dW2: warp states, the instruction mix and the sampled
# stall locations. Prediction: the consumers' top stall is the wgmma wait (the group's
# `wait_group 0`), then the full-barrier wait (the stage not yet loaded: producer-bound).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s44/f.tar.xz').extractall('.gpu/s44/f')"
export PATH=/usr/local/cuda/bin:$PATH
timeout 300 ncu --clock-control none --section WarpStateStats --section SourceCounters \
  --section InstructionStats --section SchedulerStats --print-details all \
  -k regex:'fp8_wgrad_kernel' -c 1 \
  .gpu/s44/f/b/moefuse-bench gemm-fp8 --preset mixtral-8x7b --warmup 0 --iters 1 \
  > "$R/ncu_fp8_wgrad_stalls.txt" 2>&1
echo "ncu rc=$?"
grep -v "^\s*$" "$R/ncu_fp8_wgrad_stalls.txt" | grep -E "Stall|stall|Warp Cycles|Eligible|Issued|Executed|Location|0x|Active Warps|No Eligible" | cut -c1-150 | head -70
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

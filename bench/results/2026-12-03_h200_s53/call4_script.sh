#!/usr/bin/env bash
# Session 53, call 4 (main e3ea4fa's moefuse-bench, as call 2): what holds the FP8 wgrad, the FP8
# layer's bottleneck (run 48's table: its wgrad stages no faster than bf16's). Run 44-45 read
# the kernel's 46 % tensor pipe as a shared-memory port at its limit (wgmma operand reads + TMA
# writes + the scale loads, ~190 B a tensor cycle against 128) rather than idle tensor cores, an
# estimate never measured. ncu of one launch each, mixtral's dW2 (4096 rows an expert) and
# qwen3's (1024): FP8 wgrad and, for comparison, the BF16 wgrad on the same problem: speed of
# light, shared-memory wavefronts and pipe utilisation, warp stall reasons.
# Run 44 call 6 (before run 45 moved the scale loads from LD.E to LDS) had the stalls on the
# long scoreboard (those loads), wait and barrier, MIO throttle ~0. Prediction: if shared memory
# bounds it now, its warps stall on MIO throttle / short scoreboard and the shared pipe is >= 80 %
# busy; if not, on wait (the wgmma's), barrier and selected, the pipe well under 80 %.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/main.tar.xz').extractall('$S/m')"
B=$S/m/M/b
export PATH=/usr/local/cuda/bin:$PATH
sections="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis"
sections+=" --section ComputeWorkloadAnalysis --section SchedulerStats --print-details all"
for preset in mixtral-8x7b qwen3-30b-a3b; do
  for k in fp8_wgrad_kernel regex:^wgrad_kernel; do
    name=${k#regex:^}
    timeout 200 ncu --clock-control none $sections -k "$k" --launch-skip 1 -c 1 \
      $B/moefuse-bench gemm-fp8 --preset $preset --no-torch --warmup 1 --iters 2 \
      > "$R/ncu_${preset}_${name}.txt" 2>&1
    echo "$preset $name rc $?"
    grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall [A-Z]|highest-utilized|Shared .*Way|Wavefronts Shared" \
      "$R/ncu_${preset}_${name}.txt" | grep -v " 0\.0[0-4]$\| 0$" | cut -c1-120 | head -30
    pack
  done
done

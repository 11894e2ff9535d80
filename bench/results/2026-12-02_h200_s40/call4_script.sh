#!/usr/bin/env bash
# Session 40, call 4 (the budget's remainder): ncu of the FP8 forward GEMM at DeepGEMM's
# 4 x 8192 x 4096 x 7168 (bf16 output), 128-wide (m: call 1's binary at its default width) and
# 192-wide (f: the final code), to find what bounds the long-K mainloop now that the wider tile
# (less shared-memory traffic per flop) measured no faster there.
# Prediction: shared-memory (L1 data bank) utilisation below 80% in both, lower at 192; tensor
# (GMMA) pipe active 70-80% of the base clock's cycles in both; the consumers' top stall the wait
# on their own wgmma.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in s40a s40c; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
   --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats"
M="sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second"
for pair in m:s40a f:s40c; do
  l=${pair%%:*} d=${pair#*:}
  args=(--kernel-name regex:grouped_gemm_fp8_kernel --launch-skip 0 --launch-count 1
        .gpu/$d/b/moefuse-bench gemm-fp8 --preset qwen3-30b-a3b --warmup 0 --iters 1 --no-torch)
  timeout 120 ncu $S "${args[@]}" > "$R/ncu_fp8_$l.txt" 2>&1
  timeout 90 ncu --metrics "$M" "${args[@]}" > "$R/ncu_fp8_metrics_$l.txt" 2>&1
  echo "== $l"
  tr '\r' '\n' < "$R/ncu_fp8_$l.txt" | grep -E "fp8_kernel<|Duration|SM Frequency|Compute \(SM\) Thr|Memory Throughput|L1/TEX Cache Thr|L2 Cache Thr|Issue Slots Busy|Issued Warp|No Eligible|Shared Memory|Warp Cycles Per Issued" | cut -c1-130 | head -20
  tr '\r' '\n' < "$R/ncu_fp8_metrics_$l.txt" | grep -E "sm__|l1tex__|ERR|rror" | cut -c1-130
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

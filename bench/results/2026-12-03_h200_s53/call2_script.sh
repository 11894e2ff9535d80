#!/usr/bin/env bash
# Session 53, call 2 (main e3ea4fa, built here; .gpu/s53/main.tar.xz). What bounds gpt-oss's fp32
# wgrads, and session 52's host-side changes run once on a GPU.
# 1. HBM bandwidth by torch (8 GiB fp32, event-timed, median of 20 after 5): write only (fill_),
#    read only (sum), copy. Prediction: copy ~4.0 TB/s (read + write counted), read ~4.3, write
#    2.5-4.0.
# 2. ncu of gemm-backward gpt-oss's fp32 dW1 (the narrow 128 x 192 TMA wgrad, the first wgrad
#    launch after the warm-up one): DRAM read / write bytes and throughput, L2 throughput, tensor
#    pipe. Prediction: ~8.5 GB written at 1.8-2.0 TB/s, DRAM 40-50 % of peak, L2 ~60 %: not at a
#    bandwidth wall, so the tile's latency (the hand-off) sets its pace.
# 3. gemm-fp8 qwen3 with torch's FP8 rows (session 52's final host code: the torch row labels,
#    the one-message-per-torch-run path). Prediction: runs, ours ~890 / cuBLAS blockwise ~1090.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/main.tar.xz').extractall('$S/m')"
B=$S/m/M/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
timeout 90 python3 bench/hbm_bandwidth.py --gib 8 > "$R/hbm_bandwidth.txt" 2>&1
cat "$R/hbm_bandwidth.txt"
pack
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct
timeout 200 ncu --clock-control none --metrics "$metrics" -k regex:wgrad_kernel --launch-skip 1 -c 2 \
  --csv $B/moefuse-bench gemm-backward --preset gpt-oss-120b --no-torch --warmup 1 --iters 2 \
  > "$R/ncu_wgrad_gpt_oss.csv" 2> "$R/ncu_wgrad_gpt_oss.err"
echo "ncu rc $?"
grep -E '"(gpu__time|dram__|lts__|sm__)' "$R/ncu_wgrad_gpt_oss.csv" |
  awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | cut -c1-160 | head -20
pack
timeout 200 $B/moefuse-bench gemm-fp8 --preset qwen3-30b-a3b --json "$R/gemm_fp8_qwen3.json" \
  > "$R/gemm_fp8_qwen3.txt" 2>&1
echo "gemm-fp8 rc $?"
grep -vE "^\s*$" "$R/gemm_fp8_qwen3.txt" | tail -n 25
pack

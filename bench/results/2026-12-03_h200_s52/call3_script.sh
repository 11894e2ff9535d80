#!/usr/bin/env bash
# Session 52, call 3: ncu on F (main 2f8ebe9), to find what bounds two things left short.
# 1. The column-wise quantisers at gpt-oss's shape [65536, 2880] (x [16384, 2880], k = 4) and
#    qwen3's d_pre shape [131072, 1536] (x [16384, 1536], k = 8): plain, row+column, gather
#    (launches 0-2, 3-5, 6-8 of colwise_quantize_kernel at --warmup 1 --iters 2), DRAM bytes and
#    throughput, L2 hit rate. Prediction: the gather at gpt-oss's shape reads ~4x x's 94 MB from
#    DRAM (x does not fit in L2, and its 256-byte row pieces are read in random order) at a lower
#    DRAM throughput than the plain pass; at qwen3's, x (48 MB) mostly hits in L2.
# 2. The FP8 GEMM at K = 7168 and K = 2048 (DeepGEMM's 4 x 8192 shapes, launches 1 and 4 of
#    grouped_gemm_fp8_kernel in gemm-fp8 --preset mixtral-8x7b --warmup 1 --iters 2): speed of
#    light, warp states, scheduler. Prediction: at K = 2048 the tensor pipe is less busy and the
#    consumers wait longer on stage data (the pipeline fill at each tile).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/F.tar.xz').extractall('$S/u')"
B=$S/u/F/b
export PATH=/usr/local/cuda/bin:$PATH
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active
for shape in "65536 2880 128 4" "131072 1536 128 8"; do
  read -r m k e t <<< "$shape"
  timeout 150 ncu --clock-control none --metrics "$metrics" -k regex:colwise_quantize -c 9 --csv \
    $B/moefuse-bench quant --m $m --k $k --experts $e --topk $t --warmup 1 --iters 2 \
    > "$R/ncu_quant_${m}x${k}.csv" 2> "$R/ncu_quant_${m}x${k}.err"
  echo "quant $m x $k rc $?"
  grep -E '"(gpu__time|dram__bytes_read|dram__throughput|lts__t_sector_hit)' \
    "$R/ncu_quant_${m}x${k}.csv" | awk -F'","' '{print $1" | "$(NF-2)" | "$NF}' | cut -c1-150 | head -40
  pack
done
timeout 240 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis -k regex:grouped_gemm_fp8_kernel \
  --launch-skip 1 -c 4 $B/moefuse-bench gemm-fp8 --preset mixtral-8x7b --no-torch --warmup 1 \
  --iters 2 > "$R/ncu_fp8_gemm.txt" 2>&1
echo "fp8 gemm rc $?"
grep -E "grouped_gemm_fp8_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Warp|No Eligible|Stall" \
  "$R/ncu_fp8_gemm.txt" | cut -c1-150 | head -60
pack

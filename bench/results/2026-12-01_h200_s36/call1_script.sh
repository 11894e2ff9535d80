#!/usr/bin/env bash
# Session 36, call 1: v = the copy permute issues its first load before the zeroing pass and each
# group's row_of loads before lane 0's wait for the previous stores (the wait and the loads'
# latency overlap); the bench's sweep adds 20 and 24 KiB stages (3 and 4 of gpt-oss's rows).
# m = main f4dbcdc. Predictions: Dispatch* tests pass; permute v/m time 0.98-0.995 on every
# preset (gpt-oss 0.853 -> ~0.86-0.87 of copy); 3-4 row stages within +-1% of 2.
# Row probe (m, gpt-oss routing, H 2560..3072): if the per-byte cost follows 512-byte units,
# 5120/5632/6144-byte rows reach ~0.87 and 5376/5760/5888 ~0.85.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s36v', '.gpu/s36m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='Dispatch*:*Permute*' TEST_TIMEOUT=300 BUILD=.gpu/s36v/b OUT=$R \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 6
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh dispatch \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 3 m=.gpu/s36m/b v=.gpu/s36v/b \
  > "$R/ab_dispatch.txt" 2>&1
grep -E "==| permute " "$R/ab_dispatch.txt" | head -60
for r in 1 2; do
  for h in 2560 2688 2816 2880 2944 3072; do
    .gpu/s36m/b/moefuse-bench dispatch --preset gpt-oss-120b --hidden $h --no-torch \
      --json "$R/probe_${h}_$r.json" > "$R/probe_${h}_$r.log" 2>&1
    echo "H $h r$r: $(grep -m2 " permute" "$R/probe_${h}_$r.log" | tr -s " " | head -c 300)"
  done
done
for h in 2816 2880; do
  timeout 120 ncu -k regex:permute_kernel --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_write.sum \
    .gpu/s36m/b/moefuse-bench dispatch --preset gpt-oss-120b --hidden $h --no-torch \
    > "$R/ncu_$h.txt" 2>&1
  grep -E "Duration|DRAM Throughput|dram__bytes|Memory Throughput|L2 Cache Throughput" "$R/ncu_$h.txt"
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

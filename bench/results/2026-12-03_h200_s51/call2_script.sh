#!/usr/bin/env bash
# Session 51, call 2 (debug). Call 1's sweep: E's dW2 (BF16 and FP8 kernels, both unchanged) ran
# ~1.10x A's at every pad, in both rounds, so buffer placement is not the cause. What is?
# 1. A and E with CUDA_MODULE_LOADING=EAGER (every module loaded at start: the code lands
#    elsewhere). Prediction: if the build's module layout matters, the gap moves; if the cp.async
#    quantiser's execution matters, E stays ~1.10x.
# 2. ncu, natural clocks and caches, of launches 50-69 of the wgrads (BF16 50-59, FP8 60-69, pad 0)
#    in A and E: clock, DRAM bytes, L2 hit rate. Prediction: if E runs at a lower SM clock with
#    equal bytes, power; if more DRAM bytes, the memory system.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
python3 -c "import tarfile; tarfile.open('.gpu/s51/pads.tar.xz').extractall('.gpu/s51/pads')"
export PATH=/usr/local/cuda/bin:$PATH
for b in A E; do
  CUDA_MODULE_LOADING=EAGER DEBUG_PAD_SWEEP=1 timeout 120 .gpu/s51/pads/$b/b/moefuse-bench \
    gemm-fp8 --preset gpt-oss-120b > "$R/eager_${b}.log" 2>&1
  echo "== $b eager"; grep DEBUG "$R/eager_${b}.log" | cut -c1-60
done
pack
m=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum
m=$m,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.max
m=$m,sm__inst_executed.sum,lts__t_sectors.sum
for b in A E; do
  DEBUG_PAD_SWEEP=1 timeout 150 ncu --clock-control none --cache-control none \
    -k regex:wgrad_kernel --launch-skip 50 --launch-count 20 --metrics "$m" --csv \
    .gpu/s51/pads/$b/b/moefuse-bench gemm-fp8 --preset gpt-oss-120b > "$R/ncu_${b}.csv" 2>&1
  echo "== ncu $b"
  python3 - "$R/ncu_${b}.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki, mi, vi, ii = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("ID")
by = collections.defaultdict(dict)
for r in rows[1:]:
    by[(r[ii], r[ki][:16])][r[mi]] = r[vi]
for (i, k), d in sorted(by.items(), key=lambda x: int(x[0][0])):
    print(i, k, " ".join(f"{m.split('__')[1][:22]}={v}" for m, v in sorted(d.items())))
PY
done
pack

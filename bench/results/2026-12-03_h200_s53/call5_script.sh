#!/usr/bin/env bash
# Session 53, call 5 (main e3ea4fa's moefuse-bench): where the FP8 wgrad's warps wait now, per
# SASS instruction. Call 4 had MIO throttle ~0 and the L1 / L2 at 67 %: shared memory does not
# bound it. ncu source counters, one launch, mixtral's dW2; scripts/ncu_hotspots.py over them.
# Prediction: the consumers' top stalls are the wgmma wait and the full-barrier wait, then the
# promotion's FMUL -> FFMA chain; the epilogue and producer warps' barrier waits fill the rest.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/main.tar.xz').extractall('$S/m')"
B=$S/m/M/b
export PATH=/usr/local/cuda/bin:$PATH
timeout 200 ncu --clock-control none --section WarpStateStats --section SourceCounters \
  -k fp8_wgrad_kernel --launch-skip 1 -c 1 -o "$R/ncu_fp8_wgrad" \
  $B/moefuse-bench gemm-fp8 --preset mixtral-8x7b --no-torch --warmup 1 --iters 2 \
  > "$R/ncu_fp8_wgrad.log" 2>&1
echo "ncu rc $?"
ncu -i "$R/ncu_fp8_wgrad.ncu-rep" --page source --csv --print-source sass \
  > "$R/ncu_fp8_wgrad_source.csv" 2> "$R/ncu_fp8_wgrad_source.err"
rm -f "$R/ncu_fp8_wgrad.ncu-rep"
python3 scripts/ncu_hotspots.py "$R/ncu_fp8_wgrad_source.csv" --top 25 > "$R/hotspots.txt" 2>&1
cat "$R/hotspots.txt" | cut -c1-170
xz -9 "$R/ncu_fp8_wgrad_source.csv"
pack

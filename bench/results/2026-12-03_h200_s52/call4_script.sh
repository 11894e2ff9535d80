#!/usr/bin/env bash
# Session 52, call 4: where the FP8 forward GEMM's warps wait at short K (F, main 2f8ebe9). ncu
# source counters (per-SASS stall samples) of grouped_gemm_fp8_kernel on DeepGEMM's 4 x 8192 x
# 4096 x 7168 (launch 1) and 4 x 8192 x 7168 x 2048 (launch 4), then of qwen3's FC2 (K = 768;
# gemm-fp8 --preset qwen3-30b-a3b, the FC2 problem's second launch).
# Call 3 had the tensor pipe 79 % busy at K = 7168 and 70 % at K = 2048: some cost per tile of
# about three K blocks. Prediction: at K = 2048 more of the consumers' samples fall outside the
# K loop (the tile hand-off: tile_empty's wait, staging, the tile slot and first full wait) and
# on the turn barriers at the tile boundary; at K = 768 more still.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/F.tar.xz').extractall('$S/u')"
B=$S/u/F/b
export PATH=/usr/local/cuda/bin:$PATH
prof() {  # name, launch to skip to, bench arguments...
  local name=$1 skip=$2
  shift 2
  timeout 150 ncu --clock-control none --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight -k regex:grouped_gemm_fp8_kernel --launch-skip "$skip" -c 1 \
    -o "$R/ncu_$name" $B/moefuse-bench gemm-fp8 --no-torch --warmup 1 --iters 2 "$@" \
    > "$R/ncu_$name.log" 2>&1
  echo "ncu $name rc=$?"
  ncu -i "$R/ncu_$name.ncu-rep" --page source --csv --print-source sass \
    > "$R/ncu_${name}_source.csv" 2> "$R/ncu_${name}_source.err"
  python3 scripts/ncu_hotspots.py "$R/ncu_${name}_source.csv" --top 25 > "$R/ncu_${name}_hot.txt"
  head -n 30 "$R/ncu_${name}_hot.txt" | cut -c1-160
  gzip -f "$R/ncu_${name}_source.csv"
  rm -f "$R/ncu_$name.ncu-rep"
  pack
}
prof k7168 1 --preset mixtral-8x7b
prof k2048 4 --preset mixtral-8x7b
# qwen3: DeepGEMM's problems take launches 0-11, qwen3's FC1 12-14 (and its E4M3 variants after
# the MXFP8 run: 15-20), FC2 21-23.
prof qwen3_fc2 22 --preset qwen3-30b-a3b

#!/usr/bin/env bash
# Session 51, call 5. One binary (dbg-cpasync-toggle ee46dbb = main f2e98b1 + the cp.async
# column-wise quantisers b44c030 + a DEBUG switch): P = DEBUG_PLAIN_LOADS set (main's plain-load
# quantisers, main's four CTAs an SM), C = cp.async. Call 4 showed the build, not the kernel run,
# set run 49's dW2 offset, so the quantiser is judged inside one binary.
# 1. quant P/C, two rounds. Prediction: row+column 0.83 -> 0.90 of copy, column-wise 0.91 -> 0.95,
#    the gather 0.83-0.89 -> 0.95-1.01.
# 2. layer --precision fp8 P/C, qwen3 and gpt-oss, three rounds. Prediction: qwen3's FP8 wgrad and
#    dgrad stages 2-4 % shorter, gpt-oss's within +-2 % (or up to 4 % slower FP8 dW2 if call 4's
#    residual is real), steps 0.98-1.00x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
python3 -c "import tarfile; tarfile.open('.gpu/s51/toggle.tar.xz').extractall('.gpu/s51/t')"
bin=$PWD/.gpu/s51/t/T/b/moefuse-bench
mkdir -p .gpu/s51/P .gpu/s51/C
printf '#!/bin/sh\nDEBUG_PLAIN_LOADS=1 exec %s "$@"\n' "$bin" > .gpu/s51/P/moefuse-bench
printf '#!/bin/sh\nexec %s "$@"\n' "$bin" > .gpu/s51/C/moefuse-bench
chmod +x .gpu/s51/P/moefuse-bench .gpu/s51/C/moefuse-bench
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
for round in 1 2; do
  order="P C"; [[ $round == 2 ]] && order="C P"
  for shape in "131072 1536 128 8" "65536 5760 128 4" "65536 2880 128 4"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      timeout 40 .gpu/s51/$b/moefuse-bench quant --m $m --k $k --experts $e --topk $t \
        --json "$f.json" > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(grep -E "128x1 fp8, grouped|one read" "$f.txt" |
        awk '{print $(NF-3), $NF}' | tr '\n' ' ')"
    done
  done
done
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 330 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 3 \
  P=.gpu/s51/P C=.gpu/s51/C > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_(wgrad|dgrad)|^[PC]:|noise" "$R/ab_layer_fp8.txt" | head -30
pack

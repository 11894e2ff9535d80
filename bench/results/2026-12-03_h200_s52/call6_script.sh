#!/usr/bin/env bash
# Session 52, call 6. Build H = wip/gather-halves 6d796a3 (main + a DEBUG switch: with
# MOEFUSE_DEBUG_LOAD_HALVES set the column-only quantisers (plain and gather) load their block in
# two batches of four 16-byte loads, each stored before the next, at 48 registers and five CTAs
# an SM: H; unset: main's eight loads in flight, four CTAs: P). One binary.
# Call 3: the gather at gpt-oss's shape runs DRAM at 61 % of peak (plain 72 %), latency-bound.
# 1. The FP8 wgrad and layer tests with the switch set: all pass (the codes are bit-exact).
# 2. quant P/H at [65536, 2880] and [131072, 1536], two rounds. Prediction: the gather 0.81 ->
#    0.84-0.88 of copy at gpt-oss's shape, the plain column-wise pass within +-3 %.
# 3. layer --precision fp8 P/H, qwen3 and gpt-oss, three rounds. Prediction: if a faster column
#    quantiser again slows the gpt-oss wgrads after it (run 51), fc2/fc1_wgrad 1.03-1.10x;
#    otherwise 0.98-1.00x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/H.tar.xz').extractall('$S/u')"
B=$S/u/H/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
MOEFUSE_DEBUG_LOAD_HALVES=1 GTEST_FILTER='GroupedGemmFp8Wgrad.*:LayerFp8*:Layer/LayerFp8*' \
  TEST_TIMEOUT=120 BUILD=$B OUT=$R timeout 150 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests" "$R/check.log" | tail -n 4
pack
for round in 1 2; do
  order="P H"; [[ $round == 2 ]] && order="H P"
  for shape in "65536 2880 128 4" "131072 1536 128 8"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      if [[ $b == H ]]; then export MOEFUSE_DEBUG_LOAD_HALVES=1; else unset MOEFUSE_DEBUG_LOAD_HALVES; fi
      timeout 40 $B/moefuse-bench quant --m $m --k $k --experts $e --topk $t --json "$f.json" \
        > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(sed 's/.*\x1b\[K//' "$f.txt" | grep -E "wgrad operand\)|gathered from" |
        awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
unset MOEFUSE_DEBUG_LOAD_HALVES
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 200 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 3 P=$B H=$B:MOEFUSE_DEBUG_LOAD_HALVES=1 \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc[12]_wgrad|fp8 .*\(graph\)|^[PH]:|noise" "$R/ab_layer_fp8.txt" | head -20
pack

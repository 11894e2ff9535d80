#!/usr/bin/env bash
# Session 52, call 7. Build D = wip/gather-halves c51c34a, one binary, three ways for the
# column-only quantisers (plain and gather): P = main's (eight loads in flight, source rows from
# a CTA table after a barrier, four CTAs an SM); H = MOEFUSE_DEBUG_LOAD_HALVES (two batches of
# four, five CTAs: call 6); D = MOEFUSE_DEBUG_DIRECT (H, and each thread loads its own 8 source
# indices, all in flight, with no table and no barrier between them and the data loads).
# 1. The FP8 wgrad and layer tests with D: all pass (the codes are bit-exact).
# 2. quant P/H/D at [65536, 2880] and [131072, 1536], two rounds. Prediction: the gather at
#    gpt-oss's shape P 0.815, H 0.835, D 0.84-0.87; the plain pass D within 1 % of P.
# 3. layer --precision fp8 P/D, qwen3 and gpt-oss, three rounds: wgrad stages 0.98-1.01x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/D.tar.xz').extractall('$S/u')"
B=$S/u/D/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
MOEFUSE_DEBUG_DIRECT=1 GTEST_FILTER='GroupedGemmFp8Wgrad.*:LayerFp8*:Layer/LayerFp8*' \
  TEST_TIMEOUT=120 BUILD=$B OUT=$R timeout 150 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests" "$R/check.log" | tail -n 4
pack
for round in 1 2; do
  order="P H D"; [[ $round == 2 ]] && order="D H P"
  for shape in "65536 2880 128 4" "131072 1536 128 8"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      unset MOEFUSE_DEBUG_LOAD_HALVES MOEFUSE_DEBUG_DIRECT
      [[ $b == H ]] && export MOEFUSE_DEBUG_LOAD_HALVES=1
      [[ $b == D ]] && export MOEFUSE_DEBUG_DIRECT=1
      timeout 40 $B/moefuse-bench quant --m $m --k $k --experts $e --topk $t --json "$f.json" \
        > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(sed 's/.*\x1b\[K//' "$f.txt" | grep -E "wgrad operand\)|gathered from" |
        awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
unset MOEFUSE_DEBUG_LOAD_HALVES MOEFUSE_DEBUG_DIRECT
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 200 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 3 P=$B D=$B:MOEFUSE_DEBUG_DIRECT=1 \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc[12]_(wgrad|dgrad)|fp8 .*\(graph\)|^[PD]:|noise" "$R/ab_layer_fp8.txt" | head -20
pack

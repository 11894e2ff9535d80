#!/usr/bin/env bash
# Session 52, call 8. Builds: A = wip/gather-batches-ab 439c71f (call 6's binary plus
# MOEFUSE_DEBUG_BATCHES4: the column-only quantisers' loads in four batches of two at 37
# registers and six CTAs an SM: B4; unset: main's, P); G = wip/gather-batches 54d343b (the
# candidate: only the gather form in batches of two at six CTAs).
# 1. G: the whole GPU suite: 202 passed, 2 skipped.
# 2. quant P / B4 (A) and G, two rounds, [65536, 2880] and [131072, 1536]. Prediction: the
#    gather 0.815 (P) -> 0.84-0.86 (B4, G alike); G's plain pass as P's.
# 3. layer --precision fp8 P/B4 (A), qwen3 and gpt-oss, two rounds: wgrad stages 0.98-1.01x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/G.tar.xz').extractall('$S/u')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=100 BUILD=$S/u/G/b OUT=$R timeout 130 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 4
pack
for round in 1 2; do
  order="P B4 G"; [[ $round == 2 ]] && order="G B4 P"
  for shape in "65536 2880 128 4" "131072 1536 128 8"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      unset MOEFUSE_DEBUG_BATCHES4
      bin=$S/u/A/b/moefuse-bench
      [[ $b == B4 ]] && export MOEFUSE_DEBUG_BATCHES4=1
      [[ $b == G ]] && bin=$S/u/G/b/moefuse-bench
      timeout 40 $bin quant --m $m --k $k --experts $e --topk $t --json "$f.json" > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(sed 's/.*\x1b\[K//' "$f.txt" | grep -E "wgrad operand\)|gathered from" |
        awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
unset MOEFUSE_DEBUG_BATCHES4
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 120 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 P=$S/u/A/b B4=$S/u/A/b:MOEFUSE_DEBUG_BATCHES4=1 \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc[12]_wgrad|fp8 .*\(graph\)|^(P|B4):" "$R/ab_layer_fp8.txt" | head -12
pack

#!/usr/bin/env bash
# Session 49, call 1. A = main fa29750; B = wip/colwise-persistent 9518483: the column-wise FP8
# quantisers (plain, gather, row+column) as a persistent grid of 3 CTAs an SM, each loading its
# next 128 x 128 block by cp.async into a second buffer while it quantises the current one, the
# group scan once a CTA instead of once a block.
# 1. The whole GPU suite on B. Prediction: 202 passed, 2 skipped.
# 2. quant A/B at qwen3's d_pre [131072, 1536] and gpt-oss's [65536, 5760], two rounds.
#    Prediction: row+column 0.86-0.90 of copy (A 0.83: 239 -> 220-230 us at qwen3's), column-wise
#    0.92-0.95 (A 0.91); the other kernels unchanged.
# 3. layer --precision fp8 A/B, all presets, two rounds. Prediction: fc2_wgrad / fc1_wgrad stages
#    (which hold the column-wise passes) 20-60 us shorter on qwen3, 50-150 on the others; the
#    steps 0.99-1.00x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
for d in A B; do
  [[ -d .gpu/s49/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s49/$d.tar.xz').extractall('.gpu/s49/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s49/B/b OUT=$R timeout 170 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
pack
for round in 1 2; do
  order="A B"; [[ $round == 2 ]] && order="B A"
  for shape in "131072 1536 128 8" "65536 5760 128 4"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      timeout 40 .gpu/s49/$b/b/moefuse-bench quant --m $m --k $k --experts $e --topk $t \
        --json "$f.json" > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(grep -E "128x1 fp8, grouped|one read" "$f.txt" |
        awk '{print $(NF-3), $NF}' | tr '\n' ' ')"
    done
  done
done
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 200 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 2 \
  A=.gpu/s49/A/b B=.gpu/s49/B/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_wgrad|^[AB]:" "$R/ab_layer_fp8.txt" | head -40
pack

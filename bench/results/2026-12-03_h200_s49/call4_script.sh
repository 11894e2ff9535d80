#!/usr/bin/env bash
# Session 49, call 4. A = main fa29750; E = wip/colwise-cp-async b44c030: the column-wise FP8
# quantisers (plain, gather, row+column) loading their 128 x 128 block by cp.async straight into
# shared memory (no registers held for it: 39 / 47 instead of 64), five CTAs an SM instead of
# four; F = a1a2322, the same at four CTAs an SM (the cp.async alone).
# 1. The FP8 GPU tests on E. Prediction: all pass.
# 2. quant A/E/F at qwen3's d_pre [131072, 1536] and gpt-oss's [65536, 5760], two rounds.
#    Prediction: E column-wise 0.93-0.96 of copy (A 0.91), row+column 0.85-0.89 (A 0.83); F
#    within 0.01 of A.
# 3. layer --precision fp8 A/E, qwen3 and gpt-oss, two rounds. Prediction: wgrad stages 10-40 us
#    shorter, steps 0.99-1.00x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
for d in A E F; do
  [[ -d .gpu/s49/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s49/$d.tar.xz').extractall('.gpu/s49/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
GTEST_FILTER='*Fp8*:*FP8*:*fp8*:*Colwise*:*Rowcol*' TEST_TIMEOUT=200 BUILD=.gpu/s49/E/b OUT=$R \
  timeout 150 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
pack
for round in 1 2; do
  order="A E F"; [[ $round == 2 ]] && order="F E A"
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
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 150 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 2 \
  A=.gpu/s49/A/b E=.gpu/s49/E/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_(wgrad|dgrad)|^[AE]:" "$R/ab_layer_fp8.txt" | head -20
pack

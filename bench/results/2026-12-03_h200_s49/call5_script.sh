#!/usr/bin/env bash
# Session 49, call 5. A2 = main b9516ff (fa29750's kernels, the quant bench's new gather row);
# E2 = wip/colwise-cp-async 583cd46 (call 4's E plus that row). Call 4 had E's gpt-oss FP8
# fc1_wgrad stage +536 us (x gathered column-wise + dW1) and fc2_wgrad +190 us in both rounds,
# qwen3's 30-40 us shorter.
# quant at the layer's gathers: x / dy [16384, 2048] -> 131072 rows (qwen3) and [16384, 2880] ->
# 65536 rows (gpt-oss), two rounds. Prediction: if the gather form is the cause, E2's gather row
# several times A2's at gpt-oss's shape; else within 5%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
[[ -d .gpu/s49/AE2 ]] ||
  python3 -c "import tarfile; tarfile.open('.gpu/s49/AE2.tar.xz').extractall('.gpu/s49/AE2')"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
for round in 1 2; do
  order="A2 E2"; [[ $round == 2 ]] && order="E2 A2"
  for shape in "131072 2048 128 8" "65536 2880 128 4"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      timeout 40 .gpu/s49/AE2/$b/b/moefuse-bench quant --m $m --k $k --experts $e --topk $t \
        --json "$f.json" > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(grep -E "128x1 fp8, grouped|one read" "$f.txt" |
        awk '{print $(NF-3), $NF}' | tr '\n' ' ')"
    done
  done
done
pack

#!/usr/bin/env bash
# Session 52, call 1. Builds: T2 = wip/rowcol-cp-async (the candidate + a DEBUG switch:
# MOEFUSE_DEBUG_PLAIN_LOADS set = main's row+column quantiser, plain loads, four CTAs an SM: P;
# unset = cp.async, five CTAs an SM: C; one binary); L = wip/rowcol-cp-async-final (the candidate).
# 1. layer --precision fp8 P/C, qwen3 and gpt-oss, three rounds. Prediction: the fc1_dgrad stage
#    (the row+column pass + the FP8 FC1 dgrad) 0.98-1.00x, wgrads and steps 0.99-1.01x (run 51
#    call 5 had fc1_dgrad 0.993x / 1.001x with every quantiser switched).
# 2. quant P/C, two rounds. Prediction: row+column 0.83 -> 0.90 of copy at [131072, 1536] and
#    [65536, 5760]; the other rows equal.
# 3. L: the whole GPU suite (202 passed, 2 skipped), then racecheck + memcheck on the FP8 wgrad
#    test that runs the row+column quantiser (0 hazards, 0 errors).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/pk.tar.xz').extractall('$S/u')"
bin=$PWD/$S/u/T2/b/moefuse-bench
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
start=$SECONDS
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 340 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 3 \
  P=$S/u/T2/b:MOEFUSE_DEBUG_PLAIN_LOADS=1 C=$S/u/T2/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc1_dgrad|fp8 +fc[12]_wgrad|^[PC]:|noise" "$R/ab_layer_fp8.txt" | head -30
echo "layer A/B took $((SECONDS - start)) s"
pack
for round in 1 2; do
  order="P C"; [[ $round == 2 ]] && order="C P"
  for shape in "131072 1536 128 8" "65536 5760 128 4"; do
    read -r m k e t <<< "$shape"
    for b in $order; do
      f="$R/quant_${m}x${k}_${b}_$round"
      if [[ $b == P ]]; then export MOEFUSE_DEBUG_PLAIN_LOADS=1; else unset MOEFUSE_DEBUG_PLAIN_LOADS; fi
      timeout 40 "$bin" quant --m $m --k $k --experts $e --topk $t --json "$f.json" > "$f.txt" 2>&1
      echo "$b $round $m x $k: $(grep -E "one read" "$f.txt" | awk '{print $(NF-3), $NF}' | tr '\n' ' ')"
    done
  done
done
unset MOEFUSE_DEBUG_PLAIN_LOADS
pack
left=$((570 - SECONDS))
echo "suite with $left s left"
TEST_TIMEOUT=150 BUILD=$S/u/L/b OUT=$R timeout $((left > 60 ? left - 40 : 20)) \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack
SANITIZE_TOOLS="racecheck memcheck" SANITIZE_TIMEOUT=30 \
  SANITIZE_FILTER=GroupedGemmFp8Wgrad.RaggedExpertsWithEmptyOnesAndTails BUILD=$S/u/L/b OUT=$R \
  timeout $((590 - SECONDS > 5 ? 590 - SECONDS : 5)) scripts/gpu_check.sh sanitize > "$R/sanitize.log" 2>&1
tail -n 4 "$R/sanitize.log"
pack

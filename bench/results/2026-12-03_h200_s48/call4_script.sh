#!/usr/bin/env bash
# Session 48, call 4. D = wip/group16-dgrads 1ab314e (main bb2717d's code); S = main 7c9cc40:
# d_pre's row-wise and column-wise FP8 copies from one pass (quantize_fp8_rowcol_grouped; call 3
# measured its first form at 0.72 of copy), its row pass now one scale division a warp and a
# packed bf16 amax, without spills.
# 1. The whole GPU suite on S (the final code unless this call says otherwise). Prediction: 202
#    passed, 2 skipped; CPU 293 passed.
# 2. quant at qwen3's d_pre [131072, 1536] and gpt-oss's [65536, 5760]. Prediction: the
#    row+column pass 0.82-0.88 of copy (call 3: 0.72), ~240 us at qwen3's shape.
# 3. layer --precision fp8 A/B D vs S, all presets, two rounds. Prediction: fc1_dgrad + fc1_wgrad
#    stages 80-120 us shorter on qwen3, 150-250 on gpt-oss / mixtral; steps 0.98-1.00x.
# 4. The README's layer tables on S: fp32 with torch (both modes), bf16, fp8. Prediction: within
#    run 47's (qwen3 497-521 fwd / 497-505 step; deepseek 0.89-0.91 of dense; FP8 / bf16 steps
#    1.02-1.06 / 1.2 / 1.29-1.31 / 1.31-1.33).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in D S; do
  [[ -d .gpu/s48/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s48/$d.tar.xz').extractall('.gpu/s48/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s48/S/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s48/S/b OUT=$R timeout 150 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
for shape in "131072 1536 128 8" "65536 5760 128 4"; do
  read -r m k e t <<< "$shape"
  timeout 40 $B quant --m $m --k $k --experts $e --topk $t --json "$R/quant_${m}x$k.json" \
    > "$R/quant_${m}x$k.txt" 2>&1
  grep -E "128x1" "$R/quant_${m}x$k.txt"
done
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 170 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 2 \
  D=.gpu/s48/D/b S=.gpu/s48/S/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc1_(dgrad|wgrad)|^[DS]:" "$R/ab_layer_fp8.txt" | head -30
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$R/smi.csv" 2> /dev/null &
smi=$!
timeout 110 $B layer --preset all --mode both --expert-grads fp32 \
  --json "$R/layer_fp32.json" > "$R/layer_fp32.txt" 2>&1
echo "fp32 rc=$?"
timeout 40 $B layer --preset all --mode fused --expert-grads bf16 \
  --no-torch --json "$R/layer_bf16.json" > "$R/layer_bf16.txt" 2>&1
echo "bf16 rc=$?"
timeout 60 $B layer --preset all --mode fused --precision fp8 --no-torch \
  --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
echo "fp8 rc=$?"
kill $smi 2> /dev/null
python3 scripts/gpu_clocks.py "$R/smi.csv" 2>&1 | tail -3
grep -E "\(graph\)|torch unfused|speedup" "$R/layer_fp32.txt" | head -30
grep -E "\(graph\)" "$R/layer_bf16.txt" | head -12
grep -E "speedup" "$R/layer_fp8.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

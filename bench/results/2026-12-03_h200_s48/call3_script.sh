#!/usr/bin/env bash
# Session 48, call 3. D = wip/group16-dgrads 1ab314e (main bb2717d's code); R = main dfb24dd:
# d_pre's row-wise (FC1 dgrad) and column-wise (dW1) FP8 copies from one pass,
# quantize_fp8_rowcol_grouped, in the routed backward and the shared expert's (dy too there).
# 1. The whole GPU suite on R. Prediction: all pass (the new GroupedGemmFp8Wgrad checks: row-wise
#    codes and scales bit for bit the 1x128 reference's, other rows unwritten).
# 2. quant at qwen3's d_pre [131072, 1536], 128 experts. Prediction: the row+column pass 0.78-0.85
#    of copy (the column-wise pass alone ~0.85), ~230 us against 152 + 9 + 170 for the three.
# 3. layer --precision fp8 A/B D vs R, all presets, two rounds. Prediction: fc1_dgrad stage up by
#    ~60 us (qwen3) while fc1_wgrad drops ~170 us: steps qwen3 0.98x, gpt-oss / deepseek /
#    mixtral 0.985-0.995x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in D R; do
  [[ -d .gpu/s48/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s48/$d.tar.xz').extractall('.gpu/s48/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s48/R/b OUT=$R timeout 200 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
timeout 60 .gpu/s48/R/b/moefuse-bench quant --m 131072 --k 1536 --experts 128 --topk 8 \
  --json "$R/quant_qwen3_dpre.json" > "$R/quant_qwen3_dpre.txt" 2>&1
grep -E "1x128 fp8|128x1|ratio" "$R/quant_qwen3_dpre.txt"
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 240 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 2 \
  D=.gpu/s48/D/b R=.gpu/s48/R/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc1_(dgrad|wgrad)|^[DR]:" "$R/ab_layer_fp8.txt" | head -30
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

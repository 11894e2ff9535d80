#!/usr/bin/env bash
# Session 53, call 3. H = wip/wgrad-hybrid-drain (main + a DEBUG knob:
# MOEFUSE_DEBUG_DRAIN_REGISTER_ROWS=N, the BF16 TMA wgrad's bf16 and narrow fp32 tiles drained with
# their last N rows stored by the epilogue warps from registers while bulk copies take the rest;
# unset = main's bulk copies of every row). Call 2's ncu had gpt-oss's fp32 dW1 at DRAM 49 %, L2
# 64 %, tensor 61 %: nothing saturated, a 96 KiB tile drained at ~9 B a cycle an SM for ~7 K
# cycles of math, so the drain's rate is the bound; two paths out of the SM may add up.
# 1. The wgrad GPU tests with N = 32, 64, 128 (and unset, the whole suite at the end).
#    Prediction: all pass.
# 2. gemm-backward gpt-oss, N unset / 32 / 64 / 96 / 128, three rounds. Prediction: fp32 dW1 /
#    dW2 0.80-0.90x at 32-64, all-register (128) slower than the best split; bf16 out 0.90-0.97x.
# 3. layer gpt-oss + qwen3 (control: its 256-wide fp32 tiles keep their path; its bf16 tiles
#    take it), fp32 then bf16 expert gradients, N unset / 64 / 128, three rounds. Prediction:
#    gpt-oss fp32 wgrad stages 0.85-0.92x, step 0.95-0.97x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/hy.tar.xz').extractall('$S/h')"
B=$S/h/H/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
filter='GroupedGemmBackward.Wgrad*:GroupedGemmBackward.SeveralTilesPerCtaHandOff'
filter+=':GroupedGemmBackward.GraphReplay*:GroupedGemmBackward/GroupedGemmBackwardPreset.*'
filter+=':Layer/LayerReference.*'
for n in 32 64 128; do
  MOEFUSE_DEBUG_DRAIN_REGISTER_ROWS=$n GTEST_FILTER="$filter" TEST_TIMEOUT=120 BUILD=$B \
    OUT=$R/t$n timeout 100 scripts/gpu_check.sh tests > "$R/check_$n.log" 2>&1
  echo "N=$n: $(grep -E "GPU tests" "$R/check_$n.log")"
  grep -E "^(FAILED|TIMEOUT)" "$R/check_$n.log" | head -5
done
pack
k=MOEFUSE_DEBUG_DRAIN_REGISTER_ROWS
start=$SECONDS
BENCH_ARGS="--no-torch" OUT=$R/b timeout 120 scripts/ab_bench.sh gemm-backward "gpt-oss-120b" 3 \
  N0=$B N32=$B:$k=32 N64=$B:$k=64 N96=$B:$k=96 N128=$B:$k=128 > "$R/ab_gemm_backward.txt" 2>&1
grep -E "dW[12] moefuse|^N[0-9]+:|noise" "$R/ab_gemm_backward.txt" | head -16
echo "gemm-backward A/B took $((SECONDS - start)) s"
pack
for grads in fp32 bf16; do
  start=$SECONDS
  BENCH_ARGS="--mode fused --no-torch --expert-grads $grads" OUT=$R/l_$grads timeout 130 \
    scripts/ab_bench.sh layer "gpt-oss-120b qwen3-30b-a3b" 3 N0=$B N64=$B:$k=64 N128=$B:$k=128 \
    > "$R/ab_layer_$grads.txt" 2>&1
  grep -E "\(graph\)|fused +fc[12]_wgrad|^N[0-9]+:" "$R/ab_layer_$grads.txt" | head -16
  echo "layer $grads A/B took $((SECONDS - start)) s"
  pack
done
left=$((585 - SECONDS))
echo "suite with $left s left"
TEST_TIMEOUT=150 BUILD=$B OUT=$R timeout $((left > 30 ? left - 10 : 20)) \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack

#!/usr/bin/env bash
# Session 53, call 1. T = wip/wgrad-tensor-store (the BF16 TMA wgrad drains short experts' tiles
# (mean rows <= 768: gpt-oss) by TMA tensor stores of swizzled chunks, the FP8 wgrad's drain, now
# shared; MOEFUSE_DEBUG_WGRAD_ROW_COPIES set = main's per-row bulk copies: R; unset: S).
# 1. GPU tests of the wgrads (BF16, FP8) and the layer. Prediction: all pass.
# 2. gemm-backward R/S, gpt-oss and qwen3, three rounds. Prediction: gpt-oss dW1 / dW2 with fp32
#    D (narrow tiles) 0.85-0.92x, bf16 out 0.95-1.00x, dgrads and gather-fused dW1 1.00x; qwen3
#    unchanged (1024 rows an expert: row copies either way).
# 3. layer bf16 R/S, gpt-oss + qwen3, three rounds, fp32 expert gradients (the default), then
#    bf16 ones. Prediction: gpt-oss wgrad stages 0.88-0.93x, step 0.96-0.98x (fp32); 0.97-1.00x
#    (bf16); qwen3 1.00 +- 1.5 %.
# 4. The whole GPU suite on T.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/pk.tar.xz').extractall('$S/u')"
B=$S/u/T/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
GTEST_FILTER='*Wgrad*:GroupedGemmBackward.*:*LayerFp8*:Layer/Layer*' \
  TEST_TIMEOUT=120 BUILD=$B OUT=$R/t1 timeout 130 scripts/gpu_check.sh tests > "$R/check1.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check1.log" | tail -n 5
pack
start=$SECONDS
BENCH_ARGS="--no-torch" OUT=$R/b timeout 150 scripts/ab_bench.sh gemm-backward \
  "gpt-oss-120b qwen3-30b-a3b" 3 R=$B:MOEFUSE_DEBUG_WGRAD_ROW_COPIES=1 S=$B \
  > "$R/ab_gemm_backward.txt" 2>&1
grep -E "dW[12] moefuse|^[RS]:|noise" "$R/ab_gemm_backward.txt" | head -24
echo "gemm-backward A/B took $((SECONDS - start)) s"
pack
for grads in fp32 bf16; do
  start=$SECONDS
  BENCH_ARGS="--mode fused --no-torch --expert-grads $grads" OUT=$R/l_$grads timeout 150 \
    scripts/ab_bench.sh layer "gpt-oss-120b qwen3-30b-a3b" 3 \
    R=$B:MOEFUSE_DEBUG_WGRAD_ROW_COPIES=1 S=$B > "$R/ab_layer_$grads.txt" 2>&1
  grep -E "\(graph\)|fused +fc[12]_wgrad|^[RS]:" "$R/ab_layer_$grads.txt" | head -16
  echo "layer $grads A/B took $((SECONDS - start)) s"
  pack
done
left=$((585 - SECONDS))
echo "suite with $left s left"
TEST_TIMEOUT=150 BUILD=$B OUT=$R timeout $((left > 30 ? left - 10 : 20)) \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack

#!/usr/bin/env bash
# Session 49, call 3. A = main fa29750; D = wip/fp8-wgrad-bf16-two-buffers 19aed5e: the FP8
# wgrad of short experts (gpt-oss) with bf16 D in four stages beside two 32 KiB tile buffers
# (one tile's tensor stores in flight while the next is staged: call 2's idea without its
# two-stage mainloop); fp32 D and long experts as main. Plus the test data's ReGLU gates kept
# off the kink (f1c8332) and MOEFUSE_TEST_SEED.
# 1. The whole GPU suite on D. Prediction: 202 passed, 2 skipped.
# 2. Call 1's miss replayed (seed 15023377507951940243) on D. Prediction: passes (its b1 moved).
# 3. layer --precision fp8 --expert-grads bf16 A/D, gpt-oss, three rounds. Prediction, if one
#    32 KiB tile in flight bounds the drain: fc2_wgrad / fc1_wgrad stages 0.80-0.90x, step
#    0.93-0.96x; else 0.98-1.02x.
# 4. layer --precision fp8 (fp32 grads) A/D, gpt-oss, two rounds. Prediction: 1.00 +- 1.5%
#    (the same single-buffer tensor-store drain as main).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
for d in A D; do
  [[ -d .gpu/s49/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s49/$d.tar.xz').extractall('.gpu/s49/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s49/D/b OUT=$R timeout 170 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
MOEFUSE_TEST_SEED=15023377507951940243 timeout 60 .gpu/s49/D/b/moefuse_gpu_tests \
  --gtest_filter='Layer/LayerReference.ForwardAndBackwardMatchReference/reglu_*' \
  > "$R/replay.log" 2>&1
grep -E "rel-norm|^\[  (PASSED|FAILED)  \] [0-9]" "$R/replay.log" | head -6
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8 --expert-grads bf16" OUT=$R/lb timeout 150 \
  scripts/ab_bench.sh layer "gpt-oss-120b" 3 A=.gpu/s49/A/b D=.gpu/s49/D/b \
  > "$R/ab_layer_fp8_bf16grads.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_wgrad|^[AD]:" "$R/ab_layer_fp8_bf16grads.txt" | head -12
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/lf timeout 100 \
  scripts/ab_bench.sh layer "gpt-oss-120b" 2 A=.gpu/s49/A/b D=.gpu/s49/D/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_wgrad|^[AD]:" "$R/ab_layer_fp8.txt" | head -12
pack

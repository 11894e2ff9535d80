#!/usr/bin/env bash
# Session 49, call 2. A = main fa29750; C = wip/fp8-wgrad-two-buffers b304dc4: the FP8 wgrad of
# short experts (<= 6 groups of 128 rows an expert: gpt-oss) with two stages beside two tile
# buffers, the storing thread giving a buffer back only once the next tile's tensor stores are
# issued (two tiles' stores in flight); long experts unchanged. Plus MOEFUSE_TEST_SEED.
# 1. The whole GPU suite on C. Prediction: 202 passed, 2 skipped (call 1's reglu_unfused miss is
#    a draw: 1 in ~10 suites).
# 2. Call 1's miss replayed (seed 15023377507951940243), three times. Prediction: fails the same
#    way each time (d_w1 0.0202, d_b1 0.0206): deterministic, a ReGLU gate at its kink.
# 3. gemm-fp8 gpt-oss A/C, two rounds. Prediction: dW2 fp8 wgrad 2.1-2.3 ms -> 1.4-1.8 ms if the
#    drain was latency-bound with one tile in flight; 0.98-1.05x if not; the rest unchanged.
# 4. layer --precision fp8 A/C, gpt-oss and qwen3 (control: long experts), two rounds.
#    Prediction: gpt-oss fc2_wgrad 2.8 -> 2.1-2.4 ms, fc1_wgrad 4.9 -> 3.8-4.3 ms, step
#    0.88-0.93x; qwen3 1.00 +- 1.5%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
for d in A C; do
  [[ -d .gpu/s49/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s49/$d.tar.xz').extractall('.gpu/s49/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s49/C/b OUT=$R timeout 170 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
for i in 1 2 3; do
  MOEFUSE_TEST_SEED=15023377507951940243 timeout 60 .gpu/s49/C/b/moefuse_gpu_tests \
    --gtest_filter='Layer/LayerReference.ForwardAndBackwardMatchReference/reglu_*' \
    > "$R/replay_$i.log" 2>&1
  grep -E "rel-norm|^\[  (PASSED|FAILED)  \] [0-9]" "$R/replay_$i.log" | head -6
done
pack
OUT=$R/g8 timeout 230 scripts/ab_bench.sh gemm-fp8 "gpt-oss-120b" 2 A=.gpu/s49/A/b \
  C=.gpu/s49/C/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "dW2|^[AC]:" "$R/ab_gemm_fp8.txt" | head -12
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l8 timeout 150 \
  scripts/ab_bench.sh layer "gpt-oss-120b qwen3-30b-a3b" 2 \
  A=.gpu/s49/A/b C=.gpu/s49/C/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_wgrad|^[AC]:" "$R/ab_layer_fp8.txt" | head -20
pack

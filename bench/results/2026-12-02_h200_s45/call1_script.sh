#!/usr/bin/env bash
# Session 45, call 1. The FP8 wgrad's consumers: both warpgroups wait on the same full barrier,
# issue together, finish together and promote together (per-element scale products: 64 FMUL +
# 64 FFMA a thread and K block) while the tensor cores idle (run 44: tensor pipe 46%).
# A = main f4771c2; T = 5a84ab5 (issue turns, fp8/issue_turns.cuh, as the forward);
# S = 99078a8 (a K block's wgmma in two m64n64 column halves, the low half promoted while the
# high half runs; same registers); X = 50f97f6 (S + turns).
# 1. GroupedGemmFp8Wgrad.* on T, S, X. Prediction: all pass.
# 2. layer --precision fp8 (qwen3, gpt-oss), A/T/S/X, two rounds. Prediction: fp8 wgrad stages
#    T 0.75-0.90x, S 0.80-0.92x, X 0.70-0.85x; FP8 steps 0.93-0.97x; other stages 1.00 +- 2%.
# 3. gemm-fp8 mixtral, A/T/S/X, two rounds: the FP8 wgrad row as in 2; FC1/FC2 unchanged.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A T S X; do
  python3 -c "import tarfile; tarfile.open('.gpu/s45/$d.tar.xz').extractall('.gpu/s45/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
for d in T S X; do
  GTEST_FILTER='GroupedGemmFp8Wgrad.*' TEST_TIMEOUT=60 BUILD=.gpu/s45/$d/b OUT=$R/t$d \
    timeout 80 scripts/gpu_check.sh tests > "$R/check_$d.log" 2>&1
  echo "$d: $(grep -E "GPU tests" "$R/check_$d.log" | tail -n 1) $(grep -cE "^(FAILED|TIMEOUT)" "$R/check_$d.log")"
done
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 260 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 A=.gpu/s45/A/b T=.gpu/s45/T/b S=.gpu/s45/S/b \
  X=.gpu/s45/X/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[ATSX]:" "$R/ab_layer_fp8.txt" | head -14
BENCH_ARGS="--no-torch" OUT=$R/g timeout 200 scripts/ab_bench.sh gemm-fp8 "mixtral-8x7b" 2 \
  A=.gpu/s45/A/b T=.gpu/s45/T/b S=.gpu/s45/S/b X=.gpu/s45/X/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[ATSX]:" "$R/ab_gemm_fp8.txt" | head -14
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

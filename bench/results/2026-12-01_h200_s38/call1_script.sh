#!/usr/bin/env bash
# Session 38, call 1: p = the dGLU drain's row groups of 8 lanes over 192-wide tiles (4 rows side
# by side, 3 octets a lane) instead of 32 lanes with 8 idle: the narrow dGLU kernel's SASS
# 14304 -> 12264 instructions, the wide 14344 -> 14272, the FP8 dGLU +40/+48; no spill.
# m = main 313aec2. Run 37 read the dgrad's time following its drain's instruction count
# (+8% -> +10%, -8% -> -1.5%), the narrow kernel also near L2-bound (83%).
# Predictions: tests pass, memcheck 0; fused FC2 dgrad p/m qwen3 0.90-0.97, gpt-oss 0.92-0.98,
# mixtral and deepseek 0.99-1.01 (wide shape, one-octet lanes as before); every other row
# 0.98-1.02; layer fused qwen3 fwd+bwd 0.98-0.995, gpt-oss 0.98-0.995.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s38p', '.gpu/s38m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemmBackward*:*Fp8Dgrad*:*Mxfp8*:Layer*' TEST_TIMEOUT=300 \
  BUILD=.gpu/s38p/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|CPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
F='GroupedGemmBackward.Fc2DgradEveryActivationFusedAndUnfused:GroupedGemmBackward.Fc2DgradWideShapeForALongHidden:GroupedGemmBackward.Fc2DgradClusterGroupsAndPhantoms:*Fp8Dgrad*'
timeout 200 compute-sanitizer --tool memcheck .gpu/s38p/b/moefuse_gpu_tests --gtest_filter="$F" \
  > "$R/sanitize_memcheck.log" 2>&1
echo "memcheck: $(grep -E "ERROR SUMMARY|PASSED|FAILED" "$R/sanitize_memcheck.log" | tr '\n' ' ')"
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 2 m=.gpu/s38m/b p=.gpu/s38p/b \
  > "$R/ab_gemm_bwd.txt" 2>&1
grep -E "==|fc2 dgrad|fc1 dgrad" "$R/ab_gemm_bwd.txt" | head -30
BENCH_ARGS="--mode fused --no-torch" OUT=$R scripts/ab_bench.sh layer \
  "qwen3-30b-a3b gpt-oss-120b" 3 m=.gpu/s38m/b p=.gpu/s38p/b > "$R/ab_layer.txt" 2>&1
grep -E "==|graph|fc2_dgrad" "$R/ab_layer.txt" | head -30
sed -n '/clocks while/,$p' "$R/ab_gemm_bwd.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

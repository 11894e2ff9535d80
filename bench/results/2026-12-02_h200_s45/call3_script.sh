#!/usr/bin/env bash
# Session 45, call 3. Call 2's source counters: 21% of the FP8 wgrad consumers' stall samples
# in the wgmma issue, whose descriptors are 64-bit values rebuilt per stage from pointers (a
# dozen vector instructions and an R2UR before every QGMMA), where the forward's are low words
# in uniform registers (run 11). U = ccf61e7 (wip/fp8-wgrad-uniform-desc): the forward's
# scheme (stage and group count warp-uniform, slab a template argument): the issue is 4 QGMMA
# and 4 UIADD3.64 in the SASS. V = 2e42bb7 (wip/fp8-wgrad-uniform-lds): U + the scales by LDS
# from 32-bit addresses after the wgmma wait (they are generic LD.E). A = main.
# 1. GroupedGemmFp8Wgrad.*:LayerFp8* on U and V. Prediction: all pass.
# 2. layer --precision fp8 (qwen3, gpt-oss), gemm-fp8 mixtral, A / U / V, two rounds.
#    Prediction: fp8 wgrad stages U 0.90-0.97x, V 0.88-0.96x; FP8 steps 0.97-0.99x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A U V; do
  python3 -c "import tarfile; tarfile.open('.gpu/s45/$d.tar.xz').extractall('.gpu/s45/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
for d in U V; do
  GTEST_FILTER='GroupedGemmFp8Wgrad.*:LayerFp8*' TEST_TIMEOUT=100 BUILD=.gpu/s45/$d/b \
    OUT=$R/t$d timeout 120 scripts/gpu_check.sh tests > "$R/check_$d.log" 2>&1
  echo "$d: $(grep -E "GPU tests" "$R/check_$d.log" | tail -n 1)"
  grep -E "^(FAILED|TIMEOUT)" "$R/check_$d.log" | head -5
done
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 220 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 A=.gpu/s45/A/b U=.gpu/s45/U/b V=.gpu/s45/V/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[AUV]:" "$R/ab_layer_fp8.txt" | head -12
BENCH_ARGS="--no-torch" OUT=$R/g timeout 160 scripts/ab_bench.sh gemm-fp8 "mixtral-8x7b" 2 \
  A=.gpu/s45/A/b U=.gpu/s45/U/b V=.gpu/s45/V/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[AUV]:" "$R/ab_gemm_fp8.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

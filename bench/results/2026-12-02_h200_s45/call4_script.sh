#!/usr/bin/env bash
# Session 45, call 4. Call 3: V (uniform descriptors + the scales by LDS) 0.954-0.971x on the
# FP8 wgrad stages, U (uniform descriptors alone) 0.99-1.03x. W = 91e7692 (wip/fp8-wgrad-lds):
# main + the scales by LDS alone. A = main, V = 2e42bb7.
# 1. GroupedGemmFp8Wgrad.*:LayerFp8* on W. Prediction: all pass.
# 2. layer --precision fp8 (qwen3, gpt-oss, three rounds), gemm-fp8 mixtral (two rounds),
#    A / V / W. Prediction: fp8 wgrad stages V 0.95-0.98x, W 0.95-0.98x (the LDS is the gain);
#    FP8 steps 0.99x; other stages 1.00 +- 2%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A V W; do
  python3 -c "import tarfile; tarfile.open('.gpu/s45/$d.tar.xz').extractall('.gpu/s45/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='GroupedGemmFp8Wgrad.*:LayerFp8*' TEST_TIMEOUT=100 BUILD=.gpu/s45/W/b \
  OUT=$R/tW timeout 120 scripts/gpu_check.sh tests > "$R/check_W.log" 2>&1
echo "W: $(grep -E "GPU tests" "$R/check_W.log" | tail -n 1)"
grep -E "^(FAILED|TIMEOUT)" "$R/check_W.log" | head -5
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 300 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 3 A=.gpu/s45/A/b V=.gpu/s45/V/b W=.gpu/s45/W/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[AVW]:" "$R/ab_layer_fp8.txt" | head -12
BENCH_ARGS="--no-torch" OUT=$R/g timeout 160 scripts/ab_bench.sh gemm-fp8 "mixtral-8x7b" 2 \
  A=.gpu/s45/A/b V=.gpu/s45/V/b W=.gpu/s45/W/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[AVW]:" "$R/ab_gemm_fp8.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

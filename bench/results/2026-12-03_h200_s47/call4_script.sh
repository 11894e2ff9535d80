#!/usr/bin/env bash
# Session 47, call 4. F = main f2e1d71; G = wip/group16: raster groups of 16 m-blocks instead of
# 8 in every ragged GEMM (forward, dgrads, wgrads, FP8). With 8, an expert of 16 m-blocks
# (deepseek) or 32 (mixtral) streams its weight twice or four times through HBM (one group of 8
# m-blocks x all n-blocks a pass), with 16 once or twice, for twice the activation rows in flight;
# experts of at most 9 m-blocks (qwen3, gpt-oss) keep their order but for qwen3's ninth.
# (The wgrads alone with 16: 0.99-1.007x, run 30 call 8.)
# 1. GPU tests GroupedGemm* on G. Prediction: all pass (the order is not the arithmetic).
# 2. gemm and gemm-backward, deepseek / mixtral, F / G, two rounds; layer deepseek / qwen3, one.
#    Prediction: deepseek's and mixtral's forward GEMMs and dgrads 0.97-1.00x, wgrads 0.99-1.01x;
#    qwen3 1.00 +- 1 %.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in F G; do
  [[ -d .gpu/s47/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s47/$d.tar.xz').extractall('.gpu/s47/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='*GroupedGemm*' TEST_TIMEOUT=120 BUILD=.gpu/s47/G/b OUT=$R timeout 100 \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests" "$R/check.log" | tail -n 4
BENCH_ARGS="--no-torch" OUT=$R/g timeout 180 scripts/ab_bench.sh gemm \
  "deepseek-v3 mixtral-8x7b" 2 F=.gpu/s47/F/b G=.gpu/s47/G/b > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse fused|^[FG]:" "$R/ab_gemm.txt" | head -12
BENCH_ARGS="--no-torch" OUT=$R/b timeout 160 scripts/ab_bench.sh gemm-backward \
  "deepseek-v3 mixtral-8x7b" 2 F=.gpu/s47/F/b G=.gpu/s47/G/b > "$R/ab_gemm_backward.txt" 2>&1
grep -E "dgrad .*moefuse|dW. .*moefuse  |^[FG]:" "$R/ab_gemm_backward.txt" | head -14
BENCH_ARGS="--mode fused --no-torch" OUT=$R/l timeout 100 scripts/ab_bench.sh layer \
  "deepseek-v3 qwen3-30b-a3b" 1 F=.gpu/s47/F/b G=.gpu/s47/G/b > "$R/ab_layer.txt" 2>&1
grep -E "\(graph\)|^[FG]:" "$R/ab_layer.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

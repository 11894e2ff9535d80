#!/usr/bin/env bash
# Session 41, call 2: t = 7b9c42e (wip/fp8-turns-ab: wip/dgrad-permute 82dd145, the side permute
# with the T = 0 fix, plus MOEFUSE_FP8_NO_TURNS, which runs the bf16-output FP8 forward without
# the consumers' issue turns; default: turns, main's kernel); m = main 4658cc4.
# 1. The whole GPU suite on t. Prediction: 196 passed (194 + DgradPermute's two), 2 skipped.
# 2. gemm-fp8, turns on (tt) against off (tn), three rounds. Prediction: off 1.00-1.03x the time
#    at K = 7168 and on the presets (the turns hide one warpgroup's promotion under the other's
#    wgmma; ncu's 1.86 barrier stall cycles an issue are their price, smaller than that).
# 3. The bf16 layer, m against t, four rounds (call 1 read 0.994 / 1.005 / 0.997 / 0.998 of m's
#    step on qwen3 / gpt-oss / deepseek / mixtral in two). Prediction: 0.99-1.00, the fc1_dgrad
#    stage taking back most of what the permute's stage saved (the power cap: the copy's bytes
#    cost the same energy inside the GEMM).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m t; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
mkdir -p .gpu/tt && ln -sf ../t/b/moefuse-bench .gpu/tt/moefuse-bench
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/t/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests" "$R/check.log" | tail -n 6
BENCH_ARGS="--no-torch" OUT=$R timeout 200 scripts/ab_bench.sh gemm-fp8 \
  "qwen3-30b-a3b gpt-oss-120b" 3 tt=.gpu/tt tn=.gpu/tn > "$R/ab_gemm-fp8.txt" 2>&1
grep -E "deepgemm|fp8 (fc1|fc2)|^t[tn]:" "$R/ab_gemm-fp8.txt" | grep -v mxfp8 | head -30
BENCH_ARGS="--mode fused --no-torch" OUT=$R timeout 300 scripts/ab_bench.sh layer \
  "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 4 m=.gpu/m/b t=.gpu/t/b \
  > "$R/ab_layer.txt" 2>&1
grep -E "fc1_dgrad|fc1_wgrad|graph|^[mt]:" "$R/ab_layer.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 43, call 2. o = main 887ad7e + the wgrads' longest-first order in snake rounds
# (backward/wgrad_order.h; bf16 TMA wgrads and the FP8 wgrad), m = main 887ad7e (call 1).
# 1. GPU suite on o. Prediction: all pass (198 + 2 new: WgradLongestFirstOverMaxExperts,
#    LongestFirstOverMaxExperts), 2 skipped; sanitizers 0 findings on the wgrad tests.
# 2. Layer fused, fp32 expert grads, --routing zipf, m / o, three rounds (qwen3, gpt-oss,
#    deepseek). Prediction (model, tile cost = K blocks + 2): qwen3 fc1_wgrad / fc2_wgrad
#    0.85-0.93x the time, gpt-oss 0.95-0.99x, deepseek 0.97-0.99x; every other stage 1.00;
#    the step 0.96-0.98x (qwen3), 0.99 (others).
# 3. The same with --routing uniform, two rounds (qwen3, gpt-oss). Prediction: 1.00 +- 1%.
# 4. FP8 layer, zipf, qwen3, two rounds. Prediction: FP8 wgrad stages 0.85-0.93x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m o; do
  python3 -c "import tarfile; tarfile.open('.gpu/s43/$d.tar.xz').extractall('.gpu/s43/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/s43/o/b OUT=$R/t timeout 220 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
F='GroupedGemmBackward.WgradRaggedKZeroRowsAndAccumulate:GroupedGemmBackward.WgradLongestFirst*'
F="$F:GroupedGemmFp8Wgrad.LongestFirst*:GroupedGemmFp8Wgrad.SeveralTilesPerCta*"
SANITIZE_FILTER="$F" SANITIZE_TOOLS='memcheck racecheck synccheck' SANITIZE_JOBS=12 \
  SANITIZE_TIMEOUT=150 BUILD=.gpu/s43/o/b OUT=$R/s timeout 160 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head -20
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing zipf" OUT=$R/zipf timeout 200 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b deepseek-v3" 3 m=.gpu/s43/m/b \
  o=.gpu/s43/o/b > "$R/ab_layer_zipf.txt" 2>&1
grep -E "wgrad|graph|^[mo]:" "$R/ab_layer_zipf.txt" | head -24
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32" OUT=$R/uniform timeout 90 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 2 m=.gpu/s43/m/b o=.gpu/s43/o/b \
  > "$R/ab_layer_uniform.txt" 2>&1
grep -E "wgrad|graph|^[mo]:" "$R/ab_layer_uniform.txt" | head -16
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --precision fp8 --routing zipf" \
  OUT=$R/fp8 timeout 60 scripts/ab_bench.sh layer "qwen3-30b-a3b" 2 m=.gpu/s43/m/b \
  o=.gpu/s43/o/b > "$R/ab_layer_fp8_zipf.txt" 2>&1
grep -E "fp8 fc.*wgrad|fp8.*graph|^[mo]:" "$R/ab_layer_fp8_zipf.txt" | head -10
grep -h "routing zipf" $R/zipf/ab/*_m_1.log | head -3
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

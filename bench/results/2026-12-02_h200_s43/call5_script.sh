#!/usr/bin/env bash
# Session 43, call 5. x = wip/wgrad-longest-first final: the wgrads sort the experts longest first
# and walk snake rounds only where the load is skewed (the longest expert above twice the mean
# rows: backward/wgrad_order.h kSkewedLoad), else main's index order; m = main 887ad7e.
# 1. The wgrad, FP8 wgrad and layer GPU tests on x. Prediction: all pass.
# 2. Layer fused, fp32 expert grads, m / x, three rounds, uniform and zipf (qwen3, gpt-oss).
#    Prediction: uniform wgrad stages and steps 1.00 +- 1.5% (main's walk: call 4's 1.045-1.054
#    on dW2 gone); zipf as call 4's w: qwen3 fc2_wgrad 0.83, fc1_wgrad 0.97, step 0.977;
#    gpt-oss 0.94, 0.97, 0.985.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m x; do
  python3 -c "import tarfile; tarfile.open('.gpu/s43/$d.tar.xz').extractall('.gpu/s43/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='*Wgrad*:*Layer*:*Backward*' TEST_TIMEOUT=200 BUILD=.gpu/s43/x/b \
  OUT=$R/t timeout 200 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
for routing in uniform zipf; do
  BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing $routing" OUT=$R/$routing \
    timeout 120 scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 3 m=.gpu/s43/m/b \
    x=.gpu/s43/x/b > "$R/ab_layer_$routing.txt" 2>&1
  grep -E "wgrad|graph|^[mx]:" "$R/ab_layer_$routing.txt" | head -16
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

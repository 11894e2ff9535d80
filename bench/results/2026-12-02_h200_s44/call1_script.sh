#!/usr/bin/env bash
# Session 44, call 1. x = a1389e3 (segment sums in 256-row units, summed per expert in unit
# order); a = main's kernels (017f924's build; 44e8d8c changed a test comment only).
# 1. The whole GPU suite and the Python suite on x. Prediction: 201 passed (the new skewed-load
#    bias-sums test), 2 skipped; Python 133 passed, 12 skipped.
# 2. Layer fused, fp32 expert grads, gpt-oss (the one preset with expert biases), a / x,
#    Zipf three rounds: fc2_dgrad ~3.61 -> ~2.5 ms (0.70x), fc1_wgrad 6.5 -> ~5.3 (0.82x),
#    fc2_wgrad unchanged (its d_b2 is the dgrad's), step 23.9 -> ~21.5 (0.90x);
#    uniform two rounds: every stage and the step 1.00 +- 1.5%.
# 3. gemm-backward gpt-oss, a / x, uniform and Zipf, two rounds: the fused FC2 dgrad (+dp +d_b2)
#    row Zipf ~0.7x, uniform 1.00 +- 2%.
# 4. The Zipf layer table on x (all presets, torch beside): gpt-oss fwd+bwd ~450 TFLOP/s
#    (409 in session 43), the other presets as session 43's (no expert biases).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in a x; do
  python3 -c "import tarfile; tarfile.open('.gpu/s44/$d.tar.xz').extractall('.gpu/s44/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s44/x/b OUT=$R/t timeout 250 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
for routing in zipf uniform; do
  rounds=3; [[ $routing == uniform ]] && rounds=2
  BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing $routing" OUT=$R/$routing \
    timeout 100 scripts/ab_bench.sh layer "gpt-oss-120b" $rounds a=.gpu/s44/a/b \
    x=.gpu/s44/x/b > "$R/ab_layer_$routing.txt" 2>&1
  grep -E "dgrad|wgrad|graph|^[ax]:" "$R/ab_layer_$routing.txt" | head -16
done
for routing in zipf uniform; do
  BENCH_ARGS="--no-torch --routing $routing" OUT=$R/gb_$routing \
    timeout 60 scripts/ab_bench.sh gemm-backward "gpt-oss-120b" 2 a=.gpu/s44/a/b \
    x=.gpu/s44/x/b > "$R/ab_gemm_backward_$routing.txt" 2>&1
  grep -E "fc2|^[ax]:" "$R/ab_gemm_backward_$routing.txt" | head -12
done
timeout 150 .gpu/s44/x/b/moefuse-bench layer --preset all --mode fused --expert-grads fp32 \
  --routing zipf --json "$R/layer_zipf.json" > "$R/layer_zipf.txt" 2>&1
grep -E "graph|torch" "$R/layer_zipf.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

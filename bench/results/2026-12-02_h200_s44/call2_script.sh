#!/usr/bin/env bash
# Session 44, call 2. x = a1389e3 (main: the segment sums in units); z = x + the sorted wgrad
# walk zigzagged (wip/wgrad-zigzag: even positions of the snake walk take tiles from the front of
# the longest-first order, odd ones from the back), so that in each round half the CTAs reduce
# long K while the other half write out the short experts' tiles (fp32 output, tensor idle).
# Layer fused, fp32 expert grads, x / z:
# 1. Zipf three rounds (qwen3, gpt-oss). Prediction: gpt-oss fc2_wgrad 0.88x, fc1_wgrad 0.91x,
#    step ~0.95x; qwen3 fc2_wgrad ~0.93x, fc1_wgrad ~0.97x; if the tail of write-bound tiles is
#    not the cost: 1.00 +- 2%.
# 2. Uniform two rounds: 1.00 +- 1.5% (index order either way).
# 3. FP8 Zipf qwen3, two rounds: the FP8 wgrads as the bf16 ones.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in x z; do
  python3 -c "import tarfile; tarfile.open('.gpu/s44/$d.tar.xz').extractall('.gpu/s44/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
for routing in zipf uniform; do
  rounds=3; [[ $routing == uniform ]] && rounds=2
  BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing $routing" OUT=$R/$routing \
    timeout 200 scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" $rounds x=.gpu/s44/x/b \
    z=.gpu/s44/z/b > "$R/ab_layer_$routing.txt" 2>&1
  grep -E "wgrad|graph\) fwd\+bwd|^[xz]:" "$R/ab_layer_$routing.txt" | head -16
done
BENCH_ARGS="--mode fused --no-torch --precision fp8 --routing zipf" OUT=$R/fp8 \
  timeout 90 scripts/ab_bench.sh layer "qwen3-30b-a3b" 2 x=.gpu/s44/x/b z=.gpu/s44/z/b \
  > "$R/ab_layer_fp8_zipf.txt" 2>&1
grep -E "wgrad|graph\) fwd\+bwd|^[xz]:" "$R/ab_layer_fp8_zipf.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

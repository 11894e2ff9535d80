#!/usr/bin/env bash
# Session 46, call 1. N = 705b388 (the FP8 layer's shared expert in FP8: forward, dgrads, wgrads
# on its second stream); A = main 21bdd0a (shared expert bf16 in the FP8 layer).
# 1. The whole GPU suite and the Python suite on N. Prediction: all pass (LayerFp8 deepseek
#    cases now check the shared expert's FP8 weights and gradients against the FP8 reference).
# 2. layer --precision fp8 deepseek-v3, A / N, three rounds. Prediction: the FP8 step 0.93-0.96x
#    (29.9 -> ~28 ms), forward 0.92-0.96x; the routed stages unchanged +-2%; bf16 unchanged.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A N; do
  python3 -c "import tarfile; tarfile.open('.gpu/s46/$d.tar.xz').extractall('.gpu/s46/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s46/N/b OUT=$R timeout 290 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 250 scripts/ab_bench.sh \
  layer "deepseek-v3" 3 A=.gpu/s46/A/b N=.gpu/s46/N/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "shared|fwd\+bwd|fwd |^[AN]:" "$R/ab_layer_fp8.txt" | head -24
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 44, call 5. w = wip/fp8-wgrad-two-blocks: the FP8 wgrad's consumers issue group
# kb + 1's wgmmas into a second block accumulator before promoting group kb (wait_group 1);
# registers: consumers 224, producer warpgroup 56 (its epilogue warps drain by bulk copies only);
# f = main (call 3's build).
# 1. Every FP8 GPU test on w. Prediction: all pass.
# 2. gemm-fp8 (gpt-oss, mixtral), f / w, two rounds. Prediction: the FP8 wgrad 0.75-0.85x the
#    time (its tensor pipe 46% busy in call 4), everything else 1.00 +- 1.5%.
# 3. Layer --precision fp8 (qwen3, gpt-oss), f / w, two rounds: fp8 wgrad stages 0.85-0.92x,
#    FP8 steps 0.95-0.97x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in f w; do
  python3 -c "import tarfile; tarfile.open('.gpu/s44/$d.tar.xz').extractall('.gpu/s44/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='*Fp8*:*FP8*:*fp8*' TEST_TIMEOUT=150 BUILD=.gpu/s44/w/b OUT=$R/t \
  timeout 170 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests" "$R/check.log" | tail -n 6
BENCH_ARGS="--no-torch" OUT=$R/g timeout 200 scripts/ab_bench.sh gemm-fp8 \
  "gpt-oss-120b mixtral-8x7b" 2 f=.gpu/s44/f/b w=.gpu/s44/w/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[fw]:" "$R/ab_gemm_fp8.txt" | head -14
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 120 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 f=.gpu/s44/f/b w=.gpu/s44/w/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[fw]:" "$R/ab_layer_fp8.txt" | head -10
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

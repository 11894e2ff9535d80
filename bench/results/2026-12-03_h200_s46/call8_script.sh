#!/usr/bin/env bash
# Session 46, call 8. X = 758c795 (branch wip/fp8-wgrad-tensor-store): the FP8 wgrad drains a
# tile by four TMA tensor stores of 128B-swizzled chunks where the experts' mean rows are at most
# 768 (G <= 6 E: gpt-oss), else by per-row bulk copies as before (qwen3, deepseek, mixtral).
# N = 705b388 (main's kernels). Call 7 (tensor stores everywhere): gpt-oss FP8 wgrads 0.89-0.92x,
# its FP8 step 0.957x; qwen3 dW2 1.055x, deepseek's wgrad stages 1.03-1.04x.
# 1. The whole GPU suite and the Python suite on X. Prediction: all pass (the new
#    GroupedGemmFp8Wgrad.LongExpertsDrainTheTileByRows holds the row-copy path).
# 2. layer --precision fp8, gpt-oss / qwen3 / deepseek, N / X, two rounds. Prediction: gpt-oss's
#    FP8 step 0.95-0.97x (wgrad stages 0.88-0.93x); qwen3 and deepseek 1.00 +- 2 % (their path
#    unchanged).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in N X; do
  python3 -c "import tarfile; tarfile.open('.gpu/s46/$d.tar.xz').extractall('.gpu/s46/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=200 BUILD=.gpu/s46/X/b OUT=$R timeout 290 scripts/gpu_check.sh tests python \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 6
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 250 scripts/ab_bench.sh \
  layer "gpt-oss-120b qwen3-30b-a3b deepseek-v3" 2 N=.gpu/s46/N/b X=.gpu/s46/X/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[NX]:" "$R/ab_layer_fp8.txt" | head -14
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

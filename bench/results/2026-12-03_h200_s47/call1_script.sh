#!/usr/bin/env bash
# Session 47, call 1. A = main c7b9276; Z = e48634d (wip/zero-tail): the consumers of the BF16
# TMA forward kernel and of the dgrad kernels zero their A slab's rows past the expert's end
# (the next expert's rows, whose results the epilogue drops) before the wgmma, so the tensor
# cores multiply zeros there (less power under the 700 W cap; gpt-oss computes ~11 % of its
# forward and dgrad rows as such padding, qwen3 ~6 %).
# 1. The whole GPU suite on Z (it holds c7b9276's tests: the bf16 long-expert wgrad case not yet
#    run on a GPU). Prediction: all pass.
# 2. layer bf16 fused, gpt-oss / qwen3, A / Z, two rounds. Prediction: if zeros save power,
#    gpt-oss's fc1 / fc2 / dgrad stages 0.96-0.98x, its step 0.97-0.99x, qwen3's fc2 / dgrads
#    0.98-0.99x; if not, 1.00-1.01x (the zeroing's stores and barrier).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A Z; do
  python3 -c "import tarfile; tarfile.open('.gpu/s47/$d.tar.xz').extractall('.gpu/s47/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s47/Z/b OUT=$R timeout 250 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 6
BENCH_ARGS="--mode fused --no-torch" OUT=$R/l timeout 280 scripts/ab_bench.sh \
  layer "gpt-oss-120b qwen3-30b-a3b" 2 A=.gpu/s47/A/b Z=.gpu/s47/Z/b > "$R/ab_layer.txt" 2>&1
grep -E " fc.|dgrad|fwd\+bwd|fwd |^[AZ]:" "$R/ab_layer.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

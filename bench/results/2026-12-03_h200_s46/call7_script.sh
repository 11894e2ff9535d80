#!/usr/bin/env bash
# Session 46, call 7. W = wip/fp8-wgrad-tensor-store (on 89ef70a): the FP8 wgrad's tile leaves
# the hand-off buffer by 4 TMA tensor stores of 128B-swizzled 128-byte column chunks (the
# consumers write it swizzled) instead of 128 per-row bulk copies. N = 705b388 (main's kernels).
# Calls 4-5: on gpt-oss's dW2 the FP8 wgrad takes ~7150 cycles a 128 x 128 tile (4 K blocks of
# math), the tensor pipe 32 % busy and DRAM 36 %: the consumers wait on the one tile buffer while
# its drain moves ~9 B a cycle an SM.
# 1. GroupedGemmFp8Wgrad.* and every FP8 layer test on W. Prediction: all pass.
# 2. gemm-fp8 (the wgrad rows: dW2 of each preset), N / W, two rounds. Prediction: if the
#    per-row copies bound the drain, gpt-oss's FP8 dW2 0.70-0.85x, qwen3 0.85-0.95x, mixtral
#    (long K) 0.97-1.02x; if the memory side does, all 0.97-1.03x.
# 3. layer --precision fp8 gpt-oss and deepseek, N / W, two rounds: the fc*_wgrad stages as (2).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in N W; do
  python3 -c "import tarfile; tarfile.open('.gpu/s46/$d.tar.xz').extractall('.gpu/s46/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='GroupedGemmFp8Wgrad.*:Layer/LayerFp8*:LayerFp8*' TEST_TIMEOUT=150 \
  BUILD=.gpu/s46/W/b OUT=$R/tW timeout 200 scripts/gpu_check.sh tests > "$R/check_W.log" 2>&1
echo "W: $(grep -E "GPU tests" "$R/check_W.log" | tail -n 1)"
grep -E "^(FAILED|TIMEOUT)" "$R/check_W.log" | head -5
BENCH_ARGS="--no-torch" OUT=$R/g timeout 200 scripts/ab_bench.sh gemm-fp8 \
  "gpt-oss-120b qwen3-30b-a3b mixtral-8x7b" 2 N=.gpu/s46/N/b W=.gpu/s46/W/b \
  > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[NW]:" "$R/ab_gemm_fp8.txt" | head -14
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 250 scripts/ab_bench.sh \
  layer "gpt-oss-120b deepseek-v3" 2 N=.gpu/s46/N/b W=.gpu/s46/W/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[NW]:" "$R/ab_layer_fp8.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

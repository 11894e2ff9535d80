#!/usr/bin/env bash
# Session 52, call 5. Build S = wip/fp8-stage-late-ab 2c5d23c: the FP8 GEMM's consumers stage a
# finished tile only after issuing the next tile's first K block (L, the default), or before it
# as main does (E: MOEFUSE_DEBUG_STAGE_EARLY set). One binary. ptxas: the 192-wide bf16 forward
# spills 252 bytes with L (none with E), the seven-warp E4M3 and dGLU kernels 356 / 66.
# Calls 3-4 put ~3 K blocks of lost tensor time at each tile's start and end.
# 1. The whole GPU suite on S (L): 202 passed, 2 skipped.
# 2. gemm-fp8 E/L, qwen3 and mixtral (DeepGEMM's four shapes in each), two rounds. Prediction:
#    K = 2048 shapes and qwen3's FC1/FC2 (K 2048 / 768) 0.90-0.97x the time, K = 7168 0.97-1.00x;
#    the spill may eat part of it.
# 3. layer --precision fp8 E/L, qwen3 and gpt-oss, two rounds: fc1/fc2/fc2_dgrad stages as (2).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/S.tar.xz').extractall('$S/u')"
B=$S/u/S/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=150 BUILD=$B OUT=$R timeout 200 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
pack
BENCH_ARGS="--no-torch" OUT=$R/g timeout 240 scripts/ab_bench.sh gemm-fp8 \
  "qwen3-30b-a3b mixtral-8x7b" 2 E=$B:MOEFUSE_DEBUG_STAGE_EARLY=1 L=$B > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "moefuse fp8 grouped|^[EL]:|noise" "$R/ab_gemm_fp8.txt" | head -30
pack
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 150 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 E=$B:MOEFUSE_DEBUG_STAGE_EARLY=1 L=$B \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc[12] |fp8 fc2_dgrad|fp8 fc1_dgrad|fp8 .*\(graph\)|^[EL]:" "$R/ab_layer_fp8.txt" | head -20
pack

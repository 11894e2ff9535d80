#!/usr/bin/env bash
# Session 51, call 8 (debug). One binary (dbg-gap-all: main + DEBUG_GAP_ALL_US, one thread
# spinning that many us on the stream before every grouped GEMM). qwen3 and gpt-oss, the bf16
# and FP8 layers (--precision fp8 runs both), no gap / 20 us / 60 us, three rounds.
# Prediction: if main's GEMMs pay a transient after the bandwidth-bound kernels before them (as
# the wgrad after the cp.async quantiser did), their stages less the gap shorten by >= 1 %, the
# same at 20 and 60 us; if not, each GEMM stage grows by the gap (other stages within 0.5 %).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s51/gapall.tar.xz').extractall('.gpu/s51/h')"
B=.gpu/s51/h/H/b
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 420 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 3 N=$B G20=$B:DEBUG_GAP_ALL_US=20 \
  G60=$B:DEBUG_GAP_ALL_US=60 > "$R/ab_layer_gap_all.txt" 2>&1
grep -E "fused (fp8 )?(fc|router)|graph|FAILED" "$R/ab_layer_gap_all.txt"
(cd "$R" && tar czf ../r.tgz .)

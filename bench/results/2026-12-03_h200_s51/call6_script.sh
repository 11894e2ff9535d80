#!/usr/bin/env bash
# Session 51, call 6 (debug). One binary (dbg-cpasync-toggle 2nd DEBUG commit): P / C as call 5,
# and DEBUG_GAP_US=N idling the stream N us (one thread spinning on the global timer) between
# each FP8 wgrad's quantisers and its GEMM. gpt-oss FP8 layer, variants P, P+50, C, C+50, C+200,
# three interleaved rounds.
# Prediction: if the cp.async quantiser leaves a transient (clock or power) the GEMM right after
# pays for, the gap takes C's wgrad stages (less the gap) back toward P's; else C+gap = C + gap.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s51/gap.tar.xz').extractall('.gpu/s51/g')"
B=.gpu/s51/g/G/b
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 400 \
  scripts/ab_bench.sh layer "gpt-oss-120b" 3 P=$B:DEBUG_PLAIN_LOADS=1 \
  Pg50=$B:DEBUG_PLAIN_LOADS=1,DEBUG_GAP_US=50 C=$B Cg50=$B:DEBUG_GAP_US=50 \
  Cg200=$B:DEBUG_GAP_US=200 > "$R/ab_layer_fp8_gap.txt" 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_(wgrad|dgrad)|^[PC]|noise|FAILED" "$R/ab_layer_fp8_gap.txt" | head -30
(cd "$R" && tar czf ../r.tgz .)

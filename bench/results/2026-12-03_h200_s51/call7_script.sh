#!/usr/bin/env bash
# Session 51, call 7 (debug). One binary (dbg-cpasync-toggle + a DEBUG record of the FP8 wgrad's
# SM clock: every warp's lifetime in clock64 cycles over globaltimer ns, summed over launches).
# gpt-oss FP8 layer: P, C, C with a 50 us gap before each wgrad GEMM; two interleaved rounds.
# Prediction: if C's wgrads run at a lower SM clock than P's and Cg50's (power or current
# throttling after the faster quantiser), the clock explains call 5's 1.09-1.13x; if the clocks
# are equal, the GEMM takes more cycles (the memory side).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s51/clk.tar.xz').extractall('.gpu/s51/k')"
B=.gpu/s51/k/K/b
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 300 \
  scripts/ab_bench.sh layer "gpt-oss-120b" 2 P=$B:DEBUG_PLAIN_LOADS=1 C=$B \
  Cg50=$B:DEBUG_GAP_US=50 > "$R/ab_layer_fp8_clock.txt" 2>&1
grep -E "fp8 +fc[12]_wgrad|fp8.*graph.*fwd\+bwd|FAILED" "$R/ab_layer_fp8_clock.txt"
for f in "$R"/l/ab/*.log; do echo "$(basename "$f" .log): $(grep DEBUG "$f")"; done
(cd "$R" && tar czf ../r.tgz .)

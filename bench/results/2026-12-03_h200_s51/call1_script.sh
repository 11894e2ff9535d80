#!/usr/bin/env bash
# Session 51, call 1.
# 1. The whole GPU suite on main f2e98b1's exact build (session 50's shared test main, the margin
#    records, the seed traces dropped). Prediction: 202 passed, 2 skipped; CPU suite passes; the
#    closest margins well under 1 (the bounds were set with room).
# 2. The pad sweep (dbg-pad-sweep = A, dbg-pad-sweep-E = E with the cp.async column-wise
#    quantiser; processes A, E, A, E): dW2's buffers allocated after pads of 0..1024 MB.
#    Prediction: if placement sets dW2's time, its time follows the pad by >= 5 % and repeats for
#    a repeated pad, E spread as A; if not, flat within 2 % and E 1.10x A at every pad.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
for t in M pads; do
  python3 -c "import tarfile; tarfile.open('.gpu/s51/$t.tar.xz').extractall('.gpu/s51/$t')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s51/M/b OUT=$R timeout 200 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)|passed|failed" "$R/check.log" | tail -n 8
grep -A12 -i "closest" "$R/check.log" | head -n 14
pack
for round in 1 2; do
  for b in A E; do
    DEBUG_PAD_SWEEP=1 timeout 120 .gpu/s51/pads/$b/b/moefuse-bench gemm-fp8 --preset gpt-oss-120b \
      > "$R/pads_${b}_$round.log" 2>&1
    echo "== $b round $round"; grep DEBUG "$R/pads_${b}_$round.log" | cut -c1-60
  done
  pack
done

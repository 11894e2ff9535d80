#!/usr/bin/env bash
# Session 51, call 4 (debug). One binary (dbg-pad-sweep-AE): the column-wise quantiser loads by
# cp.async, or by main's plain loads with DEBUG_PLAIN_LOADS set. Processes P, C, P, C.
# Prediction: if running the cp.async kernel slows the wgrads after it, C's dW2 ~1.10x P's; if the
# build (not the kernel run) decides, P = C.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s51/ae.tar.xz').extractall('.gpu/s51/ae')"
for round in 1 2; do
  for mode in P C; do
    if [[ $mode == P ]]; then export DEBUG_PLAIN_LOADS=1; else unset DEBUG_PLAIN_LOADS; fi
    DEBUG_PAD_SWEEP=1 timeout 120 .gpu/s51/ae/AE/b/moefuse-bench gemm-fp8 --preset gpt-oss-120b \
      > "$R/ae_${mode}_$round.log" 2>&1
    echo "== $mode round $round"; grep DEBUG "$R/ae_${mode}_$round.log" | cut -c1-60
  done
done
(cd "$R" && tar czf ../r.tgz .)

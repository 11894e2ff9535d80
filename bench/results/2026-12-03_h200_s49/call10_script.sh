#!/usr/bin/env bash
# Session 49, call 10 (debug). Is call 8's slowdown "any cp.async kernel before the wgrads"?
# A3 / E3 as call 8; A4zf / A4full = A3 plus one pass of a toy cp.async.cg kernel over dW2's bf16
# operand a before the wgrads are timed, with every other vector zero-filled / none.
# Prediction: if cp.async itself leaves the slowdown, A4* read as E3 (FP8 dW2 ~2.4 ms), else as
# A3 (~2.13 ms).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s49/dbg2.tar.xz').extractall('.gpu/s49/dbg2')"
OUT=$R/g timeout 130 scripts/ab_bench.sh gemm-fp8 "gpt-oss-120b" 1 A3=.gpu/s49/dbg2/A3/b \
  E3=.gpu/s49/dbg2/E3/b A4zf=.gpu/s49/dbg2/A4zf/b A4full=.gpu/s49/dbg2/A4full/b \
  > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "dW2|^A|^E" "$R/ab_gemm_fp8.txt"
for f in $R/g/ab/*.log; do echo "$(basename $f): $(grep -c DEBUG $f)"; done
(cd "$R" && tar czf ../r.tgz .)

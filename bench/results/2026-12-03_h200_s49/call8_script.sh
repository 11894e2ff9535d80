#!/usr/bin/env bash
# Session 49, call 8 (debug). A3 / E3 / F3 = main / wip/colwise-cp-async (5 CTAs an SM) /
# wip/colwise-cp-async-4 (4 CTAs an SM), each with a DEBUG checksum of the FP8 dW2 operands that
# gemm-fp8 quantises (buffers zeroed first). Calls 4 and 7 had E's FP8 wgrad 1.10x A's with the
# wgrad kernel unchanged. Prediction: equal checksums (the tests are bit-exact); if they differ,
# the quantiser writes something the tests do not read.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s49/dbg.tar.xz').extractall('.gpu/s49/dbg')"
OUT=$R/g timeout 200 scripts/ab_bench.sh gemm-fp8 "gpt-oss-120b" 2 A3=.gpu/s49/dbg/A3/b \
  E3=.gpu/s49/dbg/E3/b F3=.gpu/s49/dbg/F3/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "dW2|^[AEF]3:" "$R/ab_gemm_fp8.txt"
for f in $R/g/ab/*.log; do echo "$(basename $f): $(grep DEBUG $f | awk '{print $NF}' | tr '\n' ' ')"; done
(cd "$R" && tar czf ../r.tgz .)

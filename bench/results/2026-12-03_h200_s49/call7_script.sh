#!/usr/bin/env bash
# Session 49, call 7 (warm, run inline; call 6, the same without the extraction, found no
# builds). A2 = main b9516ff, E2 = wip/colwise-cp-async 583cd46 (call 5). gemm-fp8 gpt-oss two
# rounds and layer --precision fp8 gpt-oss one round, A2 against E2: is call 4's gpt-oss FP8
# wgrad slowdown in the GEMMs themselves?
python3 -c "import tarfile; tarfile.open('.gpu/s49/AE2.tar.xz').extractall('.gpu/s49/AE2')"
R=$OUT/r; mkdir -p $R
OUT=$R/g timeout 150 scripts/ab_bench.sh gemm-fp8 "gpt-oss-120b" 2 A2=.gpu/s49/AE2/A2/b \
  E2=.gpu/s49/AE2/E2/b > $R/ab_gemm_fp8.txt 2>&1
grep -E "dW2|^[AE]2:" $R/ab_gemm_fp8.txt
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 100 \
  scripts/ab_bench.sh layer "gpt-oss-120b" 1 A2=.gpu/s49/AE2/A2/b E2=.gpu/s49/AE2/E2/b \
  > $R/ab_layer.txt 2>&1
grep -E "fp8.*\(graph\)|fp8 +fc[12]_(wgrad|dgrad)|^[AE]2:" $R/ab_layer.txt
cd $R && tar czf ../r.tgz .

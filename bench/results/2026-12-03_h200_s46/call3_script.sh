#!/usr/bin/env bash
# Session 46, call 3: T = the GPU tests of 89ef70a (705b388 plus the new LayerFp8 case
# deepseek_short_groups_h320_f208: the shared expert with short 1x128 groups, H 320, F and
# shared F 208). Every FP8 layer test. Prediction: all pass (26 cases + edges, recompute,
# bf16-wgrad, graph).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s46/T.tar.xz').extractall('.gpu/s46/T')"
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='Layer/LayerFp8*:LayerFp8*' TEST_TIMEOUT=150 BUILD=.gpu/s46/T/b OUT=$R \
  timeout 200 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests" "$R/check.log" | tail -n 6
.gpu/s46/T/b/moefuse_gpu_tests --gtest_filter='Layer/LayerFp8.*/deepseek_short*' 2>&1 |
  grep -E "rel-norm|OK|FAILED" > "$R/short_groups.txt"
tail -n 30 "$R/short_groups.txt"
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

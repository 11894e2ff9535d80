#!/usr/bin/env bash
# Session 49, call 9: main 6fe58ee's exact build (the session's final library code: fa29750's
# kernels; tests: MOEFUSE_TEST_SEED, the ReGLU data off the kink; the quant bench's gather row).
# 1. The whole GPU suite. Prediction: 202 passed, 2 skipped.
# 2. quant at qwen3's and gpt-oss's d_pre and at their x / dy gathers. Prediction: row+column
#    0.82-0.83 of copy, column-wise 0.90-0.91, the gather form 0.83-0.89 (call 5's A2).
# 3. The Python suite. Prediction: 135 passed, 12 skipped.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
python3 -c "import tarfile; tarfile.open('.gpu/s49/M.tar.xz').extractall('.gpu/s49/M')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=200 BUILD=.gpu/s49/M/b OUT=$R timeout 170 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 8
pack
for shape in "131072 1536 128 8" "65536 5760 128 4" "131072 2048 128 8" "65536 2880 128 4"; do
  read -r m k e t <<< "$shape"
  f="$R/quant_${m}x${k}"
  timeout 40 .gpu/s49/M/b/moefuse-bench quant --m $m --k $k --experts $e --topk $t \
    --json "$f.json" > "$f.txt" 2>&1
  echo "$m x $k: $(grep -E "128x1 fp8, grouped|one read" "$f.txt" | awk '{print $(NF-3), $NF}' |
    tr '\n' ' ')"
done
pack
BUILD=.gpu/s49/M/b OUT=$R timeout 150 scripts/gpu_check.sh python > "$R/python.log" 2>&1
grep -E "passed|failed" "$R/python.log" | tail -n 3
pack

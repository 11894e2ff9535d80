#!/usr/bin/env bash
# Session 36, call 2: u = the copy permute writes each split 256-byte unit whole, once (the owner
# of row r its tail with row r + 1's head read from x; rows of whole units unchanged but for a
# flag), against m = main f4dbcdc. Model (call 1's row probe): a unit written in two halves at
# different times costs a whole unit. Predictions: Dispatch*, Permute*, Layer reference tests
# pass, incl. the new PermuteWritesSplitUnitsOnce (offsets 0/16/128/240); memcheck/racecheck 0;
# permute u/m time gpt-oss 0.96-0.98 (0.853 -> 0.87-0.89 of copy), the other presets +-0.5%
# (no split units: the same path but one flag); u at H 2880 within 1% of H 2816's per byte.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s36u', '.gpu/s36m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='Dispatch*:*Permute*:Layer/LayerReference.*' TEST_TIMEOUT=300 BUILD=.gpu/s36u/b \
  OUT=$R scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 6
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool .gpu/s36u/b/moefuse_gpu_tests \
    --gtest_filter='DispatchRows.PermuteWritesSplitUnitsOnce' > "$R/$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh dispatch \
  "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 3 m=.gpu/s36m/b u=.gpu/s36u/b \
  > "$R/ab_dispatch.txt" 2>&1
grep -E "==| permute " "$R/ab_dispatch.txt" | head -60
for h in 2816 2880; do
  .gpu/s36u/b/moefuse-bench dispatch --preset gpt-oss-120b --hidden $h --no-torch \
    --json "$R/probe_u_$h.json" > "$R/probe_u_$h.log" 2>&1
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

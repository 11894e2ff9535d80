#!/usr/bin/env bash
# Session 36, call 5: the column sums in a kernel of their own (kSums: the plain wgrad's SASS is
# main's but for register names), w2 with the side wgmma after each K step's, w3 with the four
# side wgmmas after the four main ones of a batch; against m = main f4dbcdc. gemm-backward
# gpt-oss, two rounds. Predictions: wgrad rows without sums w/m 0.99-1.01 (call 4's 1.03-1.05
# was the shared K loop); "bf16 out +d_b1" < "bf16 out" + the d_b1 pass (~0.19 ms) if the side
# wgmma costs < 4% of a sums tile... call 4 put it near +50%: w3 tests whether the interleave
# (a shape change every instruction) is the cost.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s36w2', '.gpu/s36w3', '.gpu/s36m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemmBackward.Wgrad*' TEST_TIMEOUT=300 BUILD=.gpu/s36w3/b OUT=$R \
  scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|passed|failed" "$R/check.log" | tail -n 4
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm-backward "gpt-oss-120b" 2 \
  m=.gpu/s36m/b w2=.gpu/s36w2/b w3=.gpu/s36w3/b > "$R/ab_gemm_backward.txt" 2>&1
grep -E "==|dW" "$R/ab_gemm_backward.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

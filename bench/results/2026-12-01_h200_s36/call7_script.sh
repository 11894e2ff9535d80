#!/usr/bin/env bash
# Session 36, call 7: z = main cce3068, the final code (the library's SASS is call 6's x,
# diffed): the whole GPU suite, CPU tests, Python; memcheck / racecheck / synccheck over the
# permute tests; issue 4's table (`moefuse-bench dispatch`, torch's sequence timed too) and two
# more gpt-oss readings without torch. Predictions: GPU suite 195 passed / 2 skipped (the
# two-device tests); Python 131 / 9; 0 sanitizer findings; permute 0.91 / 0.86 / 0.885 / 0.88
# of copy, combine >= 0.90, router top-k 14-21x torch.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s36z/bins.tar.xz').extractall('.gpu/s36z')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/s36z/b OUT=$R scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool $tool .gpu/s36z/b/moefuse_gpu_tests \
    --gtest_filter='DispatchRows.PermuteAndPermuteBackwardMatchReference:DispatchQuant.PermuteQuantizeFp8MatchesReferenceBitwise' \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
.gpu/s36z/b/moefuse-bench dispatch --json "$R/dispatch_torch.json" > "$R/dispatch_torch.log" 2>&1
grep -E " (router_topk|permute|combine|combine_backward) " "$R/dispatch_torch.log" | head -20
for r in 1 2; do
  .gpu/s36z/b/moefuse-bench dispatch --preset gpt-oss-120b --no-torch \
    --json "$R/dispatch_gpt-oss-120b_$r.json" > "$R/dispatch_gpt-oss-120b_$r.log" 2>&1
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

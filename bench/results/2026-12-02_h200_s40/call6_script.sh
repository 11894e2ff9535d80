#!/usr/bin/env bash
# Session 40, call 6: g = 742d418, the final code: permute_backward_router's P hand-over by
# mbarriers (was bar.arrive / bar.sync, which racecheck reported in call 5's default sanitizer
# subset: 13 tests, every finding in this kernel). The whole GPU suite; racecheck over those 13
# tests; the dispatch bench, g against f (1e95007, named barriers), two rounds.
# Prediction: suite 194 passed / 2 skipped; racecheck 0 findings (the router's cuBLAS kernels
# apart, as THIRD-PARTY); permute_backward_router g/f 0.98-1.02.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in s40c s40f; do
  python3 -c "import tarfile; tarfile.open('.gpu/$d/bins.tar.xz').extractall('.gpu/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/s40f/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests" "$R/check.log" | tail -n 6
F='LayerFp8Edges.*:LayerMxfp8Edges.*:LayerNonFinite.*:DispatchRows.RouterTermMatchesReference:LayerGraph.*:Layer/LayerReference.*/qwen3_*:Layer/LayerReference.*/deepseek_fused:Layer/LayerFp8.ForwardAndBackwardMatch*/deepseek:RouterLogits.*'
SANITIZE_FILTER="$F" SANITIZE_TOOLS=racecheck SANITIZE_JOBS=12 SANITIZE_TIMEOUT=300 \
  BUILD=.gpu/s40f/b OUT=$R/s timeout 330 scripts/gpu_check.sh sanitize > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head
BENCH_ARGS="--no-torch" OUT=$R timeout 120 scripts/ab_bench.sh dispatch "qwen3-30b-a3b gpt-oss-120b mixtral-8x7b deepseek-v3" 2 \
  f=.gpu/s40c/b g=.gpu/s40f/b > "$R/ab_dispatch.txt" 2>&1
grep -E "permute_backward_router|clock|^[fg]:" "$R/ab_dispatch.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 39, call 2: q = the consumers read each unit's tile slot by lane `rank` and shuffle it
# to the warp (common/tile_slots.cuh read_tile), in the forward, dgrad and FP8 kernels. Call 1's
# racecheck reported every other lane's slot read against the producer's next write of the slot
# in the clustered forward (only lane `rank` of a consumer warp arrives on its CTA's empty
# barrier there). m = main 7b63a02.
# Predictions: the whole GPU suite passes on q; racecheck m: hazards in read_tile/publish_tile
# (OneKBlockTilesOnOneCta), q: 0 over the forward, dgrad and FP8 cluster tests; memcheck and
# synccheck 0; q/m 0.99-1.01 on every row (6 shuffles a unit).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s39q', '.gpu/s39m'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
TEST_TIMEOUT=300 BUILD=.gpu/s39q/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|CPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
timeout 60 compute-sanitizer --tool racecheck .gpu/s39m/b/moefuse_gpu_tests \
  --gtest_filter=GroupedGemm.OneKBlockTilesOnOneCta > "$R/sanitize_racecheck_m.log" 2>&1
echo "racecheck m: $(grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_racecheck_m.log" | tr '\n' ' ')"
F='GroupedGemm.OneKBlockTilesOnOneCta:GroupedGemm.ClusterPairsAndPhantoms:GroupedGemmBackward.Fc2DgradClusterGroupsAndPhantoms:GroupedGemmFp8.DeepGemmShapeRagged:Fp8Dgrad.Fc2DgradEveryActivation'
for tool in racecheck memcheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool .gpu/s39q/b/moefuse_gpu_tests --gtest_filter="$F" \
    > "$R/sanitize_$tool.log" 2>&1
  echo "$tool q: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
for mode in gemm gemm-backward gemm-fp8; do
  BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh $mode "qwen3-30b-a3b" 2 \
    m=.gpu/s39m/b q=.gpu/s39q/b > "$R/ab_$mode.txt" 2>&1
  grep -E "moefuse" "$R/ab_$mode.txt" | head -20
done
BENCH_ARGS="--mode fused --no-torch" OUT=$R scripts/ab_bench.sh layer "qwen3-30b-a3b" 2 \
  m=.gpu/s39m/b q=.gpu/s39q/b > "$R/ab_layer.txt" 2>&1
grep -E "graph" "$R/ab_layer.txt" | head
sed -n '/clocks while/,$p' "$R/ab_layer.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

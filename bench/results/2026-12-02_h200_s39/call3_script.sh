#!/usr/bin/env bash
# Session 39, call 3: h = q + a forward tile of at most 64 rows (an expert's last m-block) split
# by columns between the two consumer warpgroups (each wgmma m64n128, or m64n96 in 192-wide
# tiles, over the same 64 rows) instead of warpgroup 1 computing 64 rows of padding; the
# overlapped variant only (TMA A, bf16 out: every FC2, gpt-oss's and mixtral's FC1). q = call 2's
# build (main + the one-lane tile-slot read).
# Share of such tiles (uniform routing): gpt-oss ~11% of its FC1/FC2 tiles (experts of 513-576
# rows), qwen3 ~6% of FC2's (1025-1088), mixtral/deepseek <1%.
# Predictions: tests pass, sanitizers 0 over HalfColumnTiles; fused FC1/FC2 h/q gpt-oss
# 0.94-0.98, qwen3 FC2 0.97-0.995, gather FC1 (unchanged kernel) 0.99-1.01, mixtral and
# deepseek 0.99-1.01; layer fwd gpt-oss 0.95-0.98, qwen3 0.99-1.00.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 - <<'PY'
import tarfile
for d in ('.gpu/s39h', '.gpu/s39q'):
    tarfile.open(d + '/bins.tar.xz').extractall(d)
PY
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
GTEST_FILTER='GroupedGemm.*:LayerGraph.*:LayerDeterminism.*:Layer/LayerReference.*' \
  TEST_TIMEOUT=300 BUILD=.gpu/s39h/b OUT=$R/t scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "GPU tests|^(FAILED|TIMEOUT)" "$R/check.log"
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool .gpu/s39h/b/moefuse_gpu_tests \
    --gtest_filter=GroupedGemm.HalfColumnTiles > "$R/sanitize_$tool.log" 2>&1
  echo "$tool h: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$R/sanitize_$tool.log" | tr '\n' ' ')"
done
BENCH_ARGS="--no-torch" OUT=$R scripts/ab_bench.sh gemm \
  "gpt-oss-120b qwen3-30b-a3b mixtral-8x7b deepseek-v3" 2 q=.gpu/s39q/b h=.gpu/s39h/b \
  > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse (fused|gather)" "$R/ab_gemm.txt" | head -40
BENCH_ARGS="--mode fused --no-torch" OUT=$R scripts/ab_bench.sh layer \
  "gpt-oss-120b qwen3-30b-a3b mixtral-8x7b deepseek-v3" 3 q=.gpu/s39q/b h=.gpu/s39h/b \
  > "$R/ab_layer.txt" 2>&1
grep -E "graph|fused fc. fwd" "$R/ab_layer.txt" | head -30
sed -n '/clocks while/,$p' "$R/ab_layer.txt" | head -4
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

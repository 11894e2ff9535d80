#!/usr/bin/env bash
# Session 42, call 2: f = d6a1992 (wip/s42-fp8-drain-narrow: main 273e1a2 + fp32 wgrad tiles
# 128 x 192 wherever 192 divides n_out, i.e. qwen3's dW2 too; the FP8 wgrad's one-part fp32 tile
# drained by bulk copies; README/docs only otherwise); m = main 273e1a2.
# 1. The whole GPU suite and the Python suite on f. Prediction: 196 passed (the new N 768 case
#    sits inside an existing test), 2 skipped; Python 132 passed, 8 skipped.
# 2. memcheck, racecheck, synccheck over the wgrad tests (the new N 768 case, the narrow and
#    ragged-K ones) and the FP8 wgrad tests. Prediction: 0 findings.
# 3. gemm-backward qwen3, m / f, three rounds. Prediction: fp32 dW2 0.96-0.975x the time (run 30:
#    0.965), every other row 1.00 (+-2%, call 1 showed a +3% order bias on unchanged rows).
# 4. Layer qwen3 with fp32 expert gradients, bf16 and FP8 (FP8 wgrads), m / f, three rounds.
#    Prediction: bf16 fc2_wgrad 0.96-0.98x, step 0.995-1.00; FP8 wgrad stages 0.965-0.97x
#    (call 1), FP8 step 0.99-1.00.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m f; do
  python3 -c "import tarfile; tarfile.open('.gpu/s42/$d.tar.xz').extractall('.gpu/s42/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/s42/f/b OUT=$R/t scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
F='GroupedGemmBackward.Wgrad*:GroupedGemmFp8Wgrad.*'
SANITIZE_FILTER="$F" SANITIZE_TOOLS='memcheck racecheck synccheck' SANITIZE_JOBS=8 \
  SANITIZE_TIMEOUT=300 BUILD=.gpu/s42/f/b OUT=$R/s timeout 200 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head -20
BENCH_ARGS="--no-torch" OUT=$R timeout 100 scripts/ab_bench.sh gemm-backward "qwen3-30b-a3b" 3 \
  m=.gpu/s42/m/b f=.gpu/s42/f/b > "$R/ab_gemm-backward.txt" 2>&1
grep -E "dW|^[mf]:" "$R/ab_gemm-backward.txt" | head -20
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32" OUT=$R timeout 100 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b" 3 m=.gpu/s42/m/b f=.gpu/s42/f/b > "$R/ab_layer.txt" 2>&1
grep -E "wgrad|graph|^[mf]:" "$R/ab_layer.txt" | head -20
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --precision fp8" OUT=$R/fp8 timeout 100 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b" 3 m=.gpu/s42/m/b f=.gpu/s42/f/b \
  > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc|fp8.*graph|^[mf]:" "$R/ab_layer_fp8.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 45, call 2. Call 1 refuted the promotion-overlap models (turns, split halves: 1.03-1.09x
# slower). P = 7e47e79 (wip/fp8-wgrad-scales-early): the column scales loaded by LDS (they were
# generic LD.E.64, on the long scoreboard, the top stall of run 44 call 6) after the commit, while
# the wgmma run, and the stage released before the promotion (as the forward's); A = main.
# 1. GroupedGemmFp8Wgrad.*:LayerFp8* on P. Prediction: all pass.
# 2. ncu source counters (per-instruction stall samples) of the FP8 wgrad, mixtral dW2, on A and
#    P: where the consumers and the producer wait.
# 3. layer --precision fp8 (qwen3, gpt-oss) and gemm-fp8 mixtral, A / P, two rounds.
#    Prediction: fp8 wgrad stages 0.93-0.98x, FP8 steps 0.98-0.99x; other rows 1.00 +- 2%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A P; do
  python3 -c "import tarfile; tarfile.open('.gpu/s45/$d.tar.xz').extractall('.gpu/s45/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
GTEST_FILTER='GroupedGemmFp8Wgrad.*:LayerFp8*' TEST_TIMEOUT=100 BUILD=.gpu/s45/P/b OUT=$R/tP \
  timeout 120 scripts/gpu_check.sh tests > "$R/check_P.log" 2>&1
echo "P: $(grep -E "GPU tests" "$R/check_P.log" | tail -n 1)"
grep -E "^(FAILED|TIMEOUT)" "$R/check_P.log" | head -5
for d in A P; do
  timeout 150 ncu --clock-control none --section WarpStateStats --section SourceCounters \
    -k regex:'fp8_wgrad_kernel' -c 1 -o "$R/ncu_wgrad_$d" \
    .gpu/s45/$d/b/moefuse-bench gemm-fp8 --preset mixtral-8x7b --warmup 0 --iters 1 \
    > "$R/ncu_wgrad_$d.log" 2>&1
  echo "ncu $d rc=$?"
  ncu -i "$R/ncu_wgrad_$d.ncu-rep" --page source --csv --print-source sass \
    > "$R/ncu_wgrad_${d}_source.csv" 2> "$R/ncu_wgrad_${d}_source.err"
  echo "source $d: $(wc -l < "$R/ncu_wgrad_${d}_source.csv") lines"
done
BENCH_ARGS="--mode fused --no-torch --precision fp8" OUT=$R/l timeout 150 scripts/ab_bench.sh \
  layer "qwen3-30b-a3b gpt-oss-120b" 2 A=.gpu/s45/A/b P=.gpu/s45/P/b > "$R/ab_layer_fp8.txt" 2>&1
grep -E "fp8 fc._wgrad|fp8 .*fwd\+bwd|^[AP]:" "$R/ab_layer_fp8.txt" | head -10
BENCH_ARGS="--no-torch" OUT=$R/g timeout 120 scripts/ab_bench.sh gemm-fp8 "mixtral-8x7b" 2 \
  A=.gpu/s45/A/b P=.gpu/s45/P/b > "$R/ab_gemm_fp8.txt" 2>&1
grep -E "wgrad|^[AP]:" "$R/ab_gemm_fp8.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

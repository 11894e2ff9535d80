#!/usr/bin/env bash
# Session 48, call 1. A = main 3f89d4a; G = wip/fwd-group16 ca4aeb8 (the BF16 forward's raster
# groups of 16 m-blocks; run 47 call 4's wip/group16 changed only this constant too, so its
# backward's 0.99-1.02x there was noise).
# 1. Kernels of qwen3's fused graph step, BF16 and FP8 (layer_gaps --kernels). Run 47: qwen3's FP8
#    graph backward (7.201 - 1.867 = 5.33 ms) exceeds its eager stages' sum (4.56 ms) by 0.78 ms,
#    the BF16 one by 0.26 ms; gpt-oss, mixtral none. Prediction: a kernel (or kernels) outside the
#    stage events, ~0.5-0.8 ms, in the FP8 step only; or the stage sums are eager-only artefacts.
# 2. The eager FP8 qwen3 step (moefuse-bench --eager), for its total against the graph's.
# 3. A/B A vs G: gemm deepseek-v3 three rounds, layer deepseek-v3 two. Prediction: fused FC1 and
#    FC2 0.98-0.99x, layer forward 0.99-1.00x, step 0.995-1.00x.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in A G; do
  [[ -d .gpu/s48/$d ]] ||
    python3 -c "import tarfile; tarfile.open('.gpu/s48/$d.tar.xz').extractall('.gpu/s48/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/python
export MOEFUSE_LIBRARY=$PWD/.gpu/s48/A/b/libmoefuse_c.so
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
for p in BF16 FP8_BLOCKWISE; do
  timeout 120 python3 bench/layer_gaps.py --preset qwen3-30b-a3b --mode fused --precision $p \
    --kernels --json "$R/gaps_qwen3_$p.json" > "$R/gaps_qwen3_$p.txt" 2>&1
  head -n 1 "$R/gaps_qwen3_$p.txt"
done
timeout 90 .gpu/s48/A/b/moefuse-bench layer --preset qwen3-30b-a3b --precision fp8 --mode fused \
  --no-torch --eager --json "$R/layer_qwen3_fp8_eager.json" > "$R/layer_qwen3_fp8_eager.txt" 2>&1
grep -E "\(eager\)" "$R/layer_qwen3_fp8_eager.txt"
BENCH_ARGS="--no-torch" OUT=$R/g timeout 200 scripts/ab_bench.sh gemm "deepseek-v3" 3 \
  A=.gpu/s48/A/b G=.gpu/s48/G/b > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse fused|^[AG]:" "$R/ab_gemm.txt" | head -12
BENCH_ARGS="--mode fused --no-torch" OUT=$R/l timeout 150 scripts/ab_bench.sh layer \
  "deepseek-v3" 2 A=.gpu/s48/A/b G=.gpu/s48/G/b > "$R/ab_layer.txt" 2>&1
grep -E "\(graph\)|^[AG]:" "$R/ab_layer.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 43, call 4. w = wip/wgrad-longest-first at its final form: the wgrads walk the experts
# longest first in snake rounds, compile-time (the gather variant in index order), the consumers
# and epilogue warps taking the expert through a warp reduction (call 2's o had lost the uniform
# descriptor arithmetic: its 128 x 192 K loop 440 instructions, R2UR 40; w's 414 and 20, main's
# 413 and 20); m = main 887ad7e.
# 1. GPU suite and sanitizers on w. Prediction: 198 passed, 2 skipped; 0 findings.
# 2. Layer fused, fp32 expert grads, m / w, four rounds, uniform routing (qwen3, gpt-oss,
#    deepseek). Prediction: wgrad stages 0.98-1.01 (the loops as main's), steps 1.00.
# 3. The same with --routing zipf. Prediction: qwen3 fc2_wgrad 0.80-0.84, fc1_wgrad 0.92-0.96,
#    step 0.96-0.97; gpt-oss 0.91-0.93 / 0.93-0.95, step 0.97; deepseek fc2 0.96, fc1 1.00.
# 4. FP8 layer, qwen3, zipf and uniform, two rounds. Prediction: zipf wgrads 0.97, uniform 1.00.
# 5. The README's tables on w: layer all presets both modes fp32 (torch beside), bf16 grads,
#    FP8; and the zipf layer table (fused, torch beside).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m w; do
  python3 -c "import tarfile; tarfile.open('.gpu/s43/$d.tar.xz').extractall('.gpu/s43/$d')"
done
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
TEST_TIMEOUT=300 BUILD=.gpu/s43/w/b OUT=$R/t timeout 220 scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
F='GroupedGemmBackward.Wgrad*:GroupedGemmFp8Wgrad.LongestFirst*:GroupedGemmFp8Wgrad.SeveralTiles*'
SANITIZE_FILTER="$F" SANITIZE_TOOLS='memcheck racecheck synccheck' SANITIZE_JOBS=12 \
  SANITIZE_TIMEOUT=150 BUILD=.gpu/s43/w/b OUT=$R/s timeout 160 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head -20
P="qwen3-30b-a3b gpt-oss-120b deepseek-v3"
for routing in uniform zipf; do
  BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing $routing" OUT=$R/$routing \
    timeout 150 scripts/ab_bench.sh layer "$P" 4 m=.gpu/s43/m/b w=.gpu/s43/w/b \
    > "$R/ab_layer_$routing.txt" 2>&1
  grep -E "wgrad|graph|^[mw]:" "$R/ab_layer_$routing.txt" | head -24
  BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --precision fp8 --routing $routing" \
    OUT=$R/fp8_$routing timeout 60 scripts/ab_bench.sh layer "qwen3-30b-a3b" 2 m=.gpu/s43/m/b \
    w=.gpu/s43/w/b > "$R/ab_layer_fp8_$routing.txt" 2>&1
  grep -E "fp8 fc.*wgrad|fp8.*graph" "$R/ab_layer_fp8_$routing.txt" | head -6
done
B=.gpu/s43/w/b/moefuse-bench
timeout 120 $B layer --preset all --mode both --expert-grads fp32 \
  --json "$R/layer_fp32.json" > "$R/layer_fp32.txt" 2>&1
grep -E "\(graph\)|torch unfused|dense" "$R/layer_fp32.txt" | grep -v "^ *flops" | head -32
timeout 60 $B layer --preset all --mode fused --expert-grads bf16 --no-torch \
  --json "$R/layer_bf16.json" > "$R/layer_bf16.txt" 2>&1
timeout 90 $B layer --preset all --mode fused --precision fp8 --no-torch \
  --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
grep -E "speedup" "$R/layer_fp8.txt" | head -8
timeout 100 $B layer --preset all --mode fused --expert-grads fp32 --routing zipf \
  --json "$R/layer_zipf.json" > "$R/layer_zipf.txt" 2>&1
grep -E "\(graph\)|torch|routing zipf" "$R/layer_zipf.txt" | grep -v "^ *flops" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 37, call 2 (measurement only, main d71ff41 = .gpu/s37m): the README's tables on the
# current code (layer fp32 both modes with torch, bf16 fused, FP8 fused; gemm and gemm-backward
# with torch, all presets), then ncu of qwen3's dgrads (fused FC2 + dGLU against the plain GEMM)
# and of its forward FC1 (TMA + pre against gather + pre) with source-level stall counters.
# Predictions: layer fwd+bwd (fp32 grads) qwen3 470-490, gpt-oss 460-470, mixtral 630-640,
# deepseek 590-600; bf16 grads qwen3 495-510, deepseek 600-606; gemm and gemm-backward ratios
# within 3% of sessions 32-33's.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s37m/bins.tar.xz').extractall('.gpu/s37m')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s37m/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > "$R/device.txt"
run() { local name=$1; shift; timeout 420 $B "$@" --json "$R/$name.json" > "$R/$name.txt" 2>&1;
        echo "$name rc=$?"; }
run layer_fp32 layer --preset all --mode both --expert-grads fp32
grep -E "moefuse fused|unfused|torch|dense" "$R/layer_fp32.txt" | grep -v "^ *$" | tail -24
run layer_bf16 layer --preset all --mode fused --expert-grads bf16 --no-torch
grep -E "moefuse fused \(graph\)" "$R/layer_bf16.txt"
run layer_fp8 layer --preset all --mode fused --precision fp8 --no-torch
grep -E "\(graph\)" "$R/layer_fp8.txt"
run gemm gemm --preset all
run gemm_backward gemm-backward --preset all
grep -E "moefuse" "$R/gemm_backward.txt" | head -40
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
   --section SchedulerStats --section SourceCounters --section LaunchStats"
timeout 240 ncu $S --kernel-name regex:dgrad_kernel --launch-count 3 $B gemm-backward \
  --preset qwen3-30b-a3b --warmup 0 --iters 1 --no-torch > "$R/ncu_dgrad_qwen3.txt" 2>&1
echo "ncu dgrad rc=$?"
timeout 240 ncu $S --kernel-name regex:grouped_gemm_kernel --launch-count 6 $B gemm \
  --preset qwen3-30b-a3b --warmup 0 --iters 1 --no-torch > "$R/ncu_fc1_qwen3.txt" 2>&1
echo "ncu fc1 rc=$?"
grep -E "grouped_gemm_kernel|dgrad_kernel|Duration|Memory Throughput|L2 Cache Throughput|Compute \(SM\)" \
  "$R"/ncu_*.txt | cut -c1-140 | head -60
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

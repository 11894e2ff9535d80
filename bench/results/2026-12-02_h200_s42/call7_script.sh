#!/usr/bin/env bash
# Session 42, call 7: the README's table timed warm. h = 752015d (moefuse-bench layer --warm-ms;
# kernels d6a1992's): every timed variant (ours, dense cuBLAS, torch) after at least 1.5 s of
# its own replays, then the usual 30. Prediction (call 6): our times 1.5-5% above call 3's, the
# dense bound 5-16% above (qwen3's forward 0.66 -> ~0.75 of dense), torch's 0-10% above.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s42/h.tar.xz').extractall('.gpu/s42/h')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s42/h/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
timeout 180 $B layer --preset all --mode both --expert-grads fp32 --warm-ms 1500 \
  --json "$R/layer_fp32_warm.json" > "$R/layer_fp32_warm.txt" 2>&1
grep -E "\(graph\)|torch unfused|dense" "$R/layer_fp32_warm.txt" | grep -v "^ *flops" | head -32
timeout 60 $B layer --preset all --mode fused --expert-grads bf16 --no-torch --warm-ms 1500 \
  --json "$R/layer_bf16_warm.json" > "$R/layer_bf16_warm.txt" 2>&1
grep -E "\(graph\)" "$R/layer_bf16_warm.txt" | head -8
timeout 90 $B layer --preset all --mode fused --precision fp8 --no-torch --warm-ms 1500 \
  --json "$R/layer_fp8_warm.json" > "$R/layer_fp8_warm.txt" 2>&1
grep -E "speedup" "$R/layer_fp8_warm.txt" | head -8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

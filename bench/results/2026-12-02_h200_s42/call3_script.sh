#!/usr/bin/env bash
# Session 42, call 3: the README's tables on f = d6a1992 (call 2's build: its GPU suite, Python
# suite and sanitizer runs passed in call 2).
# 1. layer --preset all --mode both --expert-grads fp32 (torch beside it). Prediction: within the
#    spread of session 41's table and call 1/2's m rounds (qwen3 fwd 487-521, fwd+bwd 485-499).
# 2. --expert-grads bf16, fused. 3. --precision fp8, fused (FP8 wgrads, fp32 gradients), its
#    ratio to the bf16 layer in the same process. Prediction: 1.28-1.33 / 1.00-1.04 on qwen3.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s42/f.tar.xz').extractall('.gpu/s42/f')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s42/f/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
timeout 240 $B layer --preset all --mode both --expert-grads fp32 \
  --json "$R/layer_fp32.json" > "$R/layer_fp32.txt" 2>&1
timeout 120 $B layer --preset all --mode fused --expert-grads bf16 \
  --no-torch --json "$R/layer_bf16.json" > "$R/layer_bf16.txt" 2>&1
timeout 150 $B layer --preset all --mode fused --precision fp8 --no-torch \
  --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
grep -E "\(graph\)|torch unfused|dense|speedup" "$R/layer_fp32.txt" | head -40
grep -E "\(graph\)" "$R/layer_bf16.txt" | head -12
grep -E "\(graph\)|speedup|×|x bf16" "$R/layer_fp8.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

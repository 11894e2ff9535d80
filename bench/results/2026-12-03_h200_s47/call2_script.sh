#!/usr/bin/env bash
# Session 47, call 2: the README's layer tables on F = main f2e1d71 (c7b9276's code; later
# commits are docs), session 46's final code, which no table has run whole.
# 1. layer --preset all --mode both --expert-grads fp32, torch beside it. Prediction: within
#    sessions 42-46's spread (qwen3 fwd 490-521, fwd+bwd 486-503; gpt-oss fwd+bwd 475-490,
#    mixtral 638-649, deepseek 599-613; fused / unfused 1.14-1.17 on qwen3).
# 2. --expert-grads bf16, fused. Prediction: qwen3 505-515, deepseek 600-614.
# 3. --precision fp8, fused (FP8 wgrads, fp32 gradients), its ratio to the bf16 layer of the same
#    process. Prediction: fwd+bwd 1.04-1.08 / 1.15-1.20 / 1.27-1.31 / 1.27-1.31 (qwen3 / gpt-oss
#    / mixtral / deepseek).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s47/F.tar.xz').extractall('.gpu/s47/F')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s47/F/b/moefuse-bench
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$R/smi.csv" 2> /dev/null &
smi=$!
timeout 250 $B layer --preset all --mode both --expert-grads fp32 \
  --json "$R/layer_fp32.json" > "$R/layer_fp32.txt" 2>&1
echo "fp32 rc=$?"
timeout 120 $B layer --preset all --mode fused --expert-grads bf16 \
  --no-torch --json "$R/layer_bf16.json" > "$R/layer_bf16.txt" 2>&1
echo "bf16 rc=$?"
timeout 170 $B layer --preset all --mode fused --precision fp8 --no-torch \
  --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
echo "fp8 rc=$?"
kill $smi 2> /dev/null
python3 scripts/gpu_clocks.py "$R/smi.csv" 2>&1 | tail -3
grep -E "\(graph\)|torch unfused|dense|speedup" "$R/layer_fp32.txt" | head -40
grep -E "\(graph\)" "$R/layer_bf16.txt" | head -12
grep -E "\(graph\)|speedup|×|x bf16" "$R/layer_fp8.txt" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 45, call 6: the FP8 layer table on the final code F (main 9911205's build; c4af6f0
# since is results and docs only): `layer --preset all --mode fused --precision fp8 --no-torch`
# (FP8 wgrads, fp32 expert gradients), the bf16 layer beside it in the same process.
# Prediction: FP8 / bf16 fwd+bwd 1.02-1.05 (qwen3), 1.10-1.14 (gpt-oss), 1.25-1.28 (mixtral),
# 1.20-1.23 (deepseek): session 42's table (1.02 / 1.10 / 1.25 / 1.20) plus this session's ~1%.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s45/F.tar.xz').extractall('.gpu/s45/F')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$R/smi.csv" 2> /dev/null &
smi=$!
timeout 200 .gpu/s45/F/b/moefuse-bench layer --preset all --mode fused --precision fp8 \
  --no-torch --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
echo "rc=$?"
kill $smi 2> /dev/null
grep -E "\(graph\)|speedup|×|x bf16" "$R/layer_fp8.txt" | head -24
python3 scripts/gpu_clocks.py "$R/smi.csv" 2>&1 | tail -3
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

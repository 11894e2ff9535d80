#!/usr/bin/env bash
# Session 41, call 3: f = 7e8b281, the final code (main: 82dd145's side permute, then docs and
# comments only). The whole GPU suite, the CPU suite and the Python tests; then the README's
# layer table: `layer --preset all --mode both --expert-grads fp32` (torch and the unfused mode
# beside it) and `--mode fused --expert-grads bf16 --no-torch`.
# Prediction: GPU 196 passed / 2 skipped, CPU 281 / 1 skipped, Python ~132 passed / 8 skipped;
# the layer within the run-to-run spread of session 39's table (qwen3 fwd / fwd+bwd 497-519 /
# 488-497 fp32), fused / unfused fwd+bwd on qwen3 1.18-1.20 (the permute now only in the
# unfused mode's step).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/f/bins.tar.xz').extractall('.gpu/f')"
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=300 BUILD=.gpu/f/b OUT=$R/t scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
timeout 240 .gpu/f/b/moefuse-bench layer --preset all --mode both --expert-grads fp32 \
  --json "$R/layer_fp32.json" > "$R/layer_fp32.txt" 2>&1
timeout 120 .gpu/f/b/moefuse-bench layer --preset all --mode fused --expert-grads bf16 \
  --no-torch --json "$R/layer_bf16.json" > "$R/layer_bf16.txt" 2>&1
grep -E "\(graph\)|unfused|torch" "$R/layer_fp32.txt" | grep -E "fwd" | head -40
grep -E "\(graph\)" "$R/layer_bf16.txt" | head -12
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

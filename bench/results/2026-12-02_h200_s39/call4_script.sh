#!/usr/bin/env bash
# Session 39, call 4: f = main e4e4a67, the final code (the one-lane tile-slot read; every
# kernel's SASS text that of call 2's q, diffed). The whole GPU suite, CPU tests and Python on
# it, then the README's layer table: fp32 expert grads fused and unfused with torch, bf16 expert
# grads, FP8 against bf16. Predictions: GPU 194 passed / 2 skipped, CPU 279 run (1 skipped by
# design), Python 132 passed / 8 skipped (libmoefuse_ep_c.so packed this time); layer within the
# run-to-run spread of session 38's table (fwd / fwd+bwd qwen3 495-507 / 485-495, gpt-oss
# 515-535 / 480-495, mixtral 640-665 / 630-650, deepseek 590-610 / 590-612; bf16 grads qwen3
# 505-515).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s39f/bins.tar.xz').extractall('.gpu/s39f')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s39f/b/moefuse-bench
TEST_TIMEOUT=300 BUILD=.gpu/s39f/b OUT=$R scripts/gpu_check.sh tests python > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|CPU tests|passed|failed" "$R/check.log" | tail -n 8
run() {
  local name=$1; shift
  timeout 200 $B "$@" --json "$R/$name.json" > "$R/$name.txt" 2>&1
  nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader \
    >> "$R/clocks.txt"
}
run layer_fp32 layer --preset all --mode both --expert-grads fp32
grep -E "moefuse fused|torch|dense" "$R/layer_fp32.txt" | grep -v "^ *$" | tail -24
run layer_bf16 layer --preset all --mode fused --expert-grads bf16 --no-torch
grep -E "moefuse fused \(graph\)" "$R/layer_bf16.txt"
run layer_fp8 layer --preset all --mode fused --precision fp8 --no-torch
grep -E "\(graph\)" "$R/layer_fp8.txt"
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

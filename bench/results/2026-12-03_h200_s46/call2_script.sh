#!/usr/bin/env bash
# Session 46, call 2, on N (705b388, the final kernels and layer code; later commits are docs):
# 1. The FP8 layer table: `layer --preset all --mode fused --precision fp8 --fp8-wgrad both
#    --no-torch`, the bf16 layer beside it in the same process. Prediction: FP8 / bf16 fwd+bwd
#    1.04-1.08 (qwen3), 1.09-1.13 (gpt-oss), 1.27-1.31 (mixtral), 1.27-1.31 (deepseek, 1.23 in
#    session 45 before its shared expert went FP8); with bf16 wgrads qwen3 1.13-1.17, the others
#    within 2 % of the FP8 wgrads.
# 2. The Python suite on N's library with this session's two new FP8 shared-expert tests.
#    Prediction: 135 passed, 12 skipped.
# 3. compute-sanitizer memcheck and racecheck over the FP8 layer's deepseek cases (the shared
#    expert in FP8, cached and recomputed pre). Prediction: 0 findings.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s46/N.tar.xz').extractall('.gpu/s46/N')"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$R/smi.csv" 2> /dev/null &
smi=$!
timeout 330 .gpu/s46/N/b/moefuse-bench layer --preset all --mode fused --precision fp8 \
  --fp8-wgrad both --no-torch --json "$R/layer_fp8.json" > "$R/layer_fp8.txt" 2>&1
echo "rc=$?"
kill $smi 2> /dev/null
grep -E "\(graph\)|speedup|×|x bf16" "$R/layer_fp8.txt" | head -40
python3 scripts/gpu_clocks.py "$R/smi.csv" 2>&1 | tail -3
BUILD=.gpu/s46/N/b OUT=$R/p timeout 200 scripts/gpu_check.sh python > "$R/python.log" 2>&1
grep -E "passed|failed" "$R/python.log" | tail -n 3
SANITIZE_FILTER='Layer/LayerFp8.ForwardAndBackwardMatchFp8AndBf16References/deepseek:Layer/LayerFp8.ForwardAndBackwardWithRecomputePre/deepseek' \
  SANITIZE_TOOLS='memcheck racecheck' SANITIZE_TIMEOUT=200 BUILD=.gpu/s46/N/b \
  OUT=$R/s timeout 230 scripts/gpu_check.sh sanitize > "$R/sanitize.log" 2>&1
grep -E "finding|FAIL|TIMEOUT|tool|clean|==" "$R/sanitize.log" | tail -n 8
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

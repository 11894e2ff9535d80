#!/usr/bin/env bash
# Session 41, call 4: f = 7e8b281 (the final kernels). compute-sanitizer memcheck, racecheck and
# synccheck over the side permute's tests (DgradPermute.*, the T = 0 case included, which failed
# its all-or-none check in call 1 and so was not sanitized then) and the fused bf16 layer tests
# whose backward runs it (qwen3, gpt-oss's narrow dgrad shape, deepseek, the graph test).
# Prediction: 0 findings in moefuse's kernels.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/f/bins.tar.xz').extractall('.gpu/f')"
export PATH=/usr/local/cuda/bin:$PATH
F='DgradPermute.*:Layer/LayerReference.*/qwen3_fused:Layer/LayerReference.*/gptoss_fused:Layer/LayerReference.*/deepseek_fused:LayerGraph.*'
SANITIZE_FILTER="$F" SANITIZE_TOOLS='memcheck racecheck synccheck' SANITIZE_JOBS=8 \
  SANITIZE_TIMEOUT=400 BUILD=.gpu/f/b OUT=$R/s timeout 540 scripts/gpu_check.sh sanitize \
  > "$R/sanitize.log" 2>&1
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/sanitize.log" | head -20
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 40, call 7 (the budget's remainder): the FP8 layer with FP8 and with bf16 wgrads
# (`--fp8-wgrad both`), all presets, on g (742d418; later commits change comments only), beside
# the bf16 layer in the same process. Prediction: FP8 wgrads as call 3 (fwd+bwd 1.02 / 1.10 /
# 1.27 / 1.20x bf16); bf16 wgrads qwen3 1.10-1.14x (run 24: 1.09 before the 192-wide FC2 and
# FC1 dgrad), the others within 0.97-1.03x of their FP8-wgrad figure.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s40f/bins.tar.xz').extractall('.gpu/s40f')"
export PATH=/usr/local/cuda/bin:$PATH
timeout 200 .gpu/s40f/b/moefuse-bench layer --preset all --mode fused --precision fp8 \
  --fp8-wgrad both --no-torch --json "$R/layer_fp8_wgrads.json" > "$R/layer_fp8_wgrads.txt" 2>&1
echo "rc $?"
grep -E "\(graph\)|speedup" "$R/layer_fp8_wgrads.txt"
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

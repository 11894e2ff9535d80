#!/usr/bin/env bash
# Session 42, call 5: gpt-oss's bf16 graph forward in `layer --preset all --precision fp8` read
# 7.80 ms (call 3; run 40: 7.28) against 6.03-6.17 elsewhere, its eager stages and its graph
# step normal. g = 4b75594 (call 4's build; kernels d6a1992's). Three processes, all presets,
# fused only, no torch: (1) --precision fp8 again, (2) bf16 alone, (3) --precision mxfp8.
# Prediction: (1) reproduces 7.3-7.8 ms, (2) 6.1-6.4, (3) one of the two, which says whether an
# FP8-only path (its kernels' attributes, its weight buffers) leaves the state behind.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s42/g.tar.xz').extractall('.gpu/s42/g')"
export PATH=/usr/local/cuda/bin:$PATH
B=.gpu/s42/g/b/moefuse-bench
for v in fp8 bf16 mxfp8; do
  extra=$([[ $v == bf16 ]] && echo "" || echo "--precision $v")
  timeout 170 $B layer --preset all --mode fused --no-torch $extra \
    --json "$R/layer_$v.json" > "$R/layer_$v.txt" 2>&1
  echo "== $v"; grep -E "\(graph\)" "$R/layer_$v.txt" | grep -E "gpt-oss|qwen3" | head -8
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 53, call 6: the session's final code, main 9bad158 (library = e3ea4fa's plus a comment),
# built here. The whole GPU suite, then the main job (moefuse-bench on its default preset, with
# torch and the dense cuBLAS bound in the same run). Prediction: 202 passed, 2 skipped, CPU 298;
# qwen3 fused forward ~490-520 TFLOP/s, forward + backward ~485-520.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s53
python3 -c "import tarfile; tarfile.open('$S/final.tar.xz').extractall('$S/f')"
B=$S/f/F/b
export PATH=/usr/local/cuda/bin:$PATH
TEST_TIMEOUT=150 BUILD=$B OUT=$R timeout 200 scripts/gpu_check.sh tests > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack
timeout 200 $B/moefuse-bench --json "$R/layer_default.json" > "$R/layer_default.txt" 2>&1
echo "bench rc $?"
grep -E "TFLOP|moefuse|torch|dense" "$R/layer_default.txt" | tail -n 12
pack

#!/usr/bin/env bash
# Session 40, call 5: compute-sanitizer's four tools over gpu_check.sh's default subset (55
# tests since run 39, never run as a whole) on the final code (f, 1e95007: its FP8 forward tests
# now run the 192-wide bf16-output tiles). Prediction: 0 findings, 0 timeouts; the router's
# cuBLAS kernels reported apart as THIRD-PARTY, as in runs 10-35.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s40c/bins.tar.xz').extractall('.gpu/s40c')"
export PATH=/usr/local/cuda/bin:$PATH
SANITIZE_JOBS=12 SANITIZE_TIMEOUT=400 BUILD=.gpu/s40c/b OUT=$R timeout 560 \
  scripts/gpu_check.sh sanitize > "$R/check.log" 2>&1
echo "rc $?"
grep -E "^sanitize |FINDINGS|TIMEOUT|THIRD-PARTY" "$R/check.log" | head -30
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 46, call 4, on N (705b388): why gpt-oss's wgrads (BF16 and FP8 alike, ~5.2 ms for dW1)
# sit far from both their compute and their output bounds. ncu (SpeedOfLight, memory workload,
# one launch each) of the first BF16 and FP8 wgrad kernels of `gemm-fp8 --preset gpt-oss-120b`
# (dW2: [128, 2880, 2880] fp32 out, 4.25 GB, K 512 rows an expert).
# Prediction: DRAM throughput 1.6-2.2 TB/s (35-45 % of peak), the tensor pipe 35-50 % busy:
# neither bound, i.e. the per-tile hand-off (one 64 KiB tile buffer) serialises output and math.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s46/N.tar.xz').extractall('.gpu/s46/N')"
export PATH=/usr/local/cuda/bin:$PATH
timeout 400 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy -k regex:wgrad -c 2 .gpu/s46/N/b/moefuse-bench gemm-fp8 \
  --preset gpt-oss-120b --no-torch > "$R/ncu_wgrad.txt" 2>&1
echo "rc=$?"
grep -E "wgrad|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|SM Busy|Mem Busy|Max Bandwidth|dram__bytes|L1/TEX Hit|L2 Hit" "$R/ncu_wgrad.txt" | head -40
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 52, call 2: main 2f8ebe9's exact build (F: the row+column quantiser by cp.async, 49be7b3,
# and gemm-fp8's torch FP8 baselines).
# 1. bench/torch_gemm_fp8.py alone on DeepGEMM's 4 x 8192 x 4096 x 7168 and a K = 2880 problem,
#    stderr kept: which of torch's FP8 GEMMs this torch runs. Prediction: per-tensor scaled_mm
#    1200-1350 TFLOP/s (ANCHORS: 1315 at 8192^3), fast accum a little faster; blockwise below
#    per-tensor; scaled_grouped_mm row-wise 900-1200; K = 2880 refused for blockwise.
# 2. gemm-fp8 with those rows (all presets). Prediction: our FP8 grouped 1050-1150 TFLOP/s on
#    DeepGEMM's 4 x 8192 x 4096 x 7168, within 0.85-1.0x of cuBLAS's per-tensor dense FP8 and
#    >= 1.0x torch's row-wise grouped.
# 3. quant at the default shape and the wgrad shapes. Prediction: row+column 0.88-0.90 of copy,
#    the rest as run 49 call 9.
# 4. The whole GPU suite on F: 202 passed, 2 skipped (the library is call 1's L).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
S=.gpu/s52
python3 -c "import tarfile; tarfile.open('$S/F.tar.xz').extractall('$S/u')"
B=$S/u/F/b
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
(cd bench && timeout 120 python3 torch_gemm_fp8.py --counts 8192,8192,8192,8192 \
  --problem deepgemm:4096:7168 --warmup 5 --iters 20) > "$R/torch_fp8_probe.txt" 2>&1
(cd bench && timeout 60 python3 torch_gemm_fp8.py --counts 4096,4096,4096,4096 \
  --problem k2880:2880:2880 --warmup 5 --iters 20) >> "$R/torch_fp8_probe.txt" 2>&1
cat "$R/torch_fp8_probe.txt"
pack
start=$SECONDS
timeout 330 $B/moefuse-bench gemm-fp8 --json "$R/gemm_fp8.json" > "$R/gemm_fp8.txt" 2>&1
echo "gemm-fp8 rc $? in $((SECONDS - start)) s"
grep -E "deepgemm 4x8192 +4096x7168|qwen3.*fc1 " "$R/gemm_fp8.txt" | head -16
pack
for shape in "16384 7168 8 2" "131072 1536 128 8" "65536 5760 128 4" "65536 2880 128 4"; do
  read -r m k e t <<< "$shape"
  f="$R/quant_${m}x${k}"
  timeout 40 $B/moefuse-bench quant --m $m --k $k --experts $e --topk $t --json "$f.json" \
    > "$f.txt" 2>&1
  echo "$m x $k: $(grep -E "one read|grouped, gather|amax" "$f.txt" | awk '{print $NF}' | tr '\n' ' ')"
done
pack
left=$((580 - SECONDS))
TEST_TIMEOUT=150 BUILD=$B OUT=$R timeout $((left > 30 ? left : 30)) scripts/gpu_check.sh tests \
  > "$R/check.log" 2>&1
grep -E "^(FAILED|TIMEOUT)|GPU tests|^\[  (PASSED|FAILED)" "$R/check.log" | tail -n 6
pack

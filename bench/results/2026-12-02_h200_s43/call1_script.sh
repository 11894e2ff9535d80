#!/usr/bin/env bash
# Session 43, call 1. m = 887ad7e (main: GEMM modes take --warm-ms; kernels d6a1992's), g = its
# wip/fc1-gather-env (MOEFUSE_GATHER_MAX_FC1 overrides the layer's gather rule, fc1 <= 4096).
# (1) Which forward does qwen3 want warm: wrappers over g, x = the rule as landed (gather FC1),
#     p = MOEFUSE_GATHER_MAX_FC1=0 (permute + TMA FC1 with the overlapped epilogue). Layer fused,
#     fp32 expert grads, warm (--warm-ms 1000, three rounds) and after 5 replays (two rounds).
#     Prediction (forward time p / x): run 20 had 1.019 (gather won) after a few replays; warm,
#     session 42's fused graph forward read 14% over its eager stages while unfused read 0%, so
#     p / x warm 0.97-1.01 on qwen3, 0.99-1.01 on deepseek; steps follow the forward's ms.
# (2) The GEMM table warm: m `gemm --preset all --warm-ms 1000` with torch. Prediction: our
#     times 1-3% above the 5-replay runs', dense cuBLAS 5-16% above, so the "of dense"
#     fractions 0.03-0.10 higher than README's (qwen3 FC1 + GLU 0.78-0.98 -> 0.85-1.0).
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for b in m g; do
  python3 -c "import tarfile,sys; tarfile.open('.gpu/s43/$b.tar.xz').extractall('.gpu/s43/$b')"
done
for v in x: p:0; do
  mkdir -p .gpu/s43/${v%%:*}
  env=""; [[ -n ${v#*:} ]] && env="MOEFUSE_GATHER_MAX_FC1=${v#*:} "
  printf '#!/usr/bin/env bash\n%sexec %s/.gpu/s43/g/b/moefuse-bench "$@"\n' "$env" "$PWD" \
    > .gpu/s43/${v%%:*}/moefuse-bench
  chmod +x .gpu/s43/${v%%:*}/moefuse-bench
done
cat .gpu/s43/p/moefuse-bench
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$R/device.txt"
mkdir -p "$R/warm" "$R/cool"
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --warm-ms 1000" OUT=$R/warm timeout 220 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b deepseek-v3" 3 x=.gpu/s43/x p=.gpu/s43/p \
  > "$R/ab_layer_warm.txt" 2>&1
grep -E "graph|fc1|permute|^[xp]:" "$R/ab_layer_warm.txt" | head -30
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32" OUT=$R/cool timeout 100 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b deepseek-v3" 2 x=.gpu/s43/x p=.gpu/s43/p \
  > "$R/ab_layer_cool.txt" 2>&1
grep -E "graph|^[xp]:" "$R/ab_layer_cool.txt" | head -16
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$R/gemm_warm.smi.csv" 2> /dev/null &
smi=$!
timeout 300 .gpu/s43/m/b/moefuse-bench gemm --preset all --warm-ms 1000 \
  --json "$R/gemm_warm.json" > "$R/gemm_warm.txt" 2>&1
kill $smi
grep -E "moefuse fused|dense|torch" "$R/gemm_warm.txt" | head -30
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

#!/usr/bin/env bash
# Session 42, call 4: what the partial m-blocks cost. g = the final build (`--routing balanced`
# added to the synthetic-routing modes; kernels d6a1992's). Two wrappers over one binary: u runs
# `--routing uniform` (random, counts ~T·k/E ± 3σ), b `--routing balanced` (every expert exactly
# T·k/E rows: 1024 qwen3, 512 gpt-oss, 2048 mixtral and deepseek: whole 128-row m-blocks).
# FLOPs are the same; uniform computes each expert's last, partly empty m-block in full.
# Prediction (time b / u, if time follows the tiles computed): gpt-oss forward GEMMs and dgrads
# 0.89-0.92 (4.5 m-blocks an expert on average against 4), qwen3 0.94-0.96, mixtral and deepseek
# 0.97-0.99; the wgrads (ragged K, no M tail) 0.98-1.00; cuBLAS dense rows 1.00.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s42/g.tar.xz').extractall('.gpu/s42/g')"
for v in u:uniform b:balanced; do
  mkdir -p .gpu/s42/${v%%:*}
  printf '#!/usr/bin/env bash\nexec %s/.gpu/s42/g/b/moefuse-bench "$@" --routing %s\n' \
    "$PWD" "${v#*:}" > .gpu/s42/${v%%:*}/moefuse-bench
  chmod +x .gpu/s42/${v%%:*}/moefuse-bench
done
export PATH=/usr/local/cuda/bin:$PATH
.gpu/s42/g/b/moefuse_cpu_tests --gtest_filter='BenchRouting.*' > "$R/cpu_routing.log" 2>&1
tail -n 1 "$R/cpu_routing.log"
BENCH_ARGS="--no-torch" OUT=$R timeout 280 scripts/ab_bench.sh gemm \
  "qwen3-30b-a3b gpt-oss-120b deepseek-v3 mixtral-8x7b" 2 u=.gpu/s42/u b=.gpu/s42/b \
  > "$R/ab_gemm.txt" 2>&1
grep -E "moefuse fused|dense|^[ub]:" "$R/ab_gemm.txt" | head -30
BENCH_ARGS="--no-torch" OUT=$R timeout 200 scripts/ab_bench.sh gemm-backward \
  "qwen3-30b-a3b gpt-oss-120b" 2 u=.gpu/s42/u b=.gpu/s42/b > "$R/ab_gemm-backward.txt" 2>&1
grep -E "dgrad|dW|^[ub]:" "$R/ab_gemm-backward.txt" | head -30
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

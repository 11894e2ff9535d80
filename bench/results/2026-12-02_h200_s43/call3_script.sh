#!/usr/bin/env bash
# Session 43, call 3: why the longest-first order cost qwen3's and gpt-oss's fc2_wgrad 6-8% under
# uniform routing in call 2 (fc1_wgrad neutral). v = wip/wgrad-order-variants (o + env switches
# MOEFUSE_WGRAD_SORT / MOEFUSE_WGRAD_SNAKE read by the launcher), wrappers: n = neither (index
# order, plain rounds: the old walk), s = sorted only, k = snake only, b = both (= o); m = main.
# Layer fused, fp32 expert grads, fc2_wgrad / fc1_wgrad stages, two rounds.
# Prediction (uniform): n = m (+-1%); the 6-8% follows the sort (s and b slow, k = n), as the
# snake's walk has the same concurrent window as the plain one; zipf: s ~0.9, k ~1.0, b best.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
for d in m v; do
  python3 -c "import tarfile; tarfile.open('.gpu/s43/$d.tar.xz').extractall('.gpu/s43/$d')"
done
for w in n:0:0 s:1:0 k:0:1 b:1:1; do
  IFS=: read -r name sort snake <<< "$w"
  mkdir -p .gpu/s43/$name
  printf '#!/usr/bin/env bash\nMOEFUSE_WGRAD_SORT=%s MOEFUSE_WGRAD_SNAKE=%s exec %s "$@"\n' \
    "$sort" "$snake" "$PWD/.gpu/s43/v/b/moefuse-bench" > .gpu/s43/$name/moefuse-bench
  chmod +x .gpu/s43/$name/moefuse-bench
done
export PATH=/usr/local/cuda/bin:$PATH
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32" OUT=$R/uniform timeout 230 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 2 m=.gpu/s43/m/b n=.gpu/s43/n \
  s=.gpu/s43/s k=.gpu/s43/k b=.gpu/s43/b > "$R/ab_layer_uniform.txt" 2>&1
grep -E "wgrad|graph\) fwd\+bwd|^[mnskb]:" "$R/ab_layer_uniform.txt" | head -16
BENCH_ARGS="--mode fused --no-torch --expert-grads fp32 --routing zipf" OUT=$R/zipf timeout 200 \
  scripts/ab_bench.sh layer "qwen3-30b-a3b gpt-oss-120b" 2 n=.gpu/s43/n s=.gpu/s43/s \
  k=.gpu/s43/k b=.gpu/s43/b > "$R/ab_layer_zipf.txt" 2>&1
grep -E "wgrad|graph\) fwd\+bwd|^[nskb]:" "$R/ab_layer_zipf.txt" | head -16
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

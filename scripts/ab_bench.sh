#!/usr/bin/env bash
# Interleaved A/B of moefuse-bench between builds on one machine, in one device call:
#
#   scripts/ab_bench.sh MODE "PRESET ..." ROUNDS LABEL=BUILD_DIR[:VAR=VALUE,...] [...]
#   e.g. scripts/ab_bench.sh gemm-backward "qwen3-30b-a3b gpt-oss-120b" 2 main=.gpu/main k32=.gpu/k32
#   or one binary two ways: plain=.gpu/t:DEBUG_PLAIN_LOADS=1 cp=.gpu/t
#   BENCH_ARGS: more moefuse-bench options for every run, e.g. "--no-torch" (torch's baseline
#   does not change between builds).
#
# Round by round, every build runs every preset (interleaving spreads the machine's drift over all
# builds), in the given order in odd rounds and reversed in even ones, so that no build always
# runs first (run 31: two builds with identical SASS read 1.025-1.030x apart, the second of each
# round at a 2% lower clock). Each run writes $OUT/ab/MODE_PRESET_LABEL_ROUND.json and .log (OUT
# default gpu-out) and, where nvidia-smi is, .smi.csv: the SM clock, power and clock-event
# reasons every 100 ms while it ran. VAR=VALUE after a build's directory (values without commas or
# blanks, a directory without ':') are set in its runs' environment: a runtime switch compared
# inside one binary, where a rebuild can move a kernel's time by itself (docs/fp8.md, "What
# comparing builds misses"). Then scripts/bench_compare.py prints each preset's rows with the
# builds side by side (mean over rounds), their ratios to the first build and the noise floor (the
# ratios of the cuBLAS and torch rows, code every build shares), and scripts/gpu_clocks.py each
# build's clocks (an H200 at its power limit runs well below its boost clock: run 22).
set -uo pipefail
usage() { sed -n '2,8p' "$0" >&2; exit 2; }
[[ $# -ge 4 ]] || usage
mode=$1 presets=$2 rounds=$3
shift 3
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
# A build's directory and its VAR=VALUE list (empty without one).
build_dir() { local rest=${1#*=}; echo "${rest%%:*}"; }
build_env() { local rest=${1#*=}; [[ $rest == *:* ]] && echo "${rest#*:}" | tr ',' ' '; }
for build in "$@"; do
  [[ $build == *=* && -x $(build_dir "$build")/moefuse-bench ]] ||
    { echo "expected LABEL=BUILD_DIR[:VAR=VALUE,...] with BUILD_DIR/moefuse-bench, got '$build'" >&2
      exit 2; }
  for v in $(build_env "$build"); do
    [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] ||
      { echo "expected VAR=VALUE after the directory of '$build', got '$v'" >&2; exit 2; }
  done
done
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/ab"
# Starts sampling into $1 in the background and prints the sampler's pid (nothing without
# nvidia-smi).
sample_clocks() {
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
    --format=csv,noheader -lms 100 > "$1" 2> /dev/null &
  echo $!
}
status=0
builds=("$@")
reversed=()
for ((i = ${#builds[@]} - 1; i >= 0; i--)); do reversed+=("${builds[i]}"); done
for r in $(seq "$rounds"); do
  if ((r % 2)); then order=("${builds[@]}"); else order=("${reversed[@]}"); fi
  for build in "${order[@]}"; do
    label=${build%%=*} dir=$(build_dir "$build")
    read -r -a vars <<< "$(build_env "$build")"
    for p in $presets; do
      base="$OUT/ab/${mode}_${p}_${label}_$r"
      sampler=$(sample_clocks "$base.smi.csv")
      # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
      env ${vars[@]+"${vars[@]}"} "$dir/moefuse-bench" "$mode" --preset "$p" --json "$base.json" \
        ${BENCH_ARGS:-} \
        > "$base.log" 2>&1 ||
        { echo "FAILED: $label $p round $r ($base.log)"; status=1; }
      [[ -n $sampler ]] && kill "$sampler" 2> /dev/null
    done
  done
done
for p in $presets; do
  runs=()
  for build in "$@"; do
    for r in $(seq "$rounds"); do
      f="$OUT/ab/${mode}_${p}_${build%%=*}_$r.json"
      [[ -f $f ]] && runs+=("${build%%=*}:$f")
    done
  done
  echo "== moefuse-bench $mode --preset $p"
  [[ ${#runs[@]} -gt 0 ]] && python3 "$(dirname "$0")/bench_compare.py" "${runs[@]}"
done
clocks=()
for build in "$@"; do
  for f in "$OUT/ab/${mode}_"*"_${build%%=*}_"*.smi.csv; do
    [[ -s $f ]] && clocks+=("${build%%=*}:$f")
  done
done
if [[ ${#clocks[@]} -gt 0 ]]; then
  echo "== clocks while each build ran (nvidia-smi, every 100 ms)"
  python3 "$(dirname "$0")/gpu_clocks.py" "${clocks[@]}"
fi
exit $status

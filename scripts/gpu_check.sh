#!/usr/bin/env bash
# The whole GPU check in one command, for the H200 machine (device tool): device facts, the GPU and
# CPU test suites, the SASS check (HGMMA present, no C7510-serialised wgmma), then the benchmarks.
# Build here first (scripts/build.sh) and carry build/release; results land in $OUT (default
# ./gpu-out), at most 8 files so that the device tool brings them all back.
#
#   scripts/gpu_check.sh [tests] [python] [example] [gaps] [sanitize] [ep] [fuzz] [sass] [bench]
#                        [profile]
#   (default: tests python sass bench)
# Environment: GTEST_FILTER narrows the GPU tests (EP_GTEST_FILTER the EP tests; EP_BENCH_ARGS are
# moefuse-ep-bench's); TEST_TIMEOUT bounds each test and BENCH_TIMEOUT each bench mode (seconds);
# BENCH_MODES lists the bench modes to run; EXAMPLE_ARGS are extra arguments of
# examples/train_moe_lm.py (e.g. --steps 50); SANITIZE_* and FUZZ_* are described at their stages.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
BUILD=${BUILD:-build/release}
mkdir -p "$OUT"
stages=${*:-tests python sass bench}
export PATH=/usr/local/cuda/bin:$PATH

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv
} 2>&1 | tee "$OUT/device.txt"

status=0
if [[ " $stages " == *" tests "* ]]; then
  # One process per test, 16 side by side: a CUDA fault is sticky for its process, so isolated
  # tests fail alone (and name themselves), and the single-threaded CPU references run in parallel.
  # A test stopped by TEST_TIMEOUT is reported as TIMEOUT (a hang, or a reference too slow).
  echo "== GPU tests (one process each, ${TEST_JOBS:-16} at a time)"
  # Each line ends with the test's wall time, so the slow ones (CPU references) can be found.
  run_one() {
    local log rc start=$EPOCHREALTIME
    log=$(timeout "${TEST_TIMEOUT:-300}" "$BUILD/moefuse_gpu_tests" --gtest_filter="$1" 2>&1)
    rc=$?
    local took
    took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f s", b - a}')
    case $rc in
      0) grep -q '^\[  SKIPPED \] 1 test' <<< "$log" && echo "SKIPPED $1 ($took)" ||
           echo "PASSED $1 ($took)" ;;
      124) echo "TIMEOUT $1 ($took)" ;;
      # The replay line (tests/common/test_main.cpp) first: a long failure log is cut at 60 lines.
      *) echo "FAILED $1 ($took)"
         grep '^\[  REPLAY  \]' <<< "$log"
         grep -vE '^(\[ +(RUN|OK|REPLAY) +\]|\[[-=]+\]|Note: |Running main|$)' <<< "$log" |
           head -n 60 ;;
    esac
  }
  export -f run_one
  export BUILD
  # Every check's error against its bound (tests/common/margins.h): the closest are printed below.
  MOEFUSE_TEST_MARGINS=$(mktemp)
  export MOEFUSE_TEST_MARGINS
  "$BUILD/moefuse_gpu_tests" --gtest_list_tests --gtest_filter="${GTEST_FILTER:-*}" |
    awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' |
    xargs -P "${TEST_JOBS:-16}" -I{} bash -c 'run_one "$1"' _ {} > "$OUT/tests.log"
  grep -vE '^(PASSED|SKIPPED) ' "$OUT/tests.log"
  awk '$1 == "PASSED" {p++} $1 == "SKIPPED" {s++} $1 == "FAILED" {f++} $1 == "TIMEOUT" {t++}
       END {printf "GPU tests: %d passed, %d failed, %d timed out, %d skipped\n", p, f, t, s}
       END {exit (f + t > 0)}' "$OUT/tests.log" || status=1
  if [[ -s $MOEFUSE_TEST_MARGINS ]]; then
    echo "== the GPU checks closest to their bounds"
    python3 scripts/test_margins.py "$MOEFUSE_TEST_MARGINS" | tee -a "$OUT/tests.log"
  fi
  rm -f "$MOEFUSE_TEST_MARGINS"
  unset MOEFUSE_TEST_MARGINS
  # --gtest_brief prints only failures and the summary; all of it goes to the log (run 12 lost a
  # failing CPU test's name to a tail of the summary's last lines).
  echo "== CPU tests"
  env -u GTEST_FILTER "$BUILD/moefuse_cpu_tests" --gtest_brief=1 > "$OUT/cpu_tests.log" 2>&1 ||
    status=1
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|^\[==' "$OUT/cpu_tests.log" | tail -n 40 |
    tee -a "$OUT/tests.log"
fi

# The Python package against the library built here: pip install as the README says (no build
# isolation: the device has no registry), then the pytest suite, GPU tests included.
if [[ " $stages " == *" python "* || " $stages " == *" example "* || " $stages " == *" gaps "* ]]; then
  export MOEFUSE_LIBRARY=$PWD/$BUILD/libmoefuse_c.so
  # The EP library (built with NCCL): moefuse.ep's tests skip without it.
  export MOEFUSE_EP_LIBRARY=$PWD/$BUILD/libmoefuse_ep_c.so
  python3 -m pip install --no-build-isolation --no-deps -q -e ./python > "$OUT/pip.log" 2>&1 ||
    { echo "pip install failed (log in pip.log); using PYTHONPATH"; export PYTHONPATH=$PWD/python; }
fi
if [[ " $stages " == *" python "* ]]; then
  echo "== Python tests"
  # --durations: the slowest tests go in the log, as the GPU tests' times do (device time is
  # what a session runs short of).
  timeout 600 python3 -m pytest -q -rs --durations=10 python/tests 2>&1 | tee "$OUT/pytest.log" | tail -n 30
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ " $stages " == *" example "* ]]; then
  echo "== examples/train_moe_lm.py ${EXAMPLE_ARGS:-}"
  timeout 1200 python3 examples/train_moe_lm.py --out "$OUT/moe_lm" ${EXAMPLE_ARGS:-} 2>&1 |
    tee "$OUT/example.log" | tail -n 40
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi

# Idle time between the kernels of the layer's fwd+bwd graph (torch.profiler over graph replays).
if [[ " $stages " == *" gaps "* ]]; then
  echo "== kernel gaps of the layer graph"
  timeout 600 python3 bench/layer_gaps.py --preset "${GAPS_PRESET:-all}" --json "$OUT/gaps.json" ||
    status=1
fi

# compute-sanitizer's four tools over the GPU tests, one process per test (a finding names its
# test). racecheck and initcheck run a kernel 10-100x slower, so SANITIZE_FILTER defaults to a
# fast subset (50 tests) that still reaches every kernel family: router top-k and backward,
# dispatch, the quantisers (the MXFP8 qdq passes too), the bf16 and FP8 grouped GEMMs (forward,
# dgrad and the FP8 dGLU's hand-off, wgrad) and the whole layer (fused, unfused, recompute,
# shared expert, FP8, MXFP8, graphs, NaN/Inf inputs) at test size, plus the FP8 GEMM at
# DeepGEMM's K (run 11's racecheck hazard showed in that test, 56 K blocks a tile, and not in the
# subset's small-K FP8 tests); left out
# are the exhaustive codec sweeps (every float) and the repeats of the same kernels at more
# shapes.
# SANITIZE_FILTER='*' runs everything.
# SANITIZE_TOOLS picks tools, SANITIZE_TIMEOUT bounds each test under each tool.
# Reports located only in cuBLAS's kernels (the router's logits GEMMs: nvjet_*, cublasLt::*) are
# counted apart as THIRD-PARTY, not as findings: in run 10 racecheck flagged shared-memory hazards
# inside nvjet kernels and initcheck reads of cuBLAS's split-K partials in
# RouterLogits.ForwardAndBackwardGemmsMatchReference (whose results match the reference to 1e-5),
# and excluding those kernels from instrumentation is worse: their writes then go untracked, so
# initcheck blames moefuse's kernels that read them and racecheck fails on the hardware exception.
# A test that fails argument checks before any CUDA call ("terminated before first instrumented
# API call") has nothing to check and is reported as NO-GPU-WORK.
if [[ " $stages " == *" sanitize "* ]]; then
  echo "== compute-sanitizer ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}"
  : > "$OUT/sanitize.log"
  sanitize_one() {
    local log errors sites
    log=$(timeout "${SANITIZE_TIMEOUT:-600}" compute-sanitizer --tool "$1" --print-limit 20 \
      --error-exitcode 99 "$BUILD/moefuse_gpu_tests" --gtest_filter="$2" 2>&1)
    case $? in
      0) echo "CLEAN $1 $2"; return ;;
      124) echo "TIMEOUT $1 $2"; return ;;
    esac
    errors=$(grep -oE '(ERROR SUMMARY: [0-9]+|[0-9]+ hazards? displayed)' <<< "$log" |
      grep -oE '[0-9]+' | tail -n 1)
    # The kernels the reports name (memcheck/initcheck "at K+0x..", racecheck "access at K+0x..").
    sites=$(grep -E '^=+ +(at |.*access at )' <<< "$log")
    if grep -q 'terminated before first instrumented API call' <<< "$log" &&
       grep -q '^\[  PASSED  \] 1 test' <<< "$log"; then
      echo "NO-GPU-WORK $1 $2"
    elif [[ -n $sites ]] && ! grep -q 'FAILED' <<< "$log" &&
         ! grep -vqE 'nvjet_|cublasLt::' <<< "$sites"; then
      echo "THIRD-PARTY $1 $2 ($errors errors, all in cuBLAS kernels)"
    else
      echo "FINDINGS $1 $2 ($errors errors)"
      grep -E '^=+ |Failure|FAILED' <<< "$log" | head -n 40
    fi
  }
  export -f sanitize_one
  export BUILD
  # Quoted: the patterns must reach gtest, not the shell's globbing. The cluster tests walk the
  # tile-slot ring and the two-CTA stage release, where racecheck found unordered slot reads
  # (docs/RELIABILITY.md, run 39).
  default_filter=(
    'Router*' 'Dispatch*' 'ExpertOffsets.*' 'QuantGpu.Blockwise*' 'QuantGpu.Mxfp8*'
    'GroupedGemm.SkewedRouting*' 'GroupedGemm.GatherFusedFc1' 'GroupedGemm.ClusterPairsAndPhantoms'
    'GroupedGemm.OneKBlockTilesOnOneCta' 'GroupedGemmBackward.Fc2DgradClusterGroupsAndPhantoms'
    'GroupedGemmBackward.DgradRagged*'
    'GroupedGemmBackward.WgradGather*' 'GroupedGemmFp8.Fc1EveryActivation'
    'GroupedGemmFp8.DeepGemmShapeRagged'
    'GroupedGemmMxfp8.Fc1SwiGluBiasAndPreActivation' 'Fp8Dgrad.Fc1Dgrad*'
    'Fp8Dgrad.Fc2DgradEveryActivation'
    'GroupedGemmFp8Wgrad.RaggedExperts*' 'Layer/LayerReference.*/qwen3_*'
    'Layer/LayerReference.*/deepseek_fused' 'LayerGraph.*'
    'Layer/LayerFp8.ForwardAndBackwardMatch*/deepseek' 'LayerFp8Edges.*' 'LayerNonFinite.*'
    'QuantQdqGpu.RowsMatch*' 'QuantQdqGpu.ColsWithOffsets*' 'LayerMxfp8Edges.*'
  )
  filter=${SANITIZE_FILTER:-$(IFS=:; echo "${default_filter[*]}")}
  tests=$("$BUILD/moefuse_gpu_tests" --gtest_list_tests --gtest_filter="$filter" |
    awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}')
  [[ -n $tests ]] || { echo "SANITIZE_FILTER matches no test" | tee -a "$OUT/sanitize.log"; status=1; }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    xargs -P "${SANITIZE_JOBS:-8}" -I{} bash -c 'sanitize_one "$1" "$2"' _ "$tool" {} <<< "$tests" |
      tee -a "$OUT/sanitize.log" | grep -v '^CLEAN '
    awk -v t="$tool" '$2 != t {next} $1 == "CLEAN" {c++} $1 == "TIMEOUT" {to++}
         $1 == "NO-GPU-WORK" {n++} $1 == "THIRD-PARTY" {p++}
         $1 == "FINDINGS" {f++; e += substr($4, 2)}
         END {printf "sanitize %s: %d tests, %d with findings (%d errors), %d timed out; " \
                     "%d with reports only in cuBLAS kernels, %d without GPU work\n",
                     t, c + f + to + n + p, f, e, to, p, n}
         END {exit (f + to > 0)}' "$OUT/sanitize.log" | tee -a "$OUT/sanitize.log" || status=1
  done
fi

# Expert parallelism over NCCL's device API (tests/gpu_ep): needs two or more sm_90 GPUs of one
# NVLink domain, else its tests skip; not built when configure found no NCCL. NVLink multicast
# stays off (NCCL_NVLS_ENABLE=0, the device machines' policy). The device API's structs must match
# the headers of the build (before NCCL 2.29: the same release, or EpComm refuses), so
# NCCL_LIBRARY_DIR, else the python venv's nvidia-nccl, goes first on the loader path (run 12:
# the H200 machine's default libnccl was 2.28.3, its torch venv's 2.28.9 as here);
# NCCL_DEBUG=VERSION logs the one that loaded.
if [[ " $stages " == *" ep "* ]]; then
  echo "== EP tests (NCCL)"
  if [[ -x $BUILD/moefuse_ep_tests ]]; then
    nccl_dir=${NCCL_LIBRARY_DIR:-$(python3 -c 'import nvidia.nccl as n, os
print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)}
    LD_LIBRARY_PATH=${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 \
      NCCL_DEBUG=${NCCL_DEBUG:-VERSION} GTEST_FILTER="${EP_GTEST_FILTER:-*}" \
      timeout "${TEST_TIMEOUT:-300}" "$BUILD/moefuse_ep_tests" > "$OUT/ep_tests.log" 2>&1 ||
      status=1
    grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[       OK |Failure|NCCL version' "$OUT/ep_tests.log" |
      head -n 40
    # The transfers against NCCL's all-to-all and the layer against one GPU (EP_BENCH_ARGS, e.g.
    # --preset gpt-oss-120b); it prints "needs at least two" and measures nothing on one GPU.
    echo "== moefuse-ep-bench ${EP_BENCH_ARGS:-}"
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH=${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 \
      timeout "${BENCH_TIMEOUT:-600}" "$BUILD/moefuse-ep-bench" ${EP_BENCH_ARGS:-} \
      --json "$OUT/ep_bench.json" > "$OUT/ep_bench.log" 2>&1 || status=1
    tail -n 40 "$OUT/ep_bench.log"
  else
    echo "moefuse_ep_tests not built (no NCCL at configure time)"
  fi
fi

# The fuzz harness for FUZZ_SECONDS (default 300): random layers forward + backward against the
# CPU reference; FUZZ_SEED reruns a seed (every failure prints its one-case reproduction command).
if [[ " $stages " == *" fuzz "* ]]; then
  echo "== moefuse-fuzz --seconds ${FUZZ_SECONDS:-300} ${FUZZ_SEED:+--seed $FUZZ_SEED}"
  timeout $((${FUZZ_SECONDS:-300} + 600)) "$BUILD/moefuse-fuzz" --seconds "${FUZZ_SECONDS:-300}" \
    ${FUZZ_SEED:+--seed "$FUZZ_SEED"} > "$OUT/fuzz.log" 2>&1 || status=1
  grep -vE '^PASS ' "$OUT/fuzz.log" | tail -n 40
fi

if [[ " $stages " == *" sass "* ]]; then
  echo "== SASS"
  {
    for f in "$BUILD"/moefuse-bench; do
      echo "$f: HGMMA $(cuobjdump --dump-sass "$f" | grep -c HGMMA)," \
           "QGMMA $(cuobjdump --dump-sass "$f" | grep -c QGMMA)"
    done
    cuobjdump --dump-resource-usage "$BUILD/moefuse-bench" 2>/dev/null | grep -E "Function|REG" | head -80
    # The FP8 GEMM's consumer K loop, SASS instructions per K block (issue-bound: docs/fp8.md).
    python3 scripts/sass_kloop.py "$BUILD/moefuse-bench"
  } 2>&1 | tee "$OUT/sass.txt"
fi

if [[ " $stages " == *" profile "* ]]; then
  # Hardware counters of the grouped GEMMs on the qwen3 preset (the shape furthest from its
  # bound): throughput, warp stalls and the scheduler, for the first launches of each kernel.
  # --clock-control none: leave the GPU's clocks as we found them (device README).
  echo "== ncu"
  timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section LaunchStats -k regex:'grouped_gemm|dgrad|wgrad' -c 6 \
    "$BUILD/moefuse-bench" gemm --preset qwen3-30b-a3b --warmup 0 --iters 1 > "$OUT/ncu.txt" 2>&1 ||
    status=1
  grep -E "^  [a-z_]+.*grouped|Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|Issued Warp" \
    "$OUT/ncu.txt" | head -60
fi

if [[ " $stages " == *" bench "* ]]; then
  echo "== benchmarks"
  bench="$BUILD/moefuse-bench"
  for mode in ${BENCH_MODES:-$($bench help | awk '/^  [a-z]/ {print $1}')}; do
    [[ $mode == reference ]] && continue
    echo "-- moefuse-bench $mode"
    timeout "${BENCH_TIMEOUT:-900}" $bench "$mode" --json "$OUT/bench_$mode.json" 2>&1 | tee -a "$OUT/bench.log" ||
      status=1
  done
fi
exit $status

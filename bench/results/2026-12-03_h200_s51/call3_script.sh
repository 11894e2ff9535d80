#!/usr/bin/env bash
# Session 51, call 3 (debug). Under ncu (launches serialised, natural clocks, no cache flush) A's
# and E's wgrads are identical (FP8 1.811 / 1.813 ms, same bytes, same 1.75 GHz clock); only
# back-to-back event timing shows E ~1.10x. So: the SM clock and power while the sweep runs.
# Prediction: E's wgrad phases at a lower SM clock than A's (power-capped), else equal clocks.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
pack() { (cd "$R" && tar czf ../r.tgz .); }
python3 -c "import tarfile; tarfile.open('.gpu/s51/pads.tar.xz').extractall('.gpu/s51/pads')"
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > "$R/smi_before.txt" 2>&1
for b in A E A E; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 20 > "$R/smi_$b.csv" 2>&1 &
  smi=$!
  sleep 0.5
  DEBUG_PAD_SWEEP=1 timeout 120 .gpu/s51/pads/$b/b/moefuse-bench gemm-fp8 --preset gpt-oss-120b \
    > "$R/sweep_$b.log" 2>&1
  sleep 0.5
  kill $smi
  mv "$R/smi_$b.csv" "$R/smi_${b}_$SECONDS.csv"; mv "$R/sweep_$b.log" "$R/sweep_${b}_$SECONDS.log"
  echo "== $b"; grep DEBUG "$R"/sweep_${b}_$SECONDS.log | head -4 | cut -c1-60
  python3 - "$R/smi_${b}_$SECONDS.csv" <<'PY'
import sys, statistics as st
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 5]
busy = [r for r in rows if float(r[3].split()[0]) > 300]
if busy:
    clk = [float(r[1].split()[0]) for r in busy]; pw = [float(r[3].split()[0]) for r in busy]
    print(f"samples {len(rows)} busy {len(busy)}: sm clock median {st.median(clk):.0f} MHz "
          f"(min {min(clk):.0f}), power median {st.median(pw):.0f} W, temp {busy[-1][4]}, "
          f"reasons {sorted(set(r[5].strip() for r in busy))}")
PY
done
pack

#!/usr/bin/env bash
# Session 42, call 6: is the layer's graph forward timed at a sustained clock? Call 5 read
# gpt-oss's bf16 graph forward 6.8-7.1 ms in `--preset all --mode fused` processes (after qwen3's
# runs, no pause) against 6.03-6.17 in one-preset processes and after the torch subprocess's
# start in `--mode both`, its eager stages the same (~6.19 ms). Hypothesis: the power limiter
# averages over a window, so a forward timed after an idle spell runs at a higher clock. Test:
# one-preset processes, warm-up 5 (the default) against 400 graph replays before timing, with
# nvidia-smi sampling. Prediction: warm-up 400 reads gpt-oss 6.8-7.1 ms (qwen3 ~2-4% slower too)
# and a lower median SM clock; if not, the hypothesis is refuted.
set -uo pipefail
R=$OUT/r
mkdir -p "$R"
python3 -c "import tarfile; tarfile.open('.gpu/s42/g.tar.xz').extractall('.gpu/s42/g')"
B=.gpu/s42/g/b/moefuse-bench
for round in 1 2; do
  for p in gpt-oss-120b qwen3-30b-a3b; do
    for w in 5 400; do
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
        --format=csv,noheader -lms 100 > "$R/${p}_w${w}_$round.smi.csv" 2> /dev/null &
      smi=$!
      timeout 120 $B layer --preset $p --mode fused --no-torch --warmup $w \
        --json "$R/${p}_w${w}_$round.json" > "$R/${p}_w${w}_$round.txt" 2>&1
      kill $smi 2> /dev/null
      mhz=$(awk -F', ' '{print $2}' "$R/${p}_w${w}_$round.smi.csv" | sort -n | awk '{a[NR]=$1} END {print a[int(NR/2)+1]}')
      echo "$p warmup $w round $round: $(grep -E '\(graph\)' "$R/${p}_w${w}_$round.txt" | awk '{printf "%s %s ms; ", $(NF-5), $(NF-4)}') median SM $mhz"
    done
  done
done
cd "$R" && tar czf ../r.tgz . && cd .. && rm -rf "$R"

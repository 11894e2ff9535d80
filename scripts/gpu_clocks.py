#!/usr/bin/env python3
"""What clock the GPU ran at while a benchmark ran, and why: nvidia-smi samples summarised.

Run 22 found the H200 at its 700 W power limit through the layer benchmarks, its SM clock at
~1530 MHz of 1980 (the clock-event reason "SW power cap" in 97% of the samples): a kernel's time
there is not its time in ncu, which runs one launch at a time at the boost clock. So a
benchmark's numbers come with the clocks they ran at. scripts/ab_bench.sh samples them beside
every run with

  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \\
             --format=csv,noheader -lms 100

and this prints, per file or per label (LABEL:FILE arguments pool a build's runs), the busy
samples' SM clock and power percentiles and the share of them each clock-event reason held.
Busy: the reason's "GPU idle" bit clear.
"""
import argparse
import collections
import sys

# nvidia-smi's clocks_event_reasons bits (nvmlClocksEventReason*).
REASONS = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "HW power brake",
    0x100: "display clocks",
}


def parse(lines):
    """(SM MHz, W, reason bits) of each well-formed sample; other lines are skipped."""
    samples = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            continue
        try:
            mhz = float(fields[1].split()[0])
            watts = float(fields[2].split()[0])
            reasons = int(fields[3], 16)
        except (ValueError, IndexError):
            continue
        samples.append((mhz, watts, reasons))
    return samples


def percentile(sorted_values, q):
    """The nearest-rank value (halves rounded up)."""
    return sorted_values[int(q * (len(sorted_values) - 1) + 0.5)]


def summary(samples):
    busy = [s for s in samples if not s[2] & 0x1]
    if not busy:
        return f"{len(samples)} samples, none busy"
    mhz = sorted(s[0] for s in busy)
    watts = sorted(s[1] for s in busy)
    held = collections.Counter(bit for s in busy for bit in REASONS if s[2] & bit)
    reasons = ", ".join(f"{REASONS[bit]} {100 * n / len(busy):.0f}%"
                        for bit, n in held.most_common()) or "none"
    return (f"{len(busy)} busy samples: SM MHz p10/p50/p90 "
            f"{percentile(mhz, .1):.0f}/{percentile(mhz, .5):.0f}/{percentile(mhz, .9):.0f}, "
            f"W {percentile(watts, .1):.0f}/{percentile(watts, .5):.0f}/"
            f"{percentile(watts, .9):.0f}; reasons: {reasons}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="[LABEL:]FILE of nvidia-smi samples")
    args = ap.parse_args(argv)
    pooled = collections.OrderedDict()
    for arg in args.files:
        label, _, path = arg.rpartition(":")
        try:
            with open(path) as f:
                pooled.setdefault(label or path, []).extend(parse(f))
        except OSError as e:
            ap.error(f"cannot read the samples file '{path}': {e.strerror}")
    for label, samples in pooled.items():
        print(f"{label}: {summary(samples)}")


if __name__ == "__main__":
    sys.exit(main())

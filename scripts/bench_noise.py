#!/usr/bin/env python3
"""How much each benchmark row moves between two processes of one build, over recorded A/B runs.

    python3 scripts/bench_noise.py [--top N] [--min-pairs N] [RESULTS_DIR ...]

scripts/ab_bench.sh leaves MODE_PRESET_LABEL_ROUND.json per run (bench/results keeps them with a
callN_ prefix). For every build (label) that ran a preset in rounds 1 and 2 of one call, each row's
|round 2 / round 1 - 1| is the change one process's figure shows with no change of code. Printed:
the rows that move most (the mean over such pairs, where at least --min-pairs of them exist),
then the median row; for the control rows (names holding cublas or torch: code every build
shares) also the mean |B / A - 1| of two builds' first rounds, which differs from the same-build
figure only if something set per build moves them. Without directories: bench/results.
"""

import argparse
import collections
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_compare import CONTROLS, metric_of, rows_of  # noqa: E402

RUN = re.compile(r"^(?P<call>call\d+_)?(?P<mode>[a-z0-9-]+?)_(?P<preset>[a-z0-9.-]+?-[a-z0-9.-]+)"
                 r"_(?P<label>[A-Za-z0-9.+-]+)_(?P<round>\d+)\.json$")
METRICS = ["median_ms", "ms", "median_us"]


def runs(dirs):
    """{(dir, call, mode, preset): {label: {round: {row name: metric}}}} of every A/B run file."""
    found = collections.defaultdict(lambda: collections.defaultdict(dict))
    for d in dirs:
        for f in sorted(pathlib.Path(d).rglob("*.json")):
            m = RUN.match(f.name)
            if not m:
                continue
            values = {}
            for key, row in rows_of(f):
                metric = metric_of(row, METRICS)
                if metric and metric[1] > 0:
                    values[f"{m['mode']}: " + " ".join(v for _, v in key[1:])] = metric[1]
            found[(str(f.parent), m["call"], m["mode"], m["preset"])][m["label"]][
                int(m["round"])] = values
    return found


def moves(found):
    """({row: [same-build |r2/r1 - 1|]}, {row: [|B/A - 1| of two builds' first rounds]})."""
    within, between = collections.defaultdict(list), collections.defaultdict(list)
    for builds in found.values():
        for rounds in builds.values():
            if 1 in rounds and 2 in rounds:
                for row, v in rounds[1].items():
                    if row in rounds[2]:
                        within[row].append(abs(rounds[2][row] / v - 1))
        labels = sorted(builds)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                first_a, first_b = builds[a].get(1, {}), builds[b].get(1, {})
                for row, v in first_a.items():
                    if row in first_b:
                        between[row].append(abs(first_b[row] / v - 1))
    return within, between


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", help="directories searched for A/B run files "
                   "(default bench/results)")
    p.add_argument("--top", type=int, default=20, help="rows printed (default 20)")
    p.add_argument("--min-pairs", type=int, default=5,
                   help="same-build pairs a row needs to be listed (default 5)")
    args = p.parse_args(argv)
    dirs = args.dirs or [pathlib.Path(__file__).resolve().parents[1] / "bench" / "results"]
    for d in dirs:
        if not pathlib.Path(d).is_dir():
            p.error(f"{d}: no such directory")
    within, between = moves(runs(dirs))
    listed = {row: v for row, v in within.items() if len(v) >= args.min_pairs}
    if not listed:
        p.error(f"no row has {args.min_pairs} same-build pairs of rounds 1 and 2")
    print("same build, rounds 1 and 2: mean |r2/r1 - 1| | pairs | "
          "control rows: two builds' first rounds | pairs | row")
    for row, v in sorted(listed.items(), key=lambda kv: -statistics.mean(kv[1]))[:args.top]:
        other = between.get(row, []) if any(c in row for c in CONTROLS) else []
        cross = f"{statistics.mean(other):.1%} | {len(other)}" if other else "- | -"
        print(f"{statistics.mean(v):.1%} | {len(v)} | {cross} | {row}")
    means = [statistics.mean(v) for v in listed.values()]
    print(f"median row: {statistics.median(means):.1%} over {len(means)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())

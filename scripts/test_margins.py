#!/usr/bin/env python3
"""The checks that came closest to their bounds, from MOEFUSE_TEST_MARGINS files.

    MOEFUSE_TEST_MARGINS=margins.tsv build/release/moefuse_gpu_tests   (or any test run, repeated)
    python3 scripts/test_margins.py [--top N] FILE [...]

Each line of a file is one check of one run (tests/common/margins.h): test, what, error, bound,
error / bound, seed. Per (test, what), over all runs: the largest error / bound, its mean, the
runs, and the seed of the worst (MOEFUSE_TEST_SEED=<it> replays that draw). A check whose worst
run nears 1 will fail by chance in some run to come: widen what it tolerates for a reason, or
move its data off the edge it sits on.
"""

import argparse
import collections
import pathlib
import sys


def read(paths):
    """{(test, what): [(ratio, seed)]} over every well-formed line; raises ValueError on others."""
    checks = collections.defaultdict(list)
    for path in paths:
        for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
            fields = line.split("\t")
            if len(fields) != 6:
                raise ValueError(f"{path}:{n}: expected 6 tab-separated fields, got {len(fields)}")
            test, what, _, _, ratio, seed = fields
            checks[(test, what)].append((float(ratio), seed))
    return checks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="files written with MOEFUSE_TEST_MARGINS")
    p.add_argument("--top", type=int, default=15, help="checks printed (default 15)")
    args = p.parse_args(argv)
    for f in args.files:
        if not pathlib.Path(f).is_file():
            p.error(f"{f}: no such file")
    try:
        checks = read(args.files)
    except ValueError as e:
        p.error(str(e))
    if not checks:
        p.error("no check recorded in the files")
    print("worst error/bound | mean | runs | check | seed of the worst")
    worst = sorted(checks.items(), key=lambda kv: -max(r for r, _ in kv[1]))
    for (test, what), runs in worst[:args.top]:
        ratio, seed = max(runs)
        mean = sum(r for r, _ in runs) / len(runs)
        print(f"{ratio:.3f} | {mean:.3f} | {len(runs)} | {test} {what} | {seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

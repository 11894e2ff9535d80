#!/usr/bin/env python3
"""Side-by-side comparison of moefuse-bench JSON reports from builds under test (A/B runs).

    python3 scripts/bench_compare.py [--metric median_ms] LABEL:FILE [LABEL:FILE ...]

Every row of every report is keyed by its identifying columns (preset, op, variant, mode, stage,
pass, ... : the string-valued ones); a key's metric is averaged over the files of each label
(interleaved rounds of one build share a label) and printed with one column per label, in the
order the labels first appear, and each label's ratio to the first. Rows a label lacks print "-".
"""

import argparse
import json
import pathlib
import sys


def rows_of(report_file: pathlib.Path):
    """(key, row) for every row of every report in a moefuse-bench --json file."""
    data = json.loads(report_file.read_text())
    for report in data["reports"]:
        for row in report["rows"]:
            key = tuple((k, v) for k, v in row.items() if isinstance(v, str) and v != "-")
            yield (report["title"],) + key, row


def compare(pairs, metric: str):
    """{key: {label: mean of the metric}}, labels in first-seen order."""
    sums, labels = {}, []
    for label, path in pairs:
        if label not in labels:
            labels.append(label)
        for key, row in rows_of(path):
            value = row.get(metric)
            if isinstance(value, (int, float)) and value >= 0:
                sums.setdefault(key, {}).setdefault(label, []).append(float(value))
    table = {key: {label: sum(v) / len(v) for label, v in by_label.items()}
             for key, by_label in sums.items()}
    return table, labels


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="LABEL:FILE, a moefuse-bench --json output")
    p.add_argument("--metric", default="median_ms", help="the numeric column (default median_ms)")
    args = p.parse_args(argv)
    pairs = []
    for run in args.runs:
        label, sep, path = run.partition(":")
        if not sep or not label or not path:
            p.error(f"expected LABEL:FILE, got {run!r}")
        if not pathlib.Path(path).is_file():
            p.error(f"{path}: no such file")
        pairs.append((label, pathlib.Path(path)))
    table, labels = compare(pairs, args.metric)
    if not table:
        p.error(f"no row of the files has a numeric {args.metric!r}")
    print(" | ".join([args.metric] + labels + [f"{b}/{labels[0]}" for b in labels[1:]]))
    for key, by_label in table.items():
        name = " ".join(v for _, v in key[1:])
        cells = [f"{by_label[b]:.4g}" if b in by_label else "-" for b in labels]
        base = by_label.get(labels[0])
        ratios = [f"{by_label[b] / base:.3f}" if base and b in by_label else "-"
                  for b in labels[1:]]
        print(" | ".join([name] + cells + ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())

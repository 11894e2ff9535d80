#!/usr/bin/env python3
"""Side-by-side comparison of moefuse-bench JSON reports from builds under test (A/B runs).

    python3 scripts/bench_compare.py [--metric median_ms,ms,median_us] LABEL:FILE [...]

Every row of every report is keyed by its identifying columns (preset, op, variant, mode, stage,
pass, ... : the string-valued ones); a key's metric is averaged over the files of each label
(interleaved rounds of one build share a label) and printed with one column per label, in the
order the labels first appear, and each label's ratio to the first. Rows a label lacks print "-".
--metric lists columns in order of preference, a row taking the first it has: the default reads
the GEMM modes' median_ms, the layer totals' ms and the dispatch kernels' and layer stages'
median_us.

Two measures of noise come with it. The last column, the round spread, is the largest
max / min - 1 of one label's rounds of that row: one process's figure moves by that much with no
change at all. Over the A/B runs in bench/results up to session 49, the same build's two rounds
differed by a mean 4.4-4.9 % on qwen3's forward GEMM stages, 4-7 % on several cuBLAS rows and
0.7 % on the median row (scripts/bench_noise.py). After the table comes each label's range of
ratios over the control rows: rows whose names hold one of --control's substrings (default
cublas,torch), code every build shares. A ratio inside either is no evidence of a change: in
session 49, cuBLAS's dense GEMMs read 0.90-1.16x between builds in one device call.
"""

import argparse
import json
import pathlib
import sys


# Substrings naming the rows of code every build shares (cuBLAS's and torch's baselines).
CONTROLS = ("cublas", "torch")


def rows_of(report_file: pathlib.Path):
    """(key, row) for every row of every report in a moefuse-bench --json file."""
    data = json.loads(report_file.read_text())
    for report in data["reports"]:
        for row in report["rows"]:
            key = tuple((k, v) for k, v in row.items() if isinstance(v, str) and v != "-")
            yield (report["title"],) + key, row


def metric_of(row, metrics):
    """(name, value) of the row's first numeric, non-negative column among `metrics`, or None."""
    for name in metrics:
        value = row.get(name)
        if isinstance(value, (int, float)) and value >= 0:
            return name, float(value)
    return None


def compare(pairs, metrics):
    """({key: {label: mean of the metric}}, {key: round spread or None}, labels in first-seen
    order, the metrics used). A key's round spread is the largest max / min - 1 of one label's
    values (its rounds), None where no label has two."""
    sums, labels, used = {}, [], []
    for label, path in pairs:
        if label not in labels:
            labels.append(label)
        for key, row in rows_of(path):
            found = metric_of(row, metrics)
            if found is None:
                continue
            name, value = found
            if name not in used:
                used.append(name)
            sums.setdefault(key, {}).setdefault(label, []).append(value)
    table = {key: {label: sum(v) / len(v) for label, v in by_label.items()}
             for key, by_label in sums.items()}
    spread = {key: max((max(v) / min(v) - 1 for v in by_label.values()
                        if len(v) > 1 and min(v) > 0), default=None)
              for key, by_label in sums.items()}
    return table, spread, labels, [m for m in metrics if m in used]


def control_spread(table, labels, controls):
    """{label: (min ratio, max ratio, rows)} to the first label over the rows whose names hold
    one of `controls`, for each later label that shares such rows with the first."""
    spread = {}
    for key, by_label in table.items():
        name = " ".join(v for _, v in key[1:])
        base = by_label.get(labels[0])
        if not base or not any(c in name for c in controls):
            continue
        for label in labels[1:]:
            if label in by_label:
                lo, hi, n = spread.get(label, (float("inf"), 0.0, 0))
                r = by_label[label] / base
                spread[label] = (min(lo, r), max(hi, r), n + 1)
    return spread


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="LABEL:FILE, a moefuse-bench --json output")
    p.add_argument("--metric", default="median_ms,ms,median_us",
                   help="numeric columns, comma separated, a row taking the first it has "
                        "(default median_ms,ms,median_us)")
    p.add_argument("--control", default=",".join(CONTROLS),
                   help="substrings naming rows of code every build shares, comma separated: "
                        "their ratios are printed as the noise floor (default cublas,torch)")
    args = p.parse_args(argv)
    pairs = []
    for run in args.runs:
        label, sep, path = run.partition(":")
        if not sep or not label or not path:
            p.error(f"expected LABEL:FILE, got {run!r}")
        if not pathlib.Path(path).is_file():
            p.error(f"{path}: no such file")
        pairs.append((label, pathlib.Path(path)))
    metrics = [m for m in args.metric.split(",") if m]
    table, spread, labels, used = compare(pairs, metrics)
    if not table:
        p.error(f"no row of the files has a numeric {' or '.join(map(repr, metrics))}")
    print(" | ".join(["/".join(used)] + labels + [f"{b}/{labels[0]}" for b in labels[1:]] +
                     ["round spread"]))
    for key, by_label in table.items():
        name = " ".join(v for _, v in key[1:])
        cells = [f"{by_label[b]:.4g}" if b in by_label else "-" for b in labels]
        base = by_label.get(labels[0])
        ratios = [f"{by_label[b] / base:.3f}" if base and b in by_label else "-"
                  for b in labels[1:]]
        rounds = "-" if spread[key] is None else f"{spread[key]:.1%}"
        print(" | ".join([name] + cells + ratios + [rounds]))
    controls = [c for c in args.control.split(",") if c]
    for label, (lo, hi, n) in control_spread(table, labels, controls).items():
        print(f"noise floor {label}/{labels[0]}: {lo:.3f}-{hi:.3f} over {n} control rows "
              f"(names holding {' or '.join(controls)}: the same code in every build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

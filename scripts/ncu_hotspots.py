#!/usr/bin/env python3
"""Where a kernel's warps wait: the SASS instructions with the most stall samples in an ncu
source-page CSV, each with the instruction before it (an mbarrier wait shows as the branch after
its SYNCS.PHASECHK, whose shared-memory offset names the barrier).

    ncu --section SourceCounters --page source --print-source sass --csv -k ... -c 1 APP \\
        > kernel.csv
    python3 scripts/ncu_hotspots.py kernel.csv [--top 15]

Prints the total samples, then one line per hot instruction: its address (last 5 hex digits),
its samples and share of the total, the reason that holds most of them, the instruction and the
one before it. Run 21 read the TMA wgrad's stage waits this way (docs/measurements.md).
"""

import argparse
import csv
import pathlib
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text: str) -> float:
    """An ncu CSV value ("38,962", "", "n/a") as a float, 0 when it is not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path: pathlib.Path):
    """(header, rows) of the source table: the lines from the one starting with "Address"."""
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu source table (a line starting with \"Address\")")
    table = list(csv.reader(lines[start:]))
    header = table[0]
    if SAMPLES not in header:
        raise ValueError(f"{path}: the source table has no '{SAMPLES}' column")
    return header, [row for row in table[1:] if len(row) == len(header)]


def hotspots(header, rows, top: int):
    """The `top` rows with the most samples: (address, samples, share, reason, sass, previous)."""
    col = {name: i for i, name in enumerate(header)}
    reasons = [name for name in header if name.startswith("stall_") and "(" not in name]
    total = sum(number(row[col[SAMPLES]]) for row in rows)
    order = sorted(range(len(rows)), key=lambda i: -number(rows[i][col[SAMPLES]]))[:top]
    out = []
    for i in order:
        row = rows[i]
        samples = number(row[col[SAMPLES]])
        reason = max(reasons, key=lambda name: number(row[col[name]]), default="")
        previous = rows[i - 1][col["Source"]].strip() if i > 0 else ""
        out.append((row[col["Address"]][-5:], samples, samples / total if total else 0.0,
                    reason, row[col["Source"]].strip(), previous))
    return total, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", type=pathlib.Path,
                   help="ncu --page source --print-source sass --csv output")
    p.add_argument("--top", type=int, default=15, help="instructions to print (default 15)")
    args = p.parse_args(argv)
    try:
        header, rows = read_rows(args.csv)
    except (OSError, ValueError) as e:
        print(f"ncu_hotspots: {e}", file=sys.stderr)
        return 2
    total, out = hotspots(header, rows, args.top)
    print(f"samples: {int(total)}")
    for address, samples, share, reason, sass, previous in out:
        print(f"{address} {int(samples):>8} {share:6.1%} {reason:<16} {sass[:60]:<60} | "
              f"{previous[:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

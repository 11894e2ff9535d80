#!/usr/bin/env python3
"""How far the back ends' loss curves of train_moe_lm.py runs are from the reference, over seeds.

    python examples/loss_gaps.py RUN/losses.json [RUN2/losses.json ...] [--last 50]

For each file (one seed): the reference back end (torch, else torch-grouped: train_moe_lm's rule)
and every other back end's signed relative difference of the last-N-step mean loss. Then, per back
end over the files: the number of seeds, the mean signed difference, its standard deviation and
standard error, and how many seeds lie within 1%. A *-repeat back end is that back end trained
again from the same seed; its gap from the first run is the noise floor the others are to be read
against (bf16 trajectories diverge after loss spikes; docs/measurements.md, runs 12-15). The
reference's repeat is among the gaps from the reference; any other X-repeat is also compared with
X.
"""

import argparse
import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_moe_lm import REFERENCES, tail_mean  # noqa: E402


def signed_gaps(result: dict, last: int):
    """(reference name, {back end: signed relative difference}) of one losses.json."""
    runs = result["backends"]
    ref = next((name for name in REFERENCES if name in runs), None)
    if ref is None:
        raise ValueError(f"no reference back end ({' or '.join(REFERENCES)}) in {sorted(runs)}")
    base = tail_mean(runs[ref]["loss"], last)
    return ref, {name: (tail_mean(r["loss"], last) - base) / base
                 for name, r in runs.items() if name != ref}


def repeat_gaps(result: dict, ref: str, last: int):
    """{(X, X-repeat): signed relative difference} for the repeats of back ends X other than the
    reference (the reference's repeat is already one of signed_gaps')."""
    runs = result["backends"]
    gaps = {}
    for name, r in runs.items():
        base_name = name.removesuffix("-repeat")
        if name != base_name and base_name != ref and base_name in runs:
            base = tail_mean(runs[base_name]["loss"], last)
            gaps[(base_name, name)] = (tail_mean(r["loss"], last) - base) / base
    return gaps


def summary(values: list) -> dict:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return {"seeds": n, "mean": mean, "sd": sd, "stderr": sd / math.sqrt(n) if n > 1 else sd,
            "within_1pct": sum(abs(v) <= 0.01 for v in values)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=pathlib.Path, help="losses.json of train_moe_lm runs")
    p.add_argument("--last", type=int, default=50, help="steps in the tail mean (default 50)")
    args = p.parse_args(argv)
    if args.last < 1:
        p.error(f"--last must be at least 1, got {args.last}")
    per_backend = {}
    for f in args.files:
        ref, gaps = signed_gaps(json.loads(f.read_text()), args.last)
        print(f"{f}: vs {ref}: " + ", ".join(f"{b} {g:+.2%}" for b, g in gaps.items()))
        for b, g in gaps.items():
            per_backend.setdefault((ref, b), []).append(g)
        for (x, b), g in repeat_gaps(json.loads(f.read_text()), ref, args.last).items():
            print(f"{f}: {b} vs {x} {g:+.2%}")
            per_backend.setdefault((x, b), []).append(g)
    for (ref, b), values in per_backend.items():
        s = summary(values)
        print(f"{b} vs {ref}: {s['seeds']} seeds, mean {s['mean']:+.2%}, sd {s['sd']:.2%}, "
              f"standard error {s['stderr']:.2%}, {s['within_1pct']} within 1%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

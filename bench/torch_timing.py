"""What every torch baseline script (bench/torch_*.py) shares: the availability check and the
event timing, so that all of moefuse-bench's torch figures are measured the same way."""
import argparse
import statistics
import sys

# The exit code that tells tools/bench/torch_runner.cpp "torch or a GPU is unavailable".
UNAVAILABLE = 3


def torch_or_none():
    """The torch module when it can run on a CUDA device, else None (the reason on stderr)."""
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        return torch
    except Exception as err:  # noqa: BLE001 - any import or driver failure means unavailable
        print(f"torch unavailable: {err}", file=sys.stderr)
        return None


def median_ms(fn, warmup, iters, warm_ms=0):
    """Median of `iters` CUDA-event-timed calls of fn after `warmup` untimed ones, and after at
    least `warm_ms` milliseconds of untimed calls (moefuse-bench's --warm-ms: bench/timing.h
    says why)."""
    import time

    import torch
    for _ in range(warmup):
        fn()
    if warm_ms > 0:
        torch.cuda.synchronize()
        start = time.perf_counter()
        while (time.perf_counter() - start) * 1e3 < warm_ms:
            fn()
            torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def grouped_gemm_cli(problem_help, fields):
    """The command line of the grouped-GEMM baselines (torch_gemm*.py): --counts (rows per expert),
    repeated --problem specs of `fields` colon-separated fields NAME:N:K[:...], --warmup, --warm-ms,
    --iters. Returns (counts, [fields of each problem, N and K as ints], timing): timing holds
    warmup, iters and warm_ms, the arguments median_ms takes after fn. A malformed --counts or
    --problem exits with argparse's usage error naming it."""
    p = argparse.ArgumentParser()
    p.add_argument("--counts", required=True, help="rows per expert, comma separated")
    p.add_argument("--problem", action="append", required=True, help=problem_help)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--warm-ms", type=int, default=0)
    p.add_argument("--iters", type=int, default=50)
    a = p.parse_args()
    try:
        counts = [int(c) for c in a.counts.split(",")]
    except ValueError:
        p.error(f"--counts: expected comma-separated integers, got {a.counts!r}")
    problems = []
    for spec in a.problem:
        parts = spec.split(":")
        if len(parts) != fields or not all(f.isdigit() and int(f) > 0 for f in parts[1:3]):
            p.error(f"--problem: expected {problem_help}, got {spec!r}")
        problems.append([parts[0], int(parts[1]), int(parts[2]), *parts[3:]])
    return counts, problems, (a.warmup, a.iters, a.warm_ms)

#!/usr/bin/env python3
"""torch baseline for `moefuse-bench gemm`: times torch._grouped_mm on the exact per-expert row
counts the C++ benchmark drew, with CUDA events (warm-up, median of many), on fresh random bf16 data.

Prints one machine-readable line per measurement, `torch <name> <median_ms>`, which the C++ side
parses; anything else it prints is ignored. Exit code 3 means torch (or a GPU) is unavailable.

  python3 bench/torch_gemm.py --counts 1024,998,... --n 1536 --k 2048 --op fc1_swiglu
"""
import argparse
import statistics
import sys


def median_ms(fn, warmup, iters):
    import torch
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--counts", required=True, help="rows per expert, comma separated")
    p.add_argument("--n", type=int, required=True, help="output columns (2F for a GLU FC1)")
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--op", choices=["fc1_swiglu", "plain"], default="plain")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    a = p.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
    except Exception as e:  # noqa: BLE001 - any import/driver failure means "unavailable"
        print(f"torch unavailable: {e}", file=sys.stderr)
        return 3

    counts = [int(c) for c in a.counts.split(",")]
    m, e = sum(counts), len(counts)
    dev = torch.device("cuda")
    x = torch.randn(m, a.k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(e, a.n, a.k, device=dev, dtype=torch.bfloat16) * a.k ** -0.5
    offs = torch.cumsum(torch.tensor(counts, device=dev, dtype=torch.int32), 0, dtype=torch.int32)
    wt = w.transpose(-2, -1)  # [E, K, N] view of the [E, N, K] weights, as _grouped_mm wants

    def grouped():
        return torch._grouped_mm(x, wt, offs=offs)

    print(f"torch grouped_mm {median_ms(grouped, a.warmup, a.iters):.6f}")
    if a.op == "fc1_swiglu":
        f = a.n // 2

        def grouped_swiglu():
            h = torch._grouped_mm(x, wt, offs=offs)
            return torch.nn.functional.silu(h[:, :f]) * h[:, f:]

        print(f"torch grouped_mm+silu_mul {median_ms(grouped_swiglu, a.warmup, a.iters):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

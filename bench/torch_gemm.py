#!/usr/bin/env python3
"""torch baseline for `moefuse-bench gemm`: times torch._grouped_mm on the exact per-expert row
counts the C++ benchmark drew, with CUDA events (warm-up, median of many), on fresh random bf16 data.

Prints one machine-readable line per measurement, `torch <problem>.<name> <median_ms>`, which the
C++ side parses; anything else it prints is ignored. Exit code 3 means torch (or a GPU) is
unavailable. One process serves every problem of a preset, so torch starts once.

  python3 bench/torch_gemm.py --counts 1024,998,... --problem fc1:1536:2048:swiglu \
      --problem fc2:2048:768:plain
"""
import sys

from torch_timing import UNAVAILABLE, grouped_gemm_cli, median_ms, torch_or_none


def time_problem(name, counts, n, k, op, timing):
    import torch
    m, e = sum(counts), len(counts)
    dev = torch.device("cuda")
    x = torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 2 - 1
    w = (torch.rand(e, n, k, device=dev, dtype=torch.bfloat16) * 2 - 1) * k ** -0.5
    offs = torch.cumsum(torch.tensor(counts, device=dev, dtype=torch.int32), 0, dtype=torch.int32)
    wt = w.transpose(-2, -1)  # [E, K, N] view of the [E, N, K] weights, as _grouped_mm wants

    def grouped():
        return torch._grouped_mm(x, wt, offs=offs)

    print(f"torch {name}.grouped_mm {median_ms(grouped, *timing):.6f}", flush=True)
    if op == "swiglu":
        f = n // 2

        def grouped_swiglu():
            h = torch._grouped_mm(x, wt, offs=offs)
            return torch.nn.functional.silu(h[:, :f]) * h[:, f:]

        print(f"torch {name}.grouped_mm+silu_mul {median_ms(grouped_swiglu, *timing):.6f}",
              flush=True)


def main():
    counts, problems, timing = grouped_gemm_cli(
        "NAME:N:K:OP, OP plain or swiglu (N = 2F for a GLU FC1)", fields=4)
    if torch_or_none() is None:
        return UNAVAILABLE
    for name, n, k, op in problems:
        time_problem(name, counts, n, k, op, timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())

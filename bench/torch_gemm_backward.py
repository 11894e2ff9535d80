#!/usr/bin/env python3
"""torch baseline for `moefuse-bench gemm-backward`: times the autograd backward of
torch._grouped_mm on the exact per-expert row counts the C++ benchmark drew, with CUDA events
(warm-up, median of many), on fresh random bf16 data.

For each problem y = _grouped_mm(x [M, K], w [E, N, K]ᵀ, offs) it times, from one recorded graph
(retain_graph=True): the input gradient alone (`<name>.dgrad`: dy·w per expert), the weight
gradient alone (`<name>.wgrad`: the k-grouped dyᵀ·x, bf16 like w) and both together
(`<name>.backward`). Prints `torch <name>.<part> <median_ms>` lines, which the C++ side parses;
exit code 3 means torch (or a GPU) is unavailable.

  python3 bench/torch_gemm_backward.py --counts 1024,998,... --problem fc1:1536:2048 \
      --problem fc2:2048:768
"""
import sys

from torch_timing import UNAVAILABLE, grouped_gemm_cli, median_ms, torch_or_none


def time_problem(name, counts, n, k, timing):
    import torch
    m, e = sum(counts), len(counts)
    dev = torch.device("cuda")
    x = (torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 2 - 1).requires_grad_()
    w = ((torch.rand(e, n, k, device=dev, dtype=torch.bfloat16) * 2 - 1) * k ** -0.5)
    w.requires_grad_()
    offs = torch.cumsum(torch.tensor(counts, device=dev, dtype=torch.int32), 0, dtype=torch.int32)
    y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    dy = torch.rand_like(y) * 2 - 1

    def grad_of(*inputs):
        return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)

    for part, fn in (("dgrad", grad_of(x)), ("wgrad", grad_of(w)), ("backward", grad_of(x, w))):
        try:
            ms = median_ms(fn, *timing)
        except RuntimeError as err:  # a torch build without this backward: report, go on
            print(f"{name}.{part}: {err}", file=sys.stderr)
            continue
        print(f"torch {name}.{part} {ms:.6f}", flush=True)


def main():
    counts, problems, timing = grouped_gemm_cli(
        "NAME:N:K, the forward GEMM's output width N and reduction K", fields=3)
    if torch_or_none() is None:
        return UNAVAILABLE
    for name, n, k in problems:
        time_problem(name, counts, n, k, timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())

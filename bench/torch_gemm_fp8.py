#!/usr/bin/env python3
"""torch baselines for `moefuse-bench gemm-fp8`: the FP8 GEMMs torch offers on Hopper, on the exact
per-expert row counts the C++ benchmark drew, with CUDA events (warm-up, median of many), on fresh
random data cast to e4m3. Each problem is d[M, N] = a[M, K] · b[e][N, K]ᵀ over the experts' rows
(bf16 out); per --problem NAME:N:K it prints

  torch NAME.scaled_mm_tensorwise <ms>             one dense torch._scaled_mm of the same total M,
                                                   N, K with per-tensor scales: cuBLAS's FP8 GEMM
                                                   with no scale inside K
  torch NAME.scaled_mm_tensorwise_fast_accum <ms>  the same with fast accumulation (no promotion
                                                   of the tensor cores' partial sums to fp32)
  torch NAME.scaled_mm_blockwise <ms>              the dense GEMM with DeepSeek's scales (1x128 on
                                                   a, 128x128 on b): cuBLAS's blockwise FP8, the
                                                   recipe moefuse's FP8 GEMM runs
  torch NAME.scaled_grouped_mm_rowwise <ms>        torch._scaled_grouped_mm over the experts, one
                                                   scale per row of a and per column of each b[e]
                                                   (torch's FP8 grouped GEMM for MoE on Hopper)

A variant this torch refuses is left out, its reason on stderr. Exit code 3: no torch or no GPU.

  python3 bench/torch_gemm_fp8.py --counts 8192,8192,8192,8192 --problem g:4096:7168
"""
import sys

from torch_timing import UNAVAILABLE, grouped_gemm_cli, median_ms, torch_or_none


def e4m3(torch, shape, seed):
    """Uniform values in (-1, 1) cast to e4m3 (every code of that range appears)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.rand(shape, device="cuda", generator=g) * 2 - 1
    return x.to(torch.float8_e4m3fn)


def positive(torch, shape, seed):
    """fp32 scales in [0.5, 2): their values do not change the timing, but are never 0."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.rand(shape, device="cuda", generator=g) * 1.5 + 0.5


def report(name, variant, fn, timing):
    """Prints the variant's median, or why torch refused it (on stderr)."""
    try:
        ms = median_ms(fn, *timing)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"{name}.{variant}: not available: {first_line}", file=sys.stderr)
        return
    print(f"torch {name}.{variant} {ms:.6f}", flush=True)


def blockwise(torch, a, b, sa, sb):
    """cuBLAS's DeepSeek-recipe GEMM: torch.nn.functional.scaled_mm with explicit recipes where it
    exists, else torch._scaled_mm, which reads the recipe from the scales' shapes. The 1x128 scales
    are outer-dimension-major ([M, K/128] with stride (1, M)), as cuBLAS wants them."""
    import torch.nn.functional as F
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        return F.scaled_mm(a, b.t(), sa, F.ScalingType.BlockWise1x128, sb.t(),
                           F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
    return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)


def time_problem(torch, name, counts, n, k, timing):
    m, e = sum(counts), len(counts)
    a = e4m3(torch, (m, k), 1)
    b = e4m3(torch, (e, n, k), 2)
    b_dense = e4m3(torch, (n, k), 3)  # the dense GEMM's [N, K] operand
    one = torch.ones((), device="cuda")
    for variant, fast in (("scaled_mm_tensorwise", False),
                          ("scaled_mm_tensorwise_fast_accum", True)):
        report(name, variant, lambda fast=fast: torch._scaled_mm(
            a, b_dense.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
            use_fast_accum=fast), timing)

    sa = positive(torch, (k // 128, m), 4).t()  # [M, K/128], outer-dimension-major
    sb = positive(torch, ((n + 127) // 128, k // 128), 5)
    report(name, "scaled_mm_blockwise", lambda: blockwise(torch, a, b_dense, sa, sb), timing)

    offs = torch.cumsum(torch.tensor(counts, device="cuda", dtype=torch.int32), 0,
                        dtype=torch.int32)
    row_scales = positive(torch, (m,), 6)
    col_scales = positive(torch, (e, n), 7)
    report(name, "scaled_grouped_mm_rowwise", lambda: torch._scaled_grouped_mm(
        a, b.transpose(-2, -1), row_scales, col_scales, offs=offs, out_dtype=torch.bfloat16,
        use_fast_accum=False), timing)


def main():
    counts, problems, timing = grouped_gemm_cli("NAME:N:K, one FP8 GEMM d[M, N] = a · b[e]ᵀ",
                                                fields=3)
    torch = torch_or_none()
    if torch is None:
        return UNAVAILABLE
    for name, n, k in problems:
        time_problem(torch, name, counts, n, k, timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())

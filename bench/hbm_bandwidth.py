"""The device memory's bandwidth as torch's own kernels reach it: write only (fill_), read only
(sum) and copy (copy_, read and write both counted), over a tensor far larger than L2, each the
median of event-timed calls after warm-up (bench/torch_timing.py). The bounds the output-heavy
kernels are read against, e.g. the wgrads whose fp32 expert gradients are most of their bytes
(docs/grouped_gemm_backward.md).

    python3 bench/hbm_bandwidth.py [--gib 8] [--warmup 5] [--iters 20]
"""
import argparse
import sys

import torch_timing


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=float, default=8.0, help="size of each tensor, GiB")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    if a.gib <= 0:
        p.error(f"--gib: expected a size > 0, got {a.gib}")
    torch = torch_timing.torch_or_none()
    if torch is None:
        return torch_timing.UNAVAILABLE
    n = int(a.gib * 2**30) // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    nbytes = n * 4
    cases = [("write (fill_)", lambda: dst.fill_(1.5), nbytes),
             ("read (sum)", lambda: src.sum(), nbytes),
             ("copy (copy_)", lambda: dst.copy_(src), 2 * nbytes)]
    print(f"device: {torch.cuda.get_device_name()}, tensors of {nbytes / 2**30:.2f} GiB fp32")
    for name, fn, moved in cases:
        ms = torch_timing.median_ms(fn, a.warmup, a.iters)
        print(f"{name:14s} {ms:8.3f} ms  {moved / ms / 1e9:6.3f} TB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

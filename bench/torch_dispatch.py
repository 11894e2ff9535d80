#!/usr/bin/env python3
"""torch baseline for `moefuse-bench dispatch`: the same router and dispatch steps in plain torch
ops, timed with CUDA events (warm-up, median of many), on fresh random data.

Prints `torch <name> <median_ms>` lines that the C++ side parses (router, permute, combine,
combine_backward); anything else is ignored. Exit code 3: torch or a GPU is unavailable.

  python3 bench/torch_dispatch.py --tokens 16384 --hidden 2048 --experts 128 --topk 8 --router softmax
"""
import argparse
import statistics
import sys


def median_ms(fn, warmup=5, iters=50):
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
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--router", choices=["softmax", "sigmoid"], default="softmax")
    a = p.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
    except Exception as exc:  # torch missing or no GPU: the C++ side prints "unavailable"
        print(f"torch unavailable: {exc}", file=sys.stderr)
        sys.exit(3)

    dev = torch.device("cuda")
    T, H, E, k = a.tokens, a.hidden, a.experts, a.topk
    logits = torch.rand(T, E, device=dev) * 8 - 4
    bias = torch.rand(E, device=dev) * 0.2 - 0.1

    # The router step the fused kernel replaces: scores, top-k, weights, counts, aux and z stats.
    def router():
        if a.router == "softmax":
            p_ = torch.softmax(logits, dim=-1)
            w, idx = torch.topk(p_, k, dim=-1)
            w = w / w.sum(-1, keepdim=True)
            q = p_
        else:
            s = torch.sigmoid(logits)
            _, idx = torch.topk(s + bias, k, dim=-1)
            w = s.gather(1, idx)
            w = w / w.sum(-1, keepdim=True)
            q = s / s.sum(-1, keepdim=True)
        counts = torch.bincount(idx.flatten(), minlength=E)
        P = q.mean(0)
        z = torch.logsumexp(logits, -1).square().mean()
        return idx, w, counts, P, z

    idx, w, _, _, _ = router()
    x = torch.rand(T, H, device=dev, dtype=torch.bfloat16) * 2 - 1
    flat = idx.flatten()

    # Permute: a stable argsort by expert, then index_select of the token rows.
    def permute():
        order = torch.argsort(flat, stable=True)
        return x.index_select(0, order // k), order

    xs, order = permute()
    ys = torch.rand_like(xs)
    weights = w.flatten().index_select(0, order).to(torch.float32)

    # Combine: weighted index_add of the expert rows back to their tokens (fp32 accumulation).
    def combine():
        y = torch.zeros(T, H, device=dev, dtype=torch.float32)
        y.index_add_(0, order // k, ys.float() * weights[:, None])
        return y.to(torch.bfloat16)

    dy = torch.rand(T, H, device=dev, dtype=torch.bfloat16)

    def combine_backward():
        g = dy.index_select(0, order // k)
        dys = (g.float() * weights[:, None]).to(torch.bfloat16)
        d_probs = (g.float() * ys.float()).sum(-1)
        return dys, d_probs

    for name, fn in [("router", router), ("permute", permute), ("combine", combine),
                     ("combine_backward", combine_backward)]:
        print(f"torch {name} {median_ms(fn):.6f}", flush=True)


if __name__ == "__main__":
    main()

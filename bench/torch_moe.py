#!/usr/bin/env python3
"""torch baseline for `moefuse-bench layer`: the unfused MoE layer as torch users write it, timed
forward and forward+backward with CUDA events (warm-up, median of many), on fresh random bf16 data.

  softmax top-k routing (renormalised) → stable argsort permute → torch._grouped_mm FC1 →
  silu(gate)·up → torch._grouped_mm FC2 → prob scale → index_add combine (+ a dense shared
  expert when --shared-ffn > 0)

The forward is timed under torch.no_grad(); forward+backward runs autograd from x and every weight
with a random dy. Prints machine-readable lines `torch fwd <ms>` and `torch fwdbwd <ms>` (the C++
side parses them; anything else is ignored). Exit code 3: torch or a GPU is unavailable.

  python3 bench/torch_moe.py --tokens 16384 --hidden 2048 --ffn 768 --experts 128 --topk 8
"""
import argparse
import sys

from torch_timing import UNAVAILABLE, median_ms, torch_or_none


def make_inputs(a):
    import math
    import torch
    dev, bf = torch.device("cuda"), torch.bfloat16
    t, h, f, e = a.tokens, a.hidden, a.ffn, a.experts
    glu = a.activation == "glu"
    fc1 = 2 * f if glu else f

    def uniform(*shape, scale):
        return ((torch.rand(*shape, device=dev, dtype=torch.float32) * 2 - 1) * scale).to(bf)

    p = {
        "x": uniform(t, h, scale=1.0),
        # Logit noise of about a Gumbel's spread, as the C++ benchmark draws its router.
        "wr": uniform(e, h, scale=3.84 / math.sqrt(h)),
        "w1": uniform(e, fc1, h, scale=h ** -0.5),
        "w2": uniform(e, h, f, scale=f ** -0.5),
        "dy": uniform(t, h, scale=1.0),
    }
    if a.routing == "zipf":
        # The same skew as the C++ side: x[:, 0] = 1, wr[:, 0] = log(1 / rank^1.2).
        ranks = torch.randperm(e, device=dev).float() + 1
        p["x"][:, 0] = 1
        p["wr"][:, 0] = (-1.2 * ranks.log()).to(bf)
    if a.shared_ffn > 0:
        sfc1 = 2 * a.shared_ffn if glu else a.shared_ffn
        p["sw1"] = uniform(sfc1, h, scale=h ** -0.5)
        p["sw2"] = uniform(h, a.shared_ffn, scale=a.shared_ffn ** -0.5)
    return p


def moe_forward(a, x, wr, w1, w2, sw1=None, sw2=None):
    import torch
    import torch.nn.functional as fn
    k, e, f = a.topk, a.experts, a.ffn
    glu = a.activation == "glu"

    def act(hh, width):
        if glu:
            return fn.silu(hh[:, :width]) * hh[:, width:]
        return torch.relu(hh).square()

    probs = torch.softmax((x @ wr.t()).float(), dim=-1)
    top_p, top_i = probs.topk(k, dim=-1)
    top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    flat = top_i.flatten()
    order = torch.argsort(flat, stable=True)
    token = order // k
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0, dtype=torch.int32)
    xs = x.index_select(0, token)
    hh = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
    ys = torch._grouped_mm(act(hh, f), w2.transpose(-2, -1), offs=offs)
    ys = ys * top_p.flatten()[order].unsqueeze(1).to(ys.dtype)
    y = torch.zeros_like(x).index_add(0, token, ys)
    if sw1 is not None:
        y = y + act(x @ sw1.t(), a.shared_ffn) @ sw2.t()
    return y


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("tokens", 16384), ("hidden", 2048), ("ffn", 768), ("experts", 128),
                          ("topk", 8), ("shared-ffn", 0), ("warmup", 5), ("iters", 30),
                          ("warm-ms", 0)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--activation", choices=["glu", "plain"], default="glu")
    ap.add_argument("--routing", choices=["uniform", "zipf"], default="uniform")
    a = ap.parse_args()
    torch = torch_or_none()
    if torch is None:
        return UNAVAILABLE

    p = make_inputs(a)
    weights = [p["wr"], p["w1"], p["w2"]] + ([p["sw1"], p["sw2"]] if a.shared_ffn > 0 else [])

    def forward():
        with torch.no_grad():
            return moe_forward(a, p["x"], *weights)

    print(f"torch fwd {median_ms(forward, a.warmup, a.iters, a.warm_ms):.6f}", flush=True)

    leaves = [t.detach().requires_grad_(True) for t in [p["x"]] + weights]

    def forward_backward():
        for t in leaves:
            t.grad = None
        moe_forward(a, *leaves).backward(p["dy"])

    fwdbwd_ms = median_ms(forward_backward, a.warmup, a.iters, a.warm_ms)
    print(f"torch fwdbwd {fwdbwd_ms:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

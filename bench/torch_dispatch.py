#!/usr/bin/env python3
"""torch baseline for `moefuse-bench dispatch`: the same router and dispatch steps in plain eager
torch ops, timed with CUDA events (warm-up, median of many), on fresh random data.

Prints one `torch <name> <median_ms>` line per step; the C++ side parses them (anything else is
ignored). Exit code 3: torch or a GPU is unavailable. Steps and what they stand for:
  router            scores, (group-limited) top-k, weights, counts, P, z-loss (no autograd)
  router_backward   autograd of weights, aux loss and z-loss back to the logits
  router_logits_backward  d_logits to bf16, dx += d_logits·Wr, dWr = d_logitsᵀ·x (cuBLAS, bf16)
  dispatch          stable argsort by expert + index_select of the token rows (maps + permute)
  permute           index_select of the token rows alone (the order given)
  permute_backward  index_add of the row gradients into the tokens (autograd's form, bf16)
  combine           weighted index_add of the expert rows into the tokens (fp32 accumulation)
  combine_backward  the row gradients and d_probs

  python3 bench/torch_dispatch.py --tokens 16384 --hidden 2048 --experts 128 --topk 8
"""
import argparse
import sys

from torch_timing import UNAVAILABLE, median_ms, torch_or_none


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--router", choices=["softmax", "sigmoid"], default="softmax")
    p.add_argument("--groups", type=int, default=1, help="sigmoid router: expert groups")
    p.add_argument("--topk-groups", type=int, default=1, help="sigmoid router: groups kept")
    p.add_argument("--scale", type=float, default=1.0, help="routed scaling factor")
    a = p.parse_args()
    torch = torch_or_none()
    if torch is None:
        return UNAVAILABLE

    dev = torch.device("cuda")
    T, H, E, k = a.tokens, a.hidden, a.experts, a.topk
    logits = torch.rand(T, E, device=dev) * 8 - 4
    bias = torch.rand(E, device=dev) * 0.2 - 0.1
    aux_coeff, z_coeff = 0.01, 0.001

    # The router step the fused kernel replaces: scores, top-k, weights, counts, aux and z stats.
    def route(l):
        if a.router == "softmax":
            p_ = torch.softmax(l, dim=-1)
            w, idx = torch.topk(p_, k, dim=-1)
            q = p_
        else:
            s = torch.sigmoid(l)
            sel = s.detach() + bias
            if a.groups > 1:  # DeepSeek-V3: keep the groups with the best top-2 sums
                g = sel.view(T, a.groups, -1).topk(2, dim=-1).values.sum(-1)
                keep = torch.zeros_like(g).scatter_(1, g.topk(a.topk_groups, dim=-1).indices, 1.0)
                sel = sel.masked_fill(keep.repeat_interleave(E // a.groups, 1) == 0, float("-inf"))
            idx = torch.topk(sel, k, dim=-1).indices
            w = s.gather(1, idx)
            q = s / s.sum(-1, keepdim=True)
        w = w / w.sum(-1, keepdim=True) * a.scale
        counts = torch.bincount(idx.flatten(), minlength=E)
        P = q.mean(0)
        aux = aux_coeff * E * (counts.float() / (T * k) * P).sum()
        z = z_coeff * torch.logsumexp(l, -1).square().mean()
        return idx, w, counts, aux, z

    def router():
        with torch.no_grad():
            return route(logits)

    leaf = logits.clone().requires_grad_()
    _, w_g, _, aux_g, z_g = route(leaf)
    d_w, one = torch.rand_like(w_g) * 2 - 1, torch.ones((), device=dev)

    def router_backward():
        return torch.autograd.grad((w_g, aux_g, z_g), leaf, (d_w, one, one), retain_graph=True)

    idx, w, _, _, _ = router()
    x = torch.rand(T, H, device=dev, dtype=torch.bfloat16) * 2 - 1
    w_router = (torch.rand(E, H, device=dev) * 0.1 - 0.05).to(torch.bfloat16)
    d_logits = torch.rand(T, E, device=dev) * 2 - 1
    dx_acc = torch.zeros(T, H, device=dev, dtype=torch.bfloat16)

    # The logits GEMM's backward (torch's dWr comes out in bf16, ours in fp32: same products).
    def router_logits_backward():
        dl16 = d_logits.to(torch.bfloat16)
        dx_acc.addmm_(dl16, w_router)
        return dl16.t() @ x
    flat = idx.flatten()

    def dispatch():
        order = torch.argsort(flat, stable=True)
        return x.index_select(0, order // k), order

    xs, order = dispatch()
    token = order // k

    def permute():
        return x.index_select(0, token)

    dxs = torch.rand_like(xs)

    def permute_backward():
        return torch.zeros(T, H, device=dev, dtype=torch.bfloat16).index_add_(0, token, dxs)

    ys = torch.rand_like(xs)
    weights = w.flatten().index_select(0, order).to(torch.float32)

    def combine():
        y = torch.zeros(T, H, device=dev, dtype=torch.float32)
        y.index_add_(0, token, ys.float() * weights[:, None])
        return y.to(torch.bfloat16)

    dy = torch.rand(T, H, device=dev, dtype=torch.bfloat16)

    def combine_backward():
        g = dy.index_select(0, token)
        dys = (g.float() * weights[:, None]).to(torch.bfloat16)
        d_probs = (g.float() * ys.float()).sum(-1)
        return dys, d_probs

    for name, fn in [("router", router), ("router_backward", router_backward),
                     ("router_logits_backward", router_logits_backward),
                     ("dispatch", dispatch), ("permute", permute),
                     ("permute_backward", permute_backward), ("combine", combine),
                     ("combine_backward", combine_backward)]:
        print(f"torch {name} {median_ms(fn, warmup=5, iters=50):.6f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

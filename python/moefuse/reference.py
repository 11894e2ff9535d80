"""A pure PyTorch MoE layer with the semantics of src/ref/layer.h, from the same weights in the
usual [gate; up] layout. The GPU tests compare moefuse.MoE against it (fp32), and
examples/train_moe_lm.py trains with it as the "torch" back end (expert GEMMs in bf16).

Imports torch; `import moefuse` does not import this module."""

import torch
import torch.nn.functional as F

from moefuse import Activation, MoeConfig, RouterKind


def activation(c: MoeConfig, h: torch.Tensor) -> torch.Tensor:
    if c.activation == Activation.SQUARED_RELU:
        return F.relu(h).square()
    gate, up = h.chunk(2, dim=-1)
    if c.activation == Activation.SWIGLU:
        return F.silu(gate) * up
    if c.activation == Activation.GEGLU:
        return F.gelu(gate) * up
    if c.activation == Activation.REGLU:
        return F.relu(gate) * up
    g = gate.clamp(max=c.clamped_swiglu_limit)
    u = up.clamp(-c.clamped_swiglu_limit, c.clamped_swiglu_limit)
    return g * torch.sigmoid(c.clamped_swiglu_alpha * g) * (u + 1)


def _rank(score: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k highest per row, equal scores lower index first (router.h's tie rule)."""
    return torch.sort(score, dim=-1, descending=True, stable=True).indices[:, :k]


def route(c: MoeConfig, logits: torch.Tensor, score_bias):
    """(expert_idx [T,k], routing weights [T,k], the aux-loss distribution q [T,E])."""
    T, E = logits.shape
    if c.router_kind == RouterKind.SIGMOID_GROUP_TOPK:
        score = torch.sigmoid(logits)
        q = score / score.sum(-1, keepdim=True)
    else:
        score = q = torch.softmax(logits, dim=-1)
    sel = score.detach().double()
    if c.router_use_score_bias:
        sel = sel + score_bias.double()
    if c.router_kind == RouterKind.SIGMOID_GROUP_TOPK and c.router_num_groups > 1:
        G = c.router_num_groups
        group_score = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros(T, G, dtype=torch.bool, device=logits.device)
        keep.scatter_(1, _rank(group_score, c.router_topk_groups), True)
        sel = sel.masked_fill(~keep.repeat_interleave(E // G, dim=1), float("-inf"))
    idx = _rank(sel, c.top_k)
    w = score.gather(1, idx)
    if c.router_renormalize:
        w = w / w.sum(-1, keepdim=True)
    return idx, w * c.routed_scaling_factor, q


def router_logits(x: torch.Tensor, w_router: torch.Tensor) -> torch.Tensor:
    """[T, E] fp32, as the layer computes them (fp32 accumulation of its bf16 inputs)."""
    return x.float() @ w_router.float().t()


def _experts_loop(c: MoeConfig, xs, counts, w1, w2, b1, b2, dtype):
    """The expert MLPs over rows sorted by expert, one slice and two matmuls per expert."""
    outs, start = [], 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        h = xs[start:start + n] @ w1[e].to(dtype).t()
        if b1 is not None:
            h = h + b1[e]
        out = activation(c, h).to(dtype) @ w2[e].to(dtype).t()
        if b2 is not None:
            out = out + b2[e]
        outs.append(out.float())
        start += n
    return torch.cat(outs) if outs else xs.new_zeros((0, w2.shape[1]), dtype=torch.float32)


def _experts_grouped(c: MoeConfig, xs, flat_idx, w1, w2, b1, b2):
    """The same through torch._grouped_mm (CUDA, bf16): offsets stay on the device, no sync."""
    offs = torch.cumsum(torch.bincount(flat_idx, minlength=c.num_experts), 0, dtype=torch.int32)
    expert = torch.sort(flat_idx, stable=True).values
    h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
    if b1 is not None:
        h = h + b1[expert]
    out = torch._grouped_mm(activation(c, h).to(xs.dtype), w2.transpose(-2, -1), offs=offs)
    if b2 is not None:
        out = out + b2[expert]
    return out.float()


def moe_forward(c: MoeConfig, x, w_router, w1, w2, b1=None, b2=None, score_bias=None,
                shared_w1=None, shared_w2=None, compute_dtype=torch.float32,
                grouped_mm: bool = False):
    """(y [T,H] fp32, losses [2] fp32 {aux, z}). Routing, biases and the sum over experts are
    fp32; the expert GEMMs run in compute_dtype (fp32 for the tests' reference, bf16 for a
    training baseline that multiplies at the layer's precision). grouped_mm: the expert GEMMs
    through torch._grouped_mm (bf16 on a CUDA GPU), as a torch user writes a fast MoE; otherwise a
    loop over experts with one host sync per call for the counts."""
    logits = router_logits(x, w_router)
    idx, w, q = route(c, logits, score_bias)
    xc = x.to(compute_dtype)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    # Assignments sorted by expert, token order inside one.
    k, flat_idx = c.top_k, idx.flatten()
    order = torch.argsort(flat_idx, stable=True)
    token, slot = order // k, order % k
    xs = xc[token]
    if grouped_mm:
        out = _experts_grouped(c, xs, flat_idx, w1, w2, b1, b2)
    else:
        counts = torch.bincount(flat_idx, minlength=c.num_experts).tolist()
        out = _experts_loop(c, xs, counts, w1, w2, b1, b2, compute_dtype)
    y = y.index_add(0, token, out * w[token, slot, None])
    if shared_w1 is not None:
        h = activation(c, xc @ shared_w1.to(compute_dtype).t()).to(compute_dtype)
        y = y + (h @ shared_w2.to(compute_dtype).t()).float()
    T, E = x.shape[0], c.num_experts
    f = torch.bincount(flat_idx, minlength=E).float() / (T * k)
    aux = c.aux_loss_coeff * E * (f * q.mean(0)).sum()
    z = c.z_loss_coeff * torch.logsumexp(logits, dim=-1).square().mean()
    return y, torch.stack([aux, z])

#!/usr/bin/env python3
"""Per-layer gradient agreement of the example model's MoE layers, at initialisation and after
training: moefuse fused, moefuse unfused and the bf16 torch back end, each against an fp32
pure-PyTorch reference fed the same bf16 inputs.

Why: training curves of bf16 runs drift apart once a loss spike amplifies rounding differences,
so a loss-curve gap alone cannot tell a wrong gradient from chaos. This script looks at the
gradients themselves, on the activations and output gradients the real model produces.

    MOEFUSE_LIBRARY=build/release/libmoefuse_c.so python3 examples/layer_grad_agreement.py

For every layer it prints the relative-norm error (‖g − g_ref‖ / ‖g_ref‖) of y, dx, dW_router,
dW1, dW2 and the worst single expert of dW1 / dW2. Needs a Hopper GPU.
"""

import importlib.util
import json
import pathlib
import sys

import torch

_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT / "python"))
import moefuse  # noqa: E402
from moefuse.reference import moe_forward  # noqa: E402

_spec = importlib.util.spec_from_file_location("train_moe_lm", _ROOT / "examples/train_moe_lm.py")
lm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lm)

WEIGHTS = ("w_router", "w1", "w2")


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def capture(model, tokens, targets):
    """Each MoE layer's input x and output gradient dy for one training step's loss."""
    xs, dys, hooks = {}, {}, []
    for i, block in enumerate(model.blocks):
        hooks.append(block.moe.register_forward_pre_hook(
            lambda m, inp, i=i: xs.update({i: inp[0].detach().clone()})))

        def on_output(m, inp, out, i=i):
            out[0].register_hook(lambda g, i=i: dys.update({i: g.detach().clone()}))
        hooks.append(block.moe.register_forward_hook(on_output))
    logits, router_loss = model(tokens)
    ce = torch.nn.functional.cross_entropy(logits.float().view(-1, 256), targets.reshape(-1))
    (ce + router_loss).backward()
    for h in hooks:
        h.remove()
    model.zero_grad(set_to_none=True)
    return xs, dys


def reference_grads(cfg, x, dy, w, dtype):
    """y and the gradients of <y, dy> + router losses, pure PyTorch with GEMMs in `dtype`."""
    leaves = {k: v.detach().to(dtype).requires_grad_(True) for k, v in w.items()}
    xx = x.detach().reshape(-1, cfg.hidden).to(dtype).requires_grad_(True)
    y, losses = moe_forward(cfg, xx, leaves["w_router"], leaves["w1"], leaves["w2"],
                            compute_dtype=dtype)
    (y.float() * dy.reshape(-1, cfg.hidden).float()).sum().add(losses.sum()).backward()
    return dict(y=y.detach().float(), dx=xx.grad.float(),
                **{k: v.grad.float() for k, v in leaves.items()})


def moefuse_grads(cfg, mode, x, dy, w):
    m = moefuse.MoE(cfg, mode=mode, device="cuda").load_from_gate_up(**w)
    xx = x.detach().reshape(-1, cfg.hidden).to(torch.bfloat16).requires_grad_(True)
    y, losses = m(xx)
    # The layer adds its router losses to the objective itself (weight 1).
    torch.autograd.backward([y, losses.sum()],
                            [dy.reshape(-1, cfg.hidden).to(torch.bfloat16), None])
    g = m.gate_up_grads()
    return dict(y=y.detach().float(), dx=xx.grad.float(),
                **{k: g[k].float() for k in WEIGHTS})


def report(tag, model, cfg, batch) -> None:
    xs, dys = capture(model, *batch)
    for i, block in enumerate(model.blocks):
        moe = block.moe
        w = (moe.gate_up_weights() if isinstance(moe, moefuse.MoE)
             else {k: getattr(moe, k) for k in WEIGHTS})
        w = {k: w[k] for k in WEIGHTS}
        ref = reference_grads(cfg, xs[i], dys[i], w, torch.float32)
        bf16 = reference_grads(cfg, xs[i], dys[i], w, torch.bfloat16)
        row = {"torch-bf16": {k: rel(bf16[k], ref[k]) for k in ref}}
        for name, mode in (("fused", moefuse.LayerMode.FUSED),
                           ("unfused", moefuse.LayerMode.UNFUSED)):
            g = moefuse_grads(cfg, mode, xs[i], dys[i], w)
            row[name] = {k: rel(g[k], ref[k]) for k in g}
            for k in ("w1", "w2"):
                row[name][k + "_worst_expert"] = max(
                    rel(g[k][e], ref[k][e]) for e in range(cfg.num_experts)
                    if ref[k][e].norm() > 0)
        print(tag, "layer", i, json.dumps(
            {n: {k: round(v, 5) for k, v in r.items()} for n, r in row.items()}), flush=True)


def main() -> int:
    args = lm.parse_args(["--steps", "300"])
    args.device, args.torch_dtype = "cuda", torch.bfloat16
    data = lm.load_corpus(torch)
    cfg = lm.moe_config(moefuse, args, args.aux_coeff)
    batch = lm.Batches(torch, data, args.seq, args.batch, 12345, "cuda").next()
    model = lm.make_model(torch, moefuse, args, "moefuse-fused", args.aux_coeff)
    report("init", model, cfg, batch)
    model, run = lm.train(torch, moefuse, args, data, "moefuse-fused", 400, args.aux_coeff)
    print("trained moefuse-fused for 400 steps, loss", run["loss"][-1], flush=True)
    report("trained", model, cfg, batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Train a small decoder-only MoE language model with three interchangeable MoE back ends.

    torch            pure PyTorch (moefuse.reference: a loop over experts), CPU or GPU
    moefuse-unfused  moefuse.MoE, LayerMode.UNFUSED (Hopper GPU, bf16)
    moefuse-fused    moefuse.MoE, LayerMode.FUSED   (Hopper GPU, bf16)
    torch-grouped    the same MoE with the expert GEMMs through torch._grouped_mm (CUDA, bf16):
                     a fast torch MoE with no host sync, the stronger baseline
    torch-repeat     the torch back end trained a second time; on a GPU its atomics (index_add,
                     attention backward) make it no bitwise copy of the first, so its distance
                     from the torch run is the noise floor of the loss comparison
    torch-grouped-repeat  torch-grouped trained a second time: the same noise floor, against the
                     fast baseline
    moefuse-fused-repeat  moefuse-fused trained a second time: the floor of the moefuse model,
                     whose MoE layers are bitwise repeatable but whose attention and embedding
                     backward are torch's

Every back end starts from the same weights (drawn once on the CPU from --seed; the moefuse
layers get them through load_from_gate_up) and sees the same batches. In bf16 the optimiser
updates fp32 master copies of the parameters (--master-weights; see Optimiser). The script prints
tokens/s per back end (synchronised timing after warm-up steps), the final loss, and how far each
loss curve is from the reference one (torch, else torch-grouped); it writes losses.json and,
when matplotlib is importable, PNG plots: loss vs step per back end, and the per-expert token
counts of one layer after a short training without and with the aux (load-balancing) loss.

Corpus: no downloads. The source text of a fixed list of Python standard-library modules
(inspect.getsource), byte-level (vocabulary 256), so it exists wherever Python does; its exact
bytes follow the Python version, the same for every back end of one run.

    python examples/train_moe_lm.py --tiny --backends torch --device cpu --steps 20
    python examples/train_moe_lm.py --backends torch,moefuse-unfused,moefuse-fused --steps 500
"""

import argparse
import importlib
import inspect
import json
import math
import pathlib
import sys
import time

_REPO_PYTHON = pathlib.Path(__file__).resolve().parent.parent / "python"

BACKENDS = ("torch", "torch-repeat", "torch-grouped", "torch-grouped-repeat", "moefuse-unfused",
            "moefuse-fused", "moefuse-fused-repeat")
# The loss curves are compared with the first of these that ran.
REFERENCES = ("torch", "torch-grouped")

# Defaults (the model) and --tiny (a smoke test that runs in seconds on a CPU).
PRESETS = {
    "default": dict(layers=8, experts=64, topk=4, hidden=512, ffn=256, heads=8, seq=512, batch=16,
                    steps=500, lr=1e-3, aux_coeff=0.01, balance_steps=100, warmup_steps=10),
    "tiny": dict(layers=2, experts=8, topk=2, hidden=64, ffn=32, heads=2, seq=64, batch=4,
                 steps=20, lr=3e-3, aux_coeff=0.01, balance_steps=3, warmup_steps=1),
}

# Standard-library modules whose source is the corpus (pure Python in every CPython).
CORPUS_MODULES = (
    "argparse", "ast", "calendar", "collections", "configparser", "dataclasses", "difflib",
    "email.message", "enum", "fractions", "functools", "inspect", "json.decoder", "logging",
    "pathlib", "pydoc", "random", "shutil", "statistics", "string", "subprocess", "tarfile",
    "textwrap", "threading", "typing", "unittest.case", "zipfile",
)


class UsageError(Exception):
    """A setting this machine or this back end cannot run; printed as one line, no traceback."""


# ---- Settings ----------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="torch,moefuse-unfused,moefuse-fused",
                   help="comma-separated, from " + ", ".join(BACKENDS))
    p.add_argument("--tiny", action="store_true", help="a tiny model for smoke tests")
    for name, kind in (("layers", int), ("experts", int), ("topk", int), ("hidden", int),
                       ("ffn", int), ("heads", int), ("seq", int), ("batch", int),
                       ("steps", int), ("lr", float), ("aux-coeff", float),
                       ("balance-steps", int), ("warmup-steps", int)):
        p.add_argument(f"--{name}", type=kind, default=None,
                       help=f"default {PRESETS['default'][name.replace('-', '_')]}, "
                            f"--tiny {PRESETS['tiny'][name.replace('-', '_')]}")
    p.add_argument("--balance-layer", type=int, default=None,
                   help="the layer whose expert load is plotted (default: the middle one)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--master-weights", choices=("fp32", "none"), default="fp32",
                   help="bf16 training: the optimiser updates fp32 copies of the parameters "
                        "(default), or the bf16 parameters themselves (none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="moe_lm_out", help="folder for losses.json and the plots")
    args = p.parse_args(argv)
    for key, value in PRESETS["tiny" if args.tiny else "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in args.backends:
        if b not in BACKENDS:
            p.error(f"unknown back end {b!r}; choose from {', '.join(BACKENDS)}")
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    if args.balance_layer is None:
        args.balance_layer = args.layers // 2
    if not 0 <= args.balance_layer < args.layers:
        p.error(f"--balance-layer must be in [0, {args.layers}), got {args.balance_layer}")
    if args.hidden % args.heads:
        p.error(f"--hidden ({args.hidden}) must be a multiple of --heads ({args.heads})")
    return args


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise UsageError(f"PyTorch is not importable ({e}); install torch to run this example")
    return torch


def import_moefuse():
    """moefuse from an install, else from this checkout's python/ folder."""
    try:
        return importlib.import_module("moefuse")
    except ImportError:
        sys.path.insert(0, str(_REPO_PYTHON))
        return importlib.import_module("moefuse")


def check_backends(args, torch) -> None:
    """Fails early, with the reason, where a requested back end cannot run here."""
    grouped = [b for b in args.backends if b.startswith("torch-grouped")]
    if grouped and (args.device != "cuda" or args.dtype != "bf16"):
        raise UsageError(f"{', '.join(grouped)} (torch._grouped_mm) need(s) --device cuda and "
                         f"--dtype bf16")
    wanted = [b for b in args.backends if b.startswith("moefuse")]
    if not wanted:
        return
    if args.device != "cuda" or not torch.cuda.is_available():
        raise UsageError(f"{', '.join(wanted)} need(s) a CUDA GPU (Hopper, sm_90) and "
                         f"--device cuda; here device={args.device}, "
                         f"torch.cuda.is_available()={torch.cuda.is_available()}. "
                         f"Use --backends torch to train on this machine")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        raise UsageError(f"{', '.join(wanted)} need(s) a Hopper GPU (sm_90), found "
                         f"sm_{cap[0]}{cap[1]}")
    if args.dtype != "bf16":
        raise UsageError("the moefuse back ends train in bf16 only: use --dtype bf16")
    moefuse = import_moefuse()
    try:
        moefuse.version()
    except (OSError, moefuse.MoefuseError) as e:
        raise UsageError(f"libmoefuse_c.so could not be loaded ({e}); run scripts/build.sh or set "
                         f"MOEFUSE_LIBRARY")


# ---- Corpus ------------------------------------------------------------------------------------

def load_corpus(torch):
    """uint8 tensor of the corpus bytes (see CORPUS_MODULES)."""
    parts = []
    for name in CORPUS_MODULES:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):
            continue  # a trimmed Python without this module's source: the others suffice
    data = "\n\n".join(parts).encode("utf-8")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class Batches:
    """The same sequence of random windows for every back end (a CPU generator from the seed)."""

    def __init__(self, torch, data, seq: int, batch: int, seed: int, device):
        self.torch, self.data, self.seq, self.batch, self.device = torch, data, seq, batch, device
        self.gen = torch.Generator().manual_seed(seed)

    def next(self):
        torch = self.torch
        start = torch.randint(0, self.data.numel() - self.seq - 1, (self.batch,),
                              generator=self.gen)
        window = torch.stack([self.data[s:s + self.seq + 1] for s in start.tolist()]).long()
        window = window.to(self.device, non_blocking=True)
        return window[:, :-1], window[:, 1:]


# ---- Model -------------------------------------------------------------------------------------

def build_model_classes(torch, moefuse):
    from torch import nn
    from torch.nn import functional as F

    from moefuse.reference import moe_forward

    class TorchMoE(nn.Module):
        """The pure-PyTorch back end; weights in the usual layout (w1 rows [gate; up]), initialised
        as moefuse.MoE.reset_parameters does."""

        def __init__(self, config):
            super().__init__()
            c = self.config = config
            self.grouped_mm = False  # the torch-grouped back end sets it
            E, H, Fw = c.num_experts, c.hidden, c.ffn
            self.w_router = nn.Parameter(torch.randn(E, H) * H ** -0.5)
            self.w1 = nn.Parameter(torch.randn(E, c.fc1_width, H) * H ** -0.5)
            self.w2 = nn.Parameter(torch.randn(E, H, Fw) * Fw ** -0.5)

        def forward(self, x):
            y, losses = moe_forward(self.config, x.reshape(-1, x.shape[-1]), self.w_router,
                                    self.w1, self.w2, compute_dtype=x.dtype,
                                    grouped_mm=self.grouped_mm)
            return y.to(x.dtype).view(x.shape), losses

    class Attention(nn.Module):
        def __init__(self, hidden: int, heads: int):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.proj = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x):
            B, S, H = x.shape
            q, k, v = self.qkv(x).view(B, S, 3, self.heads, H // self.heads).unbind(2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            return self.proj(o.transpose(1, 2).reshape(B, S, H))

    class Block(nn.Module):
        def __init__(self, config, heads: int):
            super().__init__()
            self.norm1 = nn.RMSNorm(config.hidden, eps=1e-6)
            self.attn = Attention(config.hidden, heads)
            self.norm2 = nn.RMSNorm(config.hidden, eps=1e-6)
            self.moe = TorchMoE(config)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            y, losses = self.moe(self.norm2(x).contiguous())
            return x + y, losses

    class MoeLM(nn.Module):
        """Byte embedding + learned positions, decoder blocks, final RMSNorm, tied head."""

        def __init__(self, config, layers: int, heads: int, seq: int):
            super().__init__()
            self.embed = nn.Embedding(256, config.hidden)
            nn.init.normal_(self.embed.weight, std=0.02)
            self.pos = nn.Parameter(torch.randn(seq, config.hidden) * 0.02)
            self.blocks = nn.ModuleList(Block(config, heads) for _ in range(layers))
            self.norm = nn.RMSNorm(config.hidden, eps=1e-6)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos[:tokens.shape[1]]
            router_loss = 0.0
            for block in self.blocks:
                x, losses = block(x)
                router_loss = router_loss + losses.sum()
            return self.norm(x) @ self.embed.weight.t(), router_loss

        def use_moefuse(self, mode):
            """Swaps every TorchMoE for a moefuse.MoE holding the same weights."""
            for block in self.blocks:
                ref = block.moe
                block.moe = moefuse.MoE(ref.config, mode=mode, device=ref.w1.device)
                block.moe.load_from_gate_up(w_router=ref.w_router, w1=ref.w1, w2=ref.w2)

    return MoeLM


def moe_config(moefuse, args, aux_coeff: float):
    return moefuse.MoeConfig(hidden=args.hidden, ffn=args.ffn, num_experts=args.experts,
                             top_k=args.topk, activation=moefuse.Activation.SWIGLU,
                             router_kind=moefuse.RouterKind.SOFTMAX_TOPK,
                             router_renormalize=True, aux_loss_coeff=aux_coeff)


def make_model(torch, moefuse, args, backend: str, aux_coeff: float):
    MoeLM = build_model_classes(torch, moefuse)
    torch.manual_seed(args.seed)  # drawn on the CPU in fp32: identical for every back end
    model = MoeLM(moe_config(moefuse, args, aux_coeff), args.layers, args.heads, args.seq)
    model = model.to(device=args.device, dtype=args.torch_dtype)
    if backend.startswith("torch-grouped"):
        for block in model.blocks:
            block.moe.grouped_mm = True
    if backend.startswith("moefuse"):
        model.use_moefuse(moefuse.LayerMode.FUSED if backend.startswith("moefuse-fused")
                          else moefuse.LayerMode.UNFUSED)
    return model


# ---- Training ----------------------------------------------------------------------------------

def synchronize(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def lr_scale(step: int, steps: int) -> float:
    """Linear warm-up over min(50, steps/10) steps, then cosine decay to 10% of the peak. At a
    constant 1e-3 the loss spiked (steps ~250 and ~380 of 500) and every spike sent the back ends'
    trajectories apart, although their per-step gradients agree to bf16 rounding
    (docs/measurements.md, run 8): the decay keeps the comparison about the kernels."""
    ramp = max(1, min(50, steps // 10))
    if step < ramp:
        return (step + 1) / ramp
    progress = (step - ramp) / max(1, steps - ramp)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))


class Optimiser:
    """AdamW with the lr schedule and gradient clipping, over fp32 master copies of bf16
    parameters unless --master-weights none. Updated in place, a bf16 parameter of magnitude
    >= 2^-5 ignores any step below half its spacing (1.2e-4), which the cosine tail's lr reaches:
    pure-bf16 training freezes most expert weights and all norm gains before step 500, and the
    back ends' final losses then record where each trajectory happened to stop (run 8-10's 2-3%
    gaps, of either sign). The masters keep every step; the bf16 parameters are their rounding."""

    def __init__(self, torch, model, args, steps: int):
        self.torch = torch
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = None
        if args.master_weights == "fp32" and args.torch_dtype != torch.float32:
            self.masters = [p.detach().float().clone() for p in self.params]
        self.opt = torch.optim.AdamW(self.masters or self.params, lr=args.lr,
                                     betas=(0.9, 0.95), weight_decay=0.0)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_scale(s, steps))

    def step(self):
        torch = self.torch
        trained = self.params
        if self.masters is not None:
            for m, p in zip(self.masters, self.params):
                m.grad = None if p.grad is None else p.grad.float()
            trained = self.masters
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        self.opt.step()
        self.sched.step()
        if self.masters is not None:
            with torch.no_grad():
                for m, p in zip(self.masters, self.params):
                    p.copy_(m)
                    m.grad = None
        for p in self.params:
            p.grad = None


def train(torch, moefuse, args, data, backend: str, steps: int, aux_coeff: float):
    """(model, {"loss": [...], "router_loss": [...], "tokens_per_s": float})."""
    import torch.nn.functional as F

    model = make_model(torch, moefuse, args, backend, aux_coeff)
    opt = Optimiser(torch, model, args, steps)
    batches = Batches(torch, data, args.seq, args.batch, args.seed + 1, args.device)
    warmup = min(args.warmup_steps, steps - 1)
    ce_hist, router_hist = [], []
    t0 = None
    for step in range(steps):
        if step == warmup:
            synchronize(torch, args.device)
            t0 = time.perf_counter()
        tokens, targets = batches.next()
        logits, router_loss = model(tokens)
        ce = F.cross_entropy(logits.float().view(-1, 256), targets.reshape(-1))
        (ce + router_loss).backward()
        opt.step()
        # Kept on the device: reading them each step would add a sync to every back end.
        ce_hist.append(ce.detach())
        router_hist.append(torch.as_tensor(router_loss).detach().float())
    synchronize(torch, args.device)
    elapsed = time.perf_counter() - t0
    timed_tokens = (steps - warmup) * args.batch * args.seq
    return model, {
        "loss": torch.stack(ce_hist).float().cpu().tolist(),
        "router_loss": torch.stack(router_hist).cpu().tolist(),
        "tokens_per_s": timed_tokens / elapsed,
        "timed_steps": steps - warmup,
    }


def expert_counts(torch, model, batch_tokens, layer: int) -> list:
    """Tokens routed to each expert of `layer` for one batch (its router input captured by a
    hook, routed by moefuse.reference.route: the same rule for every back end)."""
    from moefuse.reference import route, router_logits

    moe = model.blocks[layer].moe
    seen = {}
    handle = moe.register_forward_pre_hook(lambda m, inp: seen.update(x=inp[0]))
    with torch.no_grad():
        model(batch_tokens)
    handle.remove()
    x = seen["x"].reshape(-1, moe.config.hidden)
    idx, _, _ = route(moe.config, router_logits(x, moe.w_router), None)
    return torch.bincount(idx.flatten(), minlength=moe.config.num_experts).cpu().tolist()


def balance_runs(torch, moefuse, args, data) -> dict:
    """Trains a torch back end twice, without and with the aux loss, and counts the tokens each
    expert of one layer gets on a batch the training never drew (a different seed). On a GPU in
    bf16 the sync-free torch-grouped back end (the same math, several times faster; empty experts
    are fine for _grouped_mm on Hopper), else the expert loop."""
    on = args.aux_coeff if args.aux_coeff > 0 else PRESETS["default"]["aux_coeff"]
    probe, _ = Batches(torch, data, args.seq, args.batch, args.seed + 2, args.device).next()
    backend = "torch-grouped" if args.device == "cuda" and args.dtype == "bf16" else "torch"
    out = {"layer": args.balance_layer, "steps": args.balance_steps, "backend": backend}
    for key, coeff in (("aux_off", 0.0), ("aux_on", on)):
        model, _ = train(torch, moefuse, args, data, backend, args.balance_steps, coeff)
        counts = expert_counts(torch, model, probe, args.balance_layer)
        mean = sum(counts) / len(counts)
        out[key] = {"aux_coeff": coeff, "counts": counts, "max_over_mean": max(counts) / mean}
    return out


# ---- Report ------------------------------------------------------------------------------------

def tail_mean(losses: list, n: int = 50) -> float:
    tail = losses[-n:]
    return sum(tail) / len(tail)


def reference_backend(runs: dict):
    """The back end the others are compared with (REFERENCES), or None."""
    return next((name for name in REFERENCES if name in runs), None)


def summarise(runs: dict):
    """Adds each back end's last-50-step mean loss and its signed relative difference from the
    reference back end's; returns the reference's name (None: no comparison)."""
    for r in runs.values():
        r["final_loss"] = r["loss"][-1]
        r["last50_mean_loss"] = tail_mean(r["loss"])
    ref = reference_backend(runs)
    if ref is not None:
        base = runs[ref]["last50_mean_loss"]
        for r in runs.values():
            r["reference"] = ref
            r["rel_diff_vs_reference"] = (r["last50_mean_loss"] - base) / base
    return ref


def write_plots(out: pathlib.Path, runs: dict, balance) -> list:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no PNG plots (losses.json has the data)")
        return []
    written = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in runs.items():
        ax.plot(range(1, len(r["loss"]) + 1), r["loss"], label=name, linewidth=1)
    ax.set(xlabel="step", ylabel="cross-entropy (nats/byte)", title="training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss_vs_step.png", dpi=120)
    written.append(out / "loss_vs_step.png")
    plt.close(fig)
    if balance:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
        for ax, key in zip(axes, ("aux_off", "aux_on")):
            b = balance[key]
            ax.bar(range(len(b["counts"])), b["counts"], width=1.0)
            ax.set(xlabel="expert", title=f"aux coeff {b['aux_coeff']:g}: max/mean "
                                          f"{b['max_over_mean']:.2f}")
        axes[0].set_ylabel(f"tokens routed (layer {balance['layer']})")
        fig.tight_layout()
        fig.savefig(out / "expert_load.png", dpi=120)
        written.append(out / "expert_load.png")
        plt.close(fig)
    return written


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = import_torch()
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.torch_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device; use --device cpu")
    check_backends(args, torch)
    moefuse = import_moefuse()
    data = load_corpus(torch)
    print(f"corpus: {data.numel()} bytes of Python stdlib source; model: {args.layers} layers, "
          f"{args.experts} experts top-{args.topk}, hidden {args.hidden}, expert ffn {args.ffn} "
          f"(SwiGLU); batch {args.batch} x seq {args.seq}; {args.dtype} on {args.device}"
          + (", fp32 master weights" if args.master_weights == "fp32" and args.dtype == "bf16"
             else ""))

    runs = {}
    for backend in args.backends:
        _, runs[backend] = train(torch, moefuse, args, data, backend, args.steps, args.aux_coeff)
        r = runs[backend]
        print(f"{backend:16s} {r['tokens_per_s']:12.0f} tokens/s   final loss "
              f"{r['loss'][-1]:.4f}   ({args.steps} steps, {r['timed_steps']} timed)")
    ref = summarise(runs)
    if ref is not None:
        for name, r in runs.items():
            if name != ref:
                print(f"{name:16s} last-50-step mean loss {r['last50_mean_loss']:.4f} vs {ref} "
                      f"{runs[ref]['last50_mean_loss']:.4f}: relative difference "
                      f"{r['rel_diff_vs_reference']:+.2%}; speed "
                      f"{r['tokens_per_s'] / runs[ref]['tokens_per_s']:.2f}x {ref}")

    balance = None
    if args.balance_steps > 0:
        balance = balance_runs(torch, moefuse, args, data)
        for key in ("aux_off", "aux_on"):
            b = balance[key]
            print(f"expert load, layer {balance['layer']}, aux {b['aux_coeff']:g}: max/mean "
                  f"{b['max_over_mean']:.2f} after {balance['steps']} steps "
                  f"({balance['backend']} back end)")

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "torch_dtype"}
    (out / "losses.json").write_text(json.dumps(
        {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "library_commit": library_commit(moefuse), "settings": settings,
         "device_name": device_name(torch, args.device), "backends": runs,
         "expert_load": balance}, indent=1))
    print(f"wrote {out / 'losses.json'}")
    for path in write_plots(out, runs, balance):
        print(f"wrote {path}")
    return 0


def device_name(torch, device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def library_commit(moefuse):
    """The commit libmoefuse_c was built from, or None where it cannot be loaded (torch only)."""
    try:
        return moefuse.build_commit()
    except (OSError, moefuse.MoefuseError):
        return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as e:
        sys.exit(f"train_moe_lm: {e}")

#!/usr/bin/env python3
"""What a training step costs through the PyTorch module (moefuse.MoE with autograd) when the
batch is split into micro-batches (gradient accumulation), bf16 against FP8 (and the MXFP8
emulation), and for FP8 with the weights quantised every forward (is_first_microbatch=None)
against once a step (True on the first micro-batch, False after: Transformer Engine's
convention).

Per variant: `--micro-batches` forward + backward passes of `--tokens` tokens each, with a fresh
random x and dy each, then the in-place weight update an optimiser makes (w -= 1e-6 · grad under
no_grad, which bumps the version counters the kept FP8 copy is checked against). The step is
timed with CUDA events, warmed up, median of `--steps`.

    MOEFUSE_LIBRARY=build/release/libmoefuse_c.so python3 bench/module_microbatches.py --preset all

Prints a line per preset and variant; --json writes them with the date, GPU and moefuse build.
Exit code 3: torch or a GPU is unavailable.
"""
import dataclasses
import sys

from module_cli import preset_parser, presets, write_results
from torch_timing import UNAVAILABLE, median_ms, torch_or_none

# (name, precision, bf16_wgrad, is_first_microbatch of the first micro-batch / of the others)
VARIANTS = (
    ("bf16", "BF16", False, (None, None)),
    ("fp8 bf16-wgrad, quantise each forward", "FP8_BLOCKWISE", True, (None, None)),
    ("fp8 bf16-wgrad, quantise once a step", "FP8_BLOCKWISE", True, (True, False)),
    ("fp8, quantise each forward", "FP8_BLOCKWISE", False, (None, None)),
    ("fp8, quantise once a step", "FP8_BLOCKWISE", False, (True, False)),
    ("mxfp8 (emulated), quantise once a step", "MXFP8", False, (True, False)),
)


def make_step(torch, moe, micro_batches: int, tokens: int, flags):
    """One optimiser step of `micro_batches` forward + backward passes, as a closure."""
    hidden = moe.config.hidden
    params = [p for p in moe.parameters()]

    def step():
        for p in params:
            p.grad = None
        for i in range(micro_batches):
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            dy = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            y, losses = moe(x, is_first_microbatch=flags[0] if i == 0 else flags[1])
            torch.autograd.backward([y, losses.sum()], [dy, None])
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=1e-6)

    return step


def main() -> int:
    ap = preset_parser(__doc__, tokens_help="tokens a micro-batch")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch = torch_or_none()
    if torch is None:
        return UNAVAILABLE
    import moefuse

    results = []
    for preset in presets(moefuse, a.preset):
        base = None
        for name, precision, bf16_wgrad, flags in VARIANTS:
            config = dataclasses.replace(moefuse.MoeConfig.preset(preset),
                                         precision=moefuse.Precision[precision],
                                         bf16_wgrad=bf16_wgrad)
            moe = moefuse.MoE(config, device="cuda")
            step = make_step(torch, moe, a.micro_batches, a.tokens, flags)
            ms = median_ms(step, a.warmup, a.steps)
            base = base or ms
            results.append({"preset": preset, "variant": name, "tokens": a.tokens,
                            "micro_batches": a.micro_batches, "step_ms": ms,
                            "micro_batch_ms": ms / a.micro_batches, "speedup_vs_bf16": base / ms})
            print(f"{preset:14s} {name:40s} step {ms:8.3f} ms  "
                  f"{ms / a.micro_batches:7.3f} ms a micro-batch  {base / ms:5.3f}x bf16",
                  flush=True)
            del moe, step
            torch.cuda.empty_cache()
    if a.json:
        write_results(a.json, torch, moefuse, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

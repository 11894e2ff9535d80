#!/usr/bin/env python3
"""Idle gaps between the kernels of the MoE layer's forward+backward CUDA graph (issue 6: no gap
longer than 5 µs).

Captures moefuse's layer_forward and layer_backward ops (called directly, without autograd, so
only the layer's own kernels run: router GEMMs, dispatch, grouped GEMMs, combine) in one
torch.cuda graph, replays it under torch.profiler (CUPTI records the kernels of graph replays),
and reports, per replay, the intervals in which no kernel of the step runs on any stream. The
first replay is a warm-up and not counted.

    MOEFUSE_LIBRARY=build/release/libmoefuse_c.so python3 bench/layer_gaps.py --preset all

--precision fp8 runs the FP8_BLOCKWISE layer; its weights are quantised once before the capture
(once per optimiser step in training), as moefuse-bench times it, so the graph holds only the
forward and backward.

Prints one line per preset and mode; --json writes every gap above --threshold-us with the kernels
on either side, and the step's kernels in launch order with each one's median duration over the
replays, which --kernels also prints: which kernel moved between two builds, where the step's
total does not say (under the H200's power cap the big GEMMs' times vary by ±2% from run to run,
more than a change to the small kernels moves the step; run 34). Exit code 3: torch or a GPU is
unavailable.
"""
import json
import pathlib
import statistics
import sys
import tempfile
import time

from module_cli import preset_parser, presets, write_results
from torch_timing import UNAVAILABLE, torch_or_none

# Kernels further apart than this belong to different replays (each replay is followed by a
# synchronisation and a sleep much longer than this).
REPLAY_SEPARATION_US = 2000.0


def make_layer(torch, moefuse, preset: str, mode: str, tokens: int, precision: str):
    config = moefuse.MoeConfig.preset(preset, precision=moefuse.Precision[precision])
    moe = moefuse.MoE(config, mode=moefuse.LayerMode[mode.upper()], device="cuda")
    x = torch.randn(tokens, config.hidden, device="cuda").bfloat16()
    dy = torch.randn(tokens, config.hidden, device="cuda").bfloat16()
    return moe, x, dy


def step(torch, moe, x, dy):
    """One forward + backward of the layer through its custom ops (no autograd bookkeeping)."""
    from moefuse.layer import WEIGHT_NAMES, layer_backward, layer_forward
    weights = moe._tensors()
    args = [weights[n] for n in WEIGHT_NAMES]
    handle = moe._handle(x.device)
    # The first call (the warm-up, outside the capture) quantises and keeps the FP8 weights.
    fp8 = moe._fp8_weights(handle, weights, is_first_microbatch=moe._kept_fp8.region is None)
    y, losses, cache = layer_forward(handle, x, *args, fp8)
    loss_grads = torch.ones(2, dtype=torch.float32, device=x.device)  # d(aux + z loss) = 1 each
    return (y, losses, *layer_backward(handle, x, dy, loss_grads, *args, cache, fp8))


def kernel_intervals(trace_path) -> list:
    """(start µs, end µs, name) of every GPU kernel in a chrome trace, sorted by start."""
    events = json.loads(pathlib.Path(trace_path).read_text())["traceEvents"]
    kernels = [(e["ts"], e["ts"] + e.get("dur", 0.0), e["name"]) for e in events
               if e.get("cat") == "kernel" and e.get("ph") == "X"]
    return sorted(kernels)


def split_replays(kernels: list) -> list:
    replays, current, last_end = [], [], None
    for k in kernels:
        if last_end is not None and k[0] - last_end > REPLAY_SEPARATION_US:
            replays.append(current)
            current = []
        current.append(k)
        last_end = k[1] if last_end is None else max(last_end, k[1])
    if current:
        replays.append(current)
    return replays


def idle_gaps(kernels: list) -> tuple:
    """(span µs, [(gap µs, kernel before, kernel after)]) over the union of the intervals."""
    gaps, end, before = [], kernels[0][1], kernels[0][2]
    for start, stop, name in kernels[1:]:
        if start > end:
            gaps.append((start - end, before, name))
        if stop > end:
            end, before = stop, name
    return end - kernels[0][0], gaps


def profile_replays(torch, moe, x, dy, replays: int) -> list:
    """The kernels of each of `replays` replays of the step's CUDA graph (after one warm-up
    replay), as kernel_intervals lists."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (allocator, lazy init)
        step(torch, moe, x, dy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(torch, moe, x, dy)
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(replays + 1):
            graph.replay()
            torch.cuda.synchronize()
            time.sleep(0.01)
    with tempfile.TemporaryDirectory() as tmp:
        trace = pathlib.Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        runs = split_replays(kernel_intervals(trace))[1:]
    if not runs:
        raise RuntimeError("the profiler recorded no kernels of the graph replays")
    return runs


def kernel_table(runs: list) -> list:
    """Per kernel position (launch order): its median start offset and duration over the
    replays, and its name."""
    rows = []
    for i in range(min(len(r) for r in runs)):
        rows.append({"start_us": round(statistics.median(r[i][0] - r[0][0] for r in runs), 1),
                     "us": round(statistics.median(r[i][1] - r[i][0] for r in runs), 1),
                     "name": runs[0][i][2]})
    return rows


def measure(torch, moe, x, dy, replays: int, threshold_us: float) -> dict:
    runs = profile_replays(torch, moe, x, dy, replays)
    spans, counts, worst, over = [], [], [], []
    for kernels in runs:
        span, gaps = idle_gaps(kernels)
        spans.append(span)
        counts.append(len(kernels))
        worst.append(max((g[0] for g in gaps), default=0.0))
        over.append(sorted((g for g in gaps if g[0] > threshold_us), reverse=True))
    median_run = sorted(range(len(runs)), key=lambda i: spans[i])[len(runs) // 2]
    return {
        "replays": len(runs),
        "kernels_per_step": statistics.median(counts),
        "step_span_us": statistics.median(spans),
        "max_gap_us": statistics.median(worst),
        "gaps_over_threshold": statistics.median(len(o) for o in over),
        "gaps_of_median_replay": [{"us": round(g[0], 2), "after": g[1], "before": g[2]}
                                  for g in over[median_run][:20]],
        "kernels": kernel_table(runs),
    }


def main() -> int:
    ap = preset_parser(__doc__)
    ap.add_argument("--mode", choices=["fused", "unfused", "both"], default="both")
    ap.add_argument("--precision", choices=["BF16", "FP8_BLOCKWISE"], default="BF16")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--threshold-us", type=float, default=5.0)
    ap.add_argument("--kernels", action="store_true",
                    help="also print the step's kernels with their median durations")
    a = ap.parse_args()
    torch = torch_or_none()
    if torch is None:
        return UNAVAILABLE
    import moefuse

    modes = ("fused", "unfused") if a.mode == "both" else (a.mode,)
    results = []
    for preset in presets(moefuse, a.preset):
        for mode in modes:
            moe, x, dy = make_layer(torch, moefuse, preset, mode, a.tokens, a.precision)
            r = measure(torch, moe, x, dy, a.replays, a.threshold_us)
            r.update(preset=preset, mode=mode, precision=a.precision, tokens=a.tokens,
                     threshold_us=a.threshold_us)
            results.append(r)
            print(f"{preset:14s} {mode:8s} {a.precision:13s} "
                  f"step {r['step_span_us'] / 1000:8.3f} ms  "
                  f"{r['kernels_per_step']:4.0f} kernels  max gap {r['max_gap_us']:7.2f} µs  "
                  f"gaps > {a.threshold_us:g} µs: {r['gaps_over_threshold']:.0f}", flush=True)
            if a.kernels:
                for i, k in enumerate(r["kernels"]):
                    print(f"{i:3d} {k['start_us']:9.1f} {k['us']:9.1f}  {k['name'][:110]}")
            del moe, x, dy
            torch.cuda.empty_cache()
    if a.json:
        write_results(a.json, torch, moefuse, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What every torch baseline script (bench/torch_*.py) shares: the availability check and the
event timing, so that all of moefuse-bench's torch figures are measured the same way."""
import statistics
import sys

# The exit code that tells tools/bench/torch_runner.cpp "torch or a GPU is unavailable".
UNAVAILABLE = 3


def torch_or_none():
    """The torch module when it can run on a CUDA device, else None (the reason on stderr)."""
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        return torch
    except Exception as err:  # noqa: BLE001 - any import or driver failure means unavailable
        print(f"torch unavailable: {err}", file=sys.stderr)
        return None


def median_ms(fn, warmup, iters):
    """Median of `iters` CUDA-event-timed calls of fn after `warmup` untimed ones."""
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

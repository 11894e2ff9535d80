"""moefuse.ep.ExpertParallelMoE over torch.distributed (NCCL) on two GPUs, one process a rank.

Every rank draws the same full weights and every rank's tokens (one seed), runs the EP layer on
its own tokens and its experts' weights, and compares with the fp32 torch reference
(moefuse/reference.py): y, losses, dx and d_w_router against the reference on the rank's own
tokens (the router is data-parallel), dW1 and dW2 of the rank's experts against the reference's
summed over every rank's tokens. Tolerances as tests/test_layer_torch.py. Skipped without two
sm_90 GPUs or without libmoefuse_ep_c.so."""

import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from test_layer_torch import dyadic, expect_close, gate_up_weights, scaled  # noqa: E402

RANKS = 2
TOKENS = (200, 57)  # per rank: uneven, neither a multiple of any tile


def _no_two_hoppers_reason():
    if not torch.cuda.is_available() or torch.cuda.device_count() < RANKS:
        return f"needs {RANKS} CUDA devices"
    if any(torch.cuda.get_device_capability(i) != (9, 0) for i in range(RANKS)):
        return "needs sm_90 (Hopper) GPUs"
    try:
        from moefuse import _capi_ep
        _capi_ep.lib()
    except OSError as e:
        return str(e)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, chunks: int) -> None:
    from moefuse.ep import ExpertParallelMoE
    from moefuse.reference import moe_forward

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=RANKS,
                            device_id=torch.device("cuda", rank))
    try:
        torch.manual_seed(1234)  # the same draws on every rank
        c = scaled("qwen3-30b-a3b", num_experts=8, top_k=2)
        w = gate_up_weights(c)
        xs = [dyadic((t, c.hidden), 8).bfloat16() for t in TOKENS]
        dys = [torch.randn(t, c.hidden, device="cuda").bfloat16() for t in TOKENS]

        moe = ExpertParallelMoE(c, max_tokens_per_rank=max(TOKENS), chunks=chunks,
                                transfer_sms=8).load_from_gate_up(**w)
        assert (moe.first_expert, moe.local_experts) == (rank * 4, 4)
        x = xs[rank].clone().requires_grad_()
        y, losses = moe(x)
        ((y.float() * dys[rank].float()).sum() + losses.sum()).backward()
        torch.cuda.synchronize()

        # The reference per rank's tokens; expert gradients summed over the ranks.
        own, summed = None, {}
        for r in range(RANKS):
            leaves = {k: v.float().requires_grad_() for k, v in w.items() if k != "score_bias"}
            xr = xs[r].float().requires_grad_()
            yr, lr = moe_forward(c, xr, score_bias=w.get("score_bias"), **leaves)
            ((yr * dys[r].float()).sum() + lr.sum()).backward()
            for k in ("w1", "w2"):
                summed[k] = summed.get(k, 0) + leaves[k].grad
            if r == rank:
                own = (yr, lr, xr.grad, leaves["w_router"].grad)

        yr, lr, dxr, dwr = own
        expect_close("y", y, yr, 2e-2)
        expect_close("losses", losses, lr, 1e-4)
        expect_close("dx", x.grad, dxr, 2e-2)
        grads = moe.gate_up_grads()
        expect_close("d_w_router", grads["w_router"], dwr, 2e-2)
        mine = slice(moe.first_expert, moe.first_expert + moe.local_experts)
        for k in ("w1", "w2"):
            expect_close("d_" + k, grads[k], summed[k][mine], 2e-2)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(_no_two_hoppers_reason() is not None,
                    reason=_no_two_hoppers_reason() or "")
@pytest.mark.parametrize("chunks", [1, 2])
def test_expert_parallel_matches_torch_reference(chunks):
    mp.spawn(_rank_main, args=(_free_port(), chunks), nprocs=RANKS, join=True)

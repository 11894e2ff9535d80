"""moefuse.ep: the MoE layer with its experts spread over the ranks of a torch.distributed NCCL
process group (expert parallelism; include/moefuse/moefuse_ep.h, docs/ep.md).

    import torch.distributed as dist
    from moefuse.ep import ExpertParallelMoE
    dist.init_process_group("nccl")
    moe = ExpertParallelMoE(config, max_tokens_per_rank=8192)   # every rank, collectively
    y, losses = moe(x)                                           # every rank, in the same order

Each rank holds E / ranks experts (w1, w2, b1, b2: [El, ...], rank r's experts
[r·El, (r+1)·El)) and the whole router and shared expert (replicated: their gradients are this
rank's tokens' part; sum them over the data-parallel group like any replicated weight). The
router and its aux and z losses see the rank's own tokens. Eager mode (the C layer never
synchronises, but capture through this module is not tested); not torch.compile (the ops are a
plain autograd.Function).

The library (libmoefuse_ep_c.so) talks NCCL through its own communicator, made from a unique id
that rank 0 sends the others over `group`: it must load the libnccl it was built against; with
torch imported first that is torch's, already in the process.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from moefuse import _capi, _capi_ep
from moefuse.config import MoeConfig
from moefuse.layer import (WEIGHT_NAMES, _bytes_tensor, _grad_buffers, _grads_struct, _loss_grads,
                           _main_grad_results, _main_grads_struct, _Weights, _weights_struct,
                           main_grads_of, validate_inputs, weight_specs)


class _EpLayer:
    """The C layer of one module (its NCCL communicator included), destroyed with it."""

    def __init__(self, handle: int, config: MoeConfig):
        self.handle, self.config = handle, config
        self.first_expert, self.local_experts, self.cache_bytes, self.workspace_bytes = (
            _capi_ep.layer_info(handle))

    def __del__(self):
        _capi_ep.layer_destroy(self.handle)


class _EpFunction(torch.autograd.Function):
    """The EP layer's forward and backward; main_grads (fuse_wgrad_accumulation) or None."""

    @staticmethod
    def forward(ctx, layer: _EpLayer, x: Tensor, main_grads: Optional[list[Tensor]],
                *weights: Optional[Tensor]):
        tokens = x.shape[0]
        y = torch.empty_like(x)
        losses = torch.empty(2, dtype=torch.float32, device=x.device)
        cache = _bytes_tensor(layer.cache_bytes, x.device)
        workspace = _bytes_tensor(layer.workspace_bytes, x.device)
        _capi_ep.layer_forward(layer.handle, tokens, x.data_ptr(), _weights_struct(*weights),
                               y.data_ptr(), losses.data_ptr(), cache.data_ptr(),
                               layer.cache_bytes, workspace.data_ptr(), layer.workspace_bytes,
                               torch.cuda.current_stream(x.device).cuda_stream)
        ctx.layer, ctx.main_grads = layer, main_grads
        ctx.save_for_backward(x, cache, *weights)
        return y, losses

    @staticmethod
    def backward(ctx, dy, d_losses):
        layer: _EpLayer = ctx.layer
        x, cache, *weights = ctx.saved_tensors
        dy = torch.zeros_like(x) if dy is None else dy.to(torch.bfloat16).contiguous()
        loss_grads = _loss_grads(d_losses, x)
        if ctx.main_grads is not None:
            grads = [torch.empty_like(x)]
            s = _main_grads_struct(grads[0], weights, ctx.main_grads, loss_grads)
        else:
            grads = _grad_buffers(x, dict(zip(WEIGHT_NAMES, weights)))
            s = _grads_struct(grads, loss_grads)
        workspace = _bytes_tensor(layer.workspace_bytes, x.device)
        _capi_ep.layer_backward(layer.handle, x.shape[0], x.data_ptr(), dy.data_ptr(),
                                _weights_struct(*weights), s, cache.data_ptr(), layer.cache_bytes,
                                workspace.data_ptr(), layer.workspace_bytes,
                                torch.cuda.current_stream(x.device).cuda_stream)
        if ctx.main_grads is not None:
            return None, grads[0], None, *_main_grad_results(weights)
        d_by_name = dict(zip([n for n in WEIGHT_NAMES if n != "score_bias"], grads[1:]))
        out = [None, grads[0], None]
        for name, w in zip(WEIGHT_NAMES, weights):
            g = d_by_name.get(name)
            out.append(None if w is None or g is None else g.to(w.dtype))
        return tuple(out)


class ExpertParallelMoE(_Weights):
    """moefuse.MoE with its experts over the ranks of `group` (default: the world), NCCL backend,
    one GPU a rank (the current CUDA device), all in one NVLink domain.

    Collective: every rank constructs it with the same config and options. max_tokens_per_rank
    bounds T of every forward (buffers and NCCL windows are sized by it); chunks > 1 pipelines
    the transfers with the expert GEMMs on transfer_sms SMs; fp8_dispatch sends the forward's rows
    as FP8 (1x128 blocks, about half the bytes; the experts then see x quantised) (moefuse/
    ep_layer.h). fuse_wgrad_accumulation: as MoE's (every parameter's fp32 main_grad added to).
    """

    def __init__(self, config: MoeConfig, group: Optional[dist.ProcessGroup] = None, *,
                 max_tokens_per_rank: int, receive_capacity_rows: int = 0, chunks: int = 1,
                 transfer_sms: int = 16, fp8_dispatch: bool = False,
                 fuse_wgrad_accumulation: bool = False):
        group = group if group is not None else dist.group.WORLD
        if dist.get_backend(group) != "nccl":
            raise ValueError(f"moefuse: the process group must use the NCCL backend, "
                             f"got {dist.get_backend(group)!r}")
        config.validate()
        ranks, rank = dist.get_world_size(group), dist.get_rank(group)
        # Checked here too (the C layer names config.num_experts), because the parameters are
        # shaped by it before the C layer exists.
        if config.num_experts % ranks:
            raise ValueError(f"moefuse: config.num_experts ({config.num_experts}) must be a "
                             f"multiple of the group's {ranks} ranks")
        device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(config, weight_specs(config, config.num_experts // ranks), device)
        # Rank 0 makes the NCCL unique id; the others get it over the group.
        box = [_capi_ep.unique_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        options = _capi.EpOptionsStruct(max_tokens_per_rank=max_tokens_per_rank,
                                        receive_capacity_rows=receive_capacity_rows,
                                        chunks=chunks, transfer_sms=transfer_sms,
                                        fp8_dispatch=int(fp8_dispatch))
        with torch.cuda.device(device):
            self._layer = _EpLayer(_capi_ep.layer_create(config.to_c(), box[0], ranks, rank,
                                                         options), config)
        self.ranks, self.rank = ranks, rank
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)

    @property
    def first_expert(self) -> int:
        return self._layer.first_expert

    @property
    def local_experts(self) -> int:
        return self._layer.local_experts

    @torch.no_grad()
    def load_from_gate_up(self, **weights: Optional[Tensor]) -> "ExpertParallelMoE":
        """As MoE.load_from_gate_up from all E experts' weights: keeps this rank's."""
        first, count = self.first_expert, self.local_experts
        for name in ("w1", "b1", "w2", "b2"):
            if weights.get(name) is not None:
                weights[name] = weights[name][first:first + count]
        return super().load_from_gate_up(**weights)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        flat = self._flat_input(x)
        weights = self._tensors()
        # More tokens than max_tokens_per_rank: the C layer names x (InvalidArgument).
        validate_inputs(self.config, flat, weights, self.local_experts)
        main = main_grads_of(weights) if self.fuse_wgrad_accumulation else None
        y, losses = _EpFunction.apply(self._layer, flat, main,
                                      *(weights[n] for n in WEIGHT_NAMES))
        return y.view(x.shape), losses

    def extra_repr(self) -> str:
        return (f"{self.config}, rank {self.rank} of {self.ranks}, experts "
                f"[{self.first_expert}, {self.first_expert + self.local_experts})")

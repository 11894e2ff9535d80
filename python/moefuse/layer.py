"""The MoE layer for PyTorch: custom ops over the C layer, their autograd, and moefuse.MoE.

The ops `moefuse::layer_forward` / `moefuse::layer_backward` (torch.library, with fake
implementations so torch.compile traces them) hand data pointers and the current CUDA stream to
moefuse_layer_forward/backward. They allocate y, the cache and the workspace through torch's
allocator on the current stream and never synchronise, so they work inside torch.cuda.graph.

Gradient contract: autograd's. Backward hands the losses' upstream gradient (what autograd
passes for `losses`: 0 when the caller never uses them, 1 for `loss + losses.sum()`) to the C
layer, whose router kernel reads it on the device, so the router's gradient is that of
<y, dy> + γa·aux_loss + γz·z_loss with no host sync. The expert weights' gradients come back
bf16 and the others fp32; each is cast to its parameter's dtype here.
"""

# No `from __future__ import annotations`: torch.library reads the custom ops' annotations.
import dataclasses
import functools
from typing import Optional

import torch
from torch import Tensor, nn

from moefuse import _capi
from moefuse._capi import LayerMode
from moefuse.config import MoeConfig

# Gate/up interleave granularity of GLU weights (kGluInterleave in moefuse/grouped_gemm.h).
GLU_INTERLEAVE = 8

# The weights in the order of moefuse_layer_weights_t, and their gradients' names.
WEIGHT_NAMES = ("w_router", "score_bias", "w1", "b1", "w2", "b2", "shared_w1", "shared_w2")
GRAD_NAMES = ("dx", "d_w_router", "d_w1", "d_b1", "d_w2", "d_b2", "d_shared_w1", "d_shared_w2")


@dataclasses.dataclass(frozen=True)
class _LayerInfo:
    config: MoeConfig
    mode: LayerMode
    recompute_pre: bool


# Every live C layer by handle: the ops get the handle (an int), their fake implementations read
# the config from here to shape the outputs without touching the GPU.
_LAYERS: dict[int, _LayerInfo] = {}


@functools.lru_cache(maxsize=256)
def _sizes(handle: int, tokens: int) -> tuple[int, int]:
    info = _LAYERS[handle]
    return info.config.layer_sizes(tokens, info.mode, info.recompute_pre)


# ---- GLU layout --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _interleaved_row_of(ffn: int) -> Tensor:
    """[2F]: the interleaved row of each reference row r of a [gate; up] weight (CPU)."""
    if ffn % GLU_INTERLEAVE:
        raise ValueError(f"moefuse: ffn must be a multiple of {GLU_INTERLEAVE} for GLU weights, "
                         f"got {ffn}")
    r = torch.arange(2 * ffn)
    up = r >= ffn
    j = torch.where(up, r - ffn, r)
    return (2 * GLU_INTERLEAVE * (j // GLU_INTERLEAVE) + up.long() * GLU_INTERLEAVE
            + j % GLU_INTERLEAVE)


def interleave_glu(t: Tensor, ffn: int, dim: int) -> Tensor:
    """[gate; up] along `dim` (2F rows) -> the layer's interleaved order."""
    dst = _interleaved_row_of(ffn)
    src_of_dst = torch.empty_like(dst)
    src_of_dst[dst] = torch.arange(2 * ffn)
    return t.index_select(dim, src_of_dst.to(t.device))


def deinterleave_glu(t: Tensor, ffn: int, dim: int) -> Tensor:
    """The inverse of interleave_glu (for weights and their gradients)."""
    return t.index_select(dim, _interleaved_row_of(ffn).to(t.device))


# ---- Shapes and validation ---------------------------------------------------------------------

def weight_specs(config: MoeConfig, experts_held: Optional[int] = None
                 ) -> dict[str, Optional[tuple[tuple[int, ...], torch.dtype]]]:
    """Shape and dtype of each weight in the layer's layout; None where the config has none.
    experts_held: the experts whose weights are held (expert parallelism: a rank's), default all
    E; the router's are always all E."""
    E, H, F = experts_held or config.num_experts, config.hidden, config.ffn
    bf, f32 = torch.bfloat16, torch.float32
    shared = config.shared_expert_ffn > 0
    return {
        "w_router": ((config.num_experts, H), bf),
        "score_bias": ((config.num_experts,), f32) if config.router_use_score_bias else None,
        "w1": ((E, config.fc1_width, H), bf),
        "b1": ((E, config.fc1_width), f32) if config.expert_bias else None,
        "w2": ((E, H, F), bf),
        "b2": ((E, H), f32) if config.expert_bias else None,
        "shared_w1": ((config.shared_fc1_width, H), bf) if shared else None,
        "shared_w2": ((H, config.shared_expert_ffn), bf) if shared else None,
    }


def _expect_tensor(name: str, t, shape: tuple[int, ...], dtype: torch.dtype,
                   device: Optional[torch.device]) -> None:
    """Raises TypeError/ValueError naming `name` unless t is a contiguous tensor as described.
    dtype, shape and contiguity are checked before the device, so they are testable on CPU."""
    if not isinstance(t, Tensor):
        raise TypeError(f"moefuse: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"moefuse: {name} must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"moefuse: {name} must have shape {list(shape)}, got {list(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"moefuse: {name} must be contiguous (strides {t.stride()}); "
                         f"call .contiguous() first")
    if t.device.type != "cuda":
        raise ValueError(f"moefuse: {name} must be on a CUDA device, got {t.device}")
    if device is not None and t.device != device:
        raise ValueError(f"moefuse: {name} must be on {device} (where x is), got {t.device}")


def validate_inputs(config: MoeConfig, x, weights: dict[str, Optional[Tensor]],
                    experts_held: Optional[int] = None) -> None:
    """Every check the C layer would make on shapes, dtypes and devices, as Python errors."""
    if not isinstance(x, Tensor):
        raise TypeError(f"moefuse: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(f"moefuse: x must have shape [tokens >= 1, {config.hidden}], "
                         f"got {list(x.shape)}")
    _expect_tensor("x", x, (x.shape[0], config.hidden), torch.bfloat16, None)
    for name, spec in weight_specs(config, experts_held).items():
        t = weights.get(name)
        if spec is None:
            if t is not None:
                raise ValueError(f"moefuse: {name} must be None for this config")
            continue
        if t is None:
            raise ValueError(f"moefuse: {name} is required by this config")
        _expect_tensor(name, t, spec[0], spec[1], x.device)


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None or t.numel() == 0 else t.data_ptr()


def _weights_struct(*weights: Optional[Tensor]) -> _capi.LayerWeightsStruct:
    return _capi.LayerWeightsStruct(*(_ptr(w) for w in weights))


@functools.lru_cache(maxsize=256)
def _fp8_weight_bytes(handle: int) -> int:
    return _capi.layer_fp8_weight_bytes(_LAYERS[handle].config.to_c())


def _bytes_tensor(n: int, device: torch.device) -> Tensor:
    # Never empty, so that data_ptr() is a real (256-byte aligned) allocation.
    return torch.empty(max(n, 1), dtype=torch.uint8, device=device)


def _point_at_fp8(weights: _capi.LayerWeightsStruct, handle: int, fp8: Optional[Tensor]) -> None:
    """Points `weights` at `fp8`, the region prepare_fp8_weights made, where the layer has FP8
    weights; a missing region is left for the C layer to name (weights.fp8)."""
    fp8_bytes = _fp8_weight_bytes(handle)
    if fp8_bytes and fp8 is not None:
        weights.fp8_weights, weights.fp8_weights_bytes = fp8.data_ptr(), fp8.numel()


def _cache_fake_size(handle: int, tokens) -> object:
    if isinstance(tokens, int):
        return _sizes(handle, tokens)[0]
    # Symbolic token count (dynamic shapes): the byte count is a non-linear function of it.
    return torch.library.get_ctx().new_dynamic_size()


# ---- Custom ops --------------------------------------------------------------------------------

@torch.library.custom_op("moefuse::prepare_fp8_weights", mutates_args=())
def prepare_fp8_weights(handle: int, w1: Tensor, w2: Tensor, shared_w1: Optional[Tensor],
                        shared_w2: Optional[Tensor]) -> Tensor:
    """The low-precision layer's copy of w1 and w2 as one fresh region [bytes] uint8, made on the
    current stream (deterministic: the same weights give the same bytes): FP8_BLOCKWISE, E4M3 in
    128x128 blocks with fp32 scales and the transposed copies the dgrads read, of the shared
    expert's weights too (None without one); MXFP8, w1 and w2 quantise-dequantised along each
    GEMM's K (four bf16 copies; its shared expert stays bf16). layer_forward and layer_backward
    read it; a bf16 layer has none to make (an error)."""
    fp8_bytes = _fp8_weight_bytes(handle)
    if not fp8_bytes:
        raise ValueError("moefuse: prepare_fp8_weights needs a layer with "
                         "precision=Precision.FP8_BLOCKWISE or Precision.MXFP8")
    with torch.cuda.device(w1.device):
        fp8 = _bytes_tensor(fp8_bytes, w1.device)
        weights = _weights_struct(None, None, w1, None, w2, None, shared_w1, shared_w2)
        _point_at_fp8(weights, handle, fp8)
        _capi.layer_prepare_fp8_weights(handle, weights, torch.cuda.current_stream().cuda_stream)
    return fp8


@prepare_fp8_weights.register_fake
def _(handle, w1, w2, shared_w1, shared_w2):
    return w1.new_empty((_fp8_weight_bytes(handle),), dtype=torch.uint8)


@torch.library.custom_op("moefuse::layer_forward", mutates_args=())
def layer_forward(handle: int, x: Tensor, w_router: Tensor, score_bias: Optional[Tensor],
                  w1: Tensor, b1: Optional[Tensor], w2: Tensor, b2: Optional[Tensor],
                  shared_w1: Optional[Tensor], shared_w2: Optional[Tensor],
                  fp8: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """(y [T, H] bf16, losses [2] fp32 {aux, z}, cache [bytes] uint8 for layer_backward). fp8:
    prepare_fp8_weights(...) with a low-precision recipe, else None."""
    tokens = x.shape[0]
    cache_bytes, workspace_bytes = _sizes(handle, tokens)
    with torch.cuda.device(x.device):
        y = torch.empty_like(x)
        losses = torch.empty(2, dtype=torch.float32, device=x.device)
        cache = _bytes_tensor(cache_bytes, x.device)
        workspace = _bytes_tensor(workspace_bytes, x.device)
        weights = _weights_struct(w_router, score_bias, w1, b1, w2, b2, shared_w1, shared_w2)
        _point_at_fp8(weights, handle, fp8)
        _capi.layer_forward(
            handle, tokens, x.data_ptr(), weights,
            y.data_ptr(), losses.data_ptr(), cache.data_ptr(), cache_bytes,
            workspace.data_ptr(), workspace_bytes, torch.cuda.current_stream().cuda_stream)
    return y, losses, cache


@layer_forward.register_fake
def _(handle, x, w_router, score_bias, w1, b1, w2, b2, shared_w1, shared_w2, fp8):
    cache = x.new_empty((_cache_fake_size(handle, x.shape[0]),), dtype=torch.uint8)
    return torch.empty_like(x), x.new_empty((2,), dtype=torch.float32), cache


def _grad_like(t: Optional[Tensor], like: Tensor, dtype: torch.dtype) -> Tensor:
    """A gradient buffer shaped as t, or an empty one where t is absent."""
    if t is None:
        return like.new_empty((0,), dtype=dtype)
    return t.new_empty(t.shape, dtype=dtype)


def _grad_buffers(x: Tensor, weights: dict) -> list[Tensor]:
    """dx, then the gradient of every weight but score_bias (WEIGHT_NAMES' order; empty where the
    weight is absent): fp32, but d_w1 and d_w2 bf16, the gradient torch gives the bf16 weights,
    which every wgrad of the layer writes (its fp32 sum rounded once, no fp32 copy to convert)."""
    return [torch.empty_like(x)] + [
        _grad_like(weights[n], x, torch.bfloat16 if n in ("w1", "w2") else torch.float32)
        for n in WEIGHT_NAMES if n != "score_bias"]


def _grads_struct(grads: list[Tensor], loss_grads: Tensor) -> _capi.LayerGradsStruct:
    """The C struct over the gradient buffers and the losses' upstream gradient ([2] fp32)."""
    s = _capi.LayerGradsStruct(*(_ptr(g) for g in grads))
    s.expert_grads = _capi.ExpertGrads.BF16
    s.loss_grads = loss_grads.data_ptr()
    return s


def _loss_grads(d_losses: Optional[Tensor], x: Tensor) -> Tensor:
    """autograd's gradient of `losses` as the C layer reads it: [2] fp32, contiguous, on x's
    device (zeros when autograd passes none: the losses were not used)."""
    if d_losses is None:
        return torch.zeros(2, dtype=torch.float32, device=x.device)
    return d_losses.to(device=x.device, dtype=torch.float32).contiguous()


def _run_layer_backward(handle: int, x: Tensor, dy: Tensor, weights, cache: Tensor,
                        fp8: Optional[Tensor], grads: _capi.LayerGradsStruct) -> None:
    """moefuse_layer_backward on the current stream (of x's device, current), with a fresh
    workspace; `weights` in WEIGHT_NAMES' order."""
    tokens = x.shape[0]
    cache_bytes, workspace_bytes = _sizes(handle, tokens)
    workspace = _bytes_tensor(workspace_bytes, x.device)
    w = _weights_struct(*weights)
    _point_at_fp8(w, handle, fp8)
    _capi.layer_backward(handle, tokens, x.data_ptr(), dy.data_ptr(), w, grads, cache.data_ptr(),
                         cache_bytes, workspace.data_ptr(), workspace_bytes,
                         torch.cuda.current_stream().cuda_stream)


@torch.library.custom_op("moefuse::layer_backward", mutates_args=())
def layer_backward(handle: int, x: Tensor, dy: Tensor, loss_grads: Tensor, w_router: Tensor,
                   score_bias: Optional[Tensor], w1: Tensor, b1: Optional[Tensor], w2: Tensor,
                   b2: Optional[Tensor], shared_w1: Optional[Tensor], shared_w2: Optional[Tensor],
                   cache: Tensor, fp8: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor,
                                                                  Tensor, Tensor, Tensor, Tensor]:
    """(dx bf16, then d_w_router, d_w1, d_b1, d_w2, d_b2, d_shared_w1, d_shared_w2: fp32 but d_w1
    and d_w2 bf16), an absent weight's gradient being an empty tensor. GLU gradients come back
    interleaved. loss_grads: the gradient of layer_forward's losses, [2] fp32 on the device.
    cache and fp8: layer_forward's."""
    weights = (w_router, score_bias, w1, b1, w2, b2, shared_w1, shared_w2)
    with torch.cuda.device(x.device):
        grads = _grad_buffers(x, dict(zip(WEIGHT_NAMES, weights)))
        _run_layer_backward(handle, x, dy, weights, cache, fp8, _grads_struct(grads, loss_grads))
    return tuple(grads)


@layer_backward.register_fake
def _(handle, x, dy, loss_grads, w_router, score_bias, w1, b1, w2, b2, shared_w1, shared_w2, cache,
      fp8):
    return tuple(_grad_buffers(x, dict(zip(WEIGHT_NAMES, (
        w_router, score_bias, w1, b1, w2, b2, shared_w1, shared_w2)))))


def _setup_context(ctx, inputs, output):
    handle, x, *weights, fp8 = inputs
    ctx.handle = handle
    # Autograd refuses this backward if w1 or w2 was changed in place since (both are saved), so
    # fp8 still holds their codes when it runs.
    ctx.save_for_backward(x, *weights, output[2], fp8)


def _backward(ctx, dy, d_losses, d_cache):
    x, *weights, cache, fp8 = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(x)
    dx, *d_weights = layer_backward(ctx.handle, x, dy.to(torch.bfloat16).contiguous(),
                                    _loss_grads(d_losses, x), *weights, cache, fp8)
    # d_weights follows WEIGHT_NAMES minus score_bias (a selection-only buffer, no gradient).
    d_by_name = dict(zip([n for n in WEIGHT_NAMES if n != "score_bias"], d_weights))
    out = [None, dx]
    for name, w in zip(WEIGHT_NAMES, weights):
        g = d_by_name.get(name)
        out.append(None if w is None or g is None else g.to(w.dtype))
    return (*out, None)  # fp8: a copy of the weights, whose gradients carry it


torch.library.register_autograd("moefuse::layer_forward", _backward, setup_context=_setup_context)


# ---- Fused weight-gradient accumulation (MoE(fuse_wgrad_accumulation=True), eager) -----------

def main_grads_of(params: dict[str, Optional[Tensor]]) -> list[Tensor]:
    """Each present parameter's `main_grad` (GRAD_NAMES' order, no score_bias), checked: an fp32
    tensor of the parameter's shape, contiguous, on its device. Megatron-style training allocates
    them; the layer adds every micro-batch's weight gradients into them."""
    out = []
    for name, p in params.items():
        if name == "score_bias" or p is None:
            continue
        g = getattr(p, "main_grad", None)
        if g is None:
            raise ValueError(f"moefuse: fuse_wgrad_accumulation needs {name}.main_grad, an fp32 "
                             f"tensor of {name}'s shape, set before the forward")
        _expect_tensor(f"{name}.main_grad", g, tuple(p.shape), torch.float32, p.device)
        out.append(g)
    return out


def _main_grads_struct(dx: Tensor, weights, main_grads: list[Tensor],
                       loss_grads: Tensor) -> _capi.LayerGradsStruct:
    """The C struct of an accumulating backward: dx, then each present weight's main_grad (fp32,
    added to), and the losses' upstream gradient."""
    present = iter(main_grads)
    grads = [dx] + [next(present) if w is not None else None
                    for name, w in zip(WEIGHT_NAMES, weights) if name != "score_bias"]
    s = _capi.LayerGradsStruct(*(_ptr(g) for g in grads))
    s.expert_grads = _capi.ExpertGrads.FP32
    s.loss_grads = loss_grads.data_ptr()
    s.accumulate = 1
    return s


def _main_grad_results(weights) -> list[Optional[Tensor]]:
    """What autograd gets for the weights once their gradients went into main_grad: None, or an
    empty dummy (setting the flag) where the weight has a `grad_added_to_main_grad` attribute."""
    out = []
    for name, w in zip(WEIGHT_NAMES, weights):
        if w is None or name == "score_bias" or not hasattr(w, "grad_added_to_main_grad"):
            out.append(None)
        else:
            w.grad_added_to_main_grad = True
            out.append(torch.empty_like(w))
    return out


class _AccumulatingLayer(torch.autograd.Function):
    """layer_forward, with a backward that adds the weight gradients into the parameters'
    main_grad (the C layer's MoeLayerGrads::accumulate: the wgrads' epilogues do the adds) and
    returns only dx. A parameter whose `grad_added_to_main_grad` attribute exists gets it set and
    an empty dummy gradient, Transformer Engine's convention, so that hooks on its gradient (a
    data-parallel reducer's) still run; the others get None."""

    @staticmethod
    def forward(ctx, handle, x, fp8, main_grads, *weights):
        y, losses, cache = layer_forward(handle, x, *weights, fp8)
        ctx.handle, ctx.main_grads = handle, main_grads
        ctx.save_for_backward(x, cache, fp8, *weights)
        return y, losses

    @staticmethod
    def backward(ctx, dy, d_losses):
        x, cache, fp8, *weights = ctx.saved_tensors
        dy = torch.zeros_like(x) if dy is None else dy.to(torch.bfloat16).contiguous()
        with torch.cuda.device(x.device):
            dx = torch.empty_like(x)
            s = _main_grads_struct(dx, weights, ctx.main_grads, _loss_grads(d_losses, x))
            _run_layer_backward(ctx.handle, x, dy, weights, cache, fp8, s)
        return None, dx, None, None, *_main_grad_results(weights)


# ---- The module --------------------------------------------------------------------------------

class _Handles:
    """The module's C layers, one per CUDA device, destroyed with it. Copies start empty (a C
    layer holds a cuBLAS handle and a stream of its own and cannot be shared)."""

    def __init__(self):
        self.by_device: dict[int, int] = {}

    def __deepcopy__(self, memo):
        return _Handles()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.by_device = {}

    def __del__(self):
        for handle in self.by_device.values():
            _LAYERS.pop(handle, None)
            _capi.layer_destroy(handle)
        if self.by_device:
            _sizes.cache_clear()  # a later layer may get the same handle value
            _fp8_weight_bytes.cache_clear()


class _KeptFp8Weights:
    """The FP8 copy of the weights that MoE.forward(is_first_microbatch=True) made, for the
    micro-batches after it, with what it was made from: each weight's storage and version
    counter (bumped by every in-place write through the tensor: an optimiser step, load_state_dict,
    copy_). Copies of a module start without one, as after .to()."""

    def __init__(self):
        self.region: Optional[Tensor] = None
        self.sources: dict[str, tuple[int, int]] = {}

    def __deepcopy__(self, memo):
        return _KeptFp8Weights()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()

    def keep(self, region: Tensor, weights: dict[str, Tensor]) -> None:
        self.region = region
        self.sources = {name: _source_of(t) for name, t in weights.items()}

    def reuse(self, weights: dict[str, Tensor]) -> Tensor:
        """The kept region, after checking that `weights` are what it was made from."""
        if self.region is None:
            raise RuntimeError("moefuse: is_first_microbatch=False reuses the FP8 weights of an "
                               "earlier forward with is_first_microbatch=True; there was none "
                               "(or the module was moved or copied since)")
        for name, t in weights.items():
            if _source_of(t) != self.sources[name]:
                raise RuntimeError(
                    f"moefuse: is_first_microbatch=False, but {name} was replaced or written in "
                    f"place since the is_first_microbatch=True forward quantised it (an "
                    f"optimiser step?); pass is_first_microbatch=True on the first micro-batch "
                    f"after each step")
        return self.region


def _source_of(t: Tensor) -> tuple[int, int]:
    return t.data_ptr(), t._version


class _Weights(nn.Module):
    """The layer's parameters (and its score_bias buffer) with their layout conversions, for MoE
    and ExpertParallelMoE (moefuse.ep): `specs` from weight_specs."""

    def __init__(self, config: MoeConfig, specs, device):
        super().__init__()
        config.validate()
        self.config = config
        self._create_parameters(specs, device)
        self.reset_parameters()

    def _create_parameters(self, specs, device) -> None:
        for name, spec in specs.items():
            tensor = None if spec is None else torch.empty(spec[0], dtype=spec[1], device=device)
            if name == "score_bias":
                self.register_buffer(name, tensor)
            else:
                self.register_parameter(name, None if tensor is None else nn.Parameter(tensor))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gaussian weights scaled by 1/sqrt(fan_in), zero biases and score bias."""
        for name, t in self._tensors().items():
            if t is None:
                continue
            if t.dtype == torch.float32:
                t.zero_()
            else:
                t.normal_(0.0, t.shape[-1] ** -0.5)

    def _tensors(self) -> dict[str, Optional[Tensor]]:
        return {name: getattr(self, name) for name in WEIGHT_NAMES}

    @torch.no_grad()
    def load_from_gate_up(self, *, w_router: Tensor, w1: Tensor, w2: Tensor,
                          b1: Optional[Tensor] = None, b2: Optional[Tensor] = None,
                          score_bias: Optional[Tensor] = None, shared_w1: Optional[Tensor] = None,
                          shared_w2: Optional[Tensor] = None) -> "MoE":
        """Copies weights given in the usual layout (GLU FC1 rows [gate; up]) into the module,
        interleaving them; any dtype and device, converted on the way."""
        given = dict(w_router=w_router, score_bias=score_bias, w1=w1, b1=b1, w2=w2, b2=b2,
                     shared_w1=shared_w1, shared_w2=shared_w2)
        for name, dst in self._tensors().items():
            src = given[name]
            if (dst is None) != (src is None):
                raise ValueError(f"moefuse: {name} must be "
                                 + ("None" if dst is None else "given") + " for this config")
            if dst is None:
                continue
            src = src.to(device=dst.device, dtype=dst.dtype)
            src = self._glu_layout(name, src, interleave_glu)
            if src.shape != dst.shape:
                raise ValueError(f"moefuse: {name} must have shape {list(dst.shape)}, "
                                 f"got {list(src.shape)}")
            dst.copy_(src)
        return self

    def gate_up_weights(self) -> dict[str, Optional[Tensor]]:
        """The weights in the usual layout (the inverse of load_from_gate_up), detached."""
        return {name: None if t is None else self._glu_layout(name, t.detach(), deinterleave_glu)
                for name, t in self._tensors().items()}

    def gate_up_grads(self) -> dict[str, Optional[Tensor]]:
        """Each parameter's .grad in the usual layout (None where there is none)."""
        return {name: None if t is None or t.grad is None
                else self._glu_layout(name, t.grad, deinterleave_glu)
                for name, t in self._tensors().items() if name != "score_bias"}

    def _glu_layout(self, name: str, t: Tensor, convert) -> Tensor:
        c = self.config
        if not c.is_glu or name not in ("w1", "b1", "shared_w1"):
            return t
        ffn = c.shared_expert_ffn if name == "shared_w1" else c.ffn
        return convert(t, ffn, dim=0 if name == "shared_w1" else 1)

    def _flat_input(self, x: Tensor) -> Tensor:
        """x [..., H] as [T, H], after the checks that need no GPU."""
        if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != self.config.hidden:
            raise ValueError(f"moefuse: x must have shape [..., {self.config.hidden}], got "
                             f"{list(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        if not x.is_contiguous():
            raise ValueError(f"moefuse: x must be contiguous (strides {x.stride()}); "
                             f"call .contiguous() first")
        return x.view(-1, self.config.hidden)


class MoE(_Weights):
    """A Mixture-of-Experts layer running moefuse's fused CUDA layer (Hopper, bf16).

    Parameters, experts stacked along dim 0, in the layer's layout (GLU rows interleaved; use
    load_from_gate_up / gate_up_weights to convert from/to the usual [gate; up] layout):
    w_router [E, H], w1 [E, fc1, H], w2 [E, H, F] bf16; b1 [E, fc1], b2 [E, H] fp32 when
    config.expert_bias; shared_w1 [shared_fc1, H], shared_w2 [H, shared_F] bf16 when
    config.shared_expert_ffn > 0. Buffer score_bias [E] fp32 when config.router_use_score_bias
    (a selection-only bias, updated outside autograd).

    forward(x [..., H] bf16, contiguous, on CUDA, *, is_first_microbatch=None) -> (y shaped as
    x, losses [2] fp32 {aux, z}). With FP8_BLOCKWISE or MXFP8 precision (MXFP8: an emulation,
    the bf16 kernels on quantise-dequantised operands) each forward quantises w1 and w2 (and hands
    the copy to its backward) unless told the weights are unchanged, Transformer Engine's way:
    is_first_microbatch=True quantises and keeps the copy, False reuses the kept one (checked
    against the weights' version counters: an in-place write through the parameters, such as
    an optimiser step, is an error, not a stale copy; one through .data is not seen), None
    quantises without reading or replacing the kept copy. Eager only; no effect with bf16
    precision.

    fuse_wgrad_accumulation=True (eager only, as Transformer Engine's): every parameter needs a
    `main_grad`, an fp32 tensor of its shape (Megatron's data-parallel wrapper makes them); the
    backward adds the micro-batch's weight gradients into them inside the layer's kernels (old +
    new rounded once an element) and leaves .grad alone (None, or an empty dummy where the
    parameter has a `grad_added_to_main_grad` attribute, which it sets). dx and the losses'
    gradient follow autograd as usual.
    """

    def __init__(self, config: MoeConfig, *, mode: LayerMode = LayerMode.FUSED,
                 recompute_pre: bool = False, fuse_wgrad_accumulation: bool = False,
                 device=None):
        super().__init__(config, weight_specs(config), device)
        self.mode = LayerMode(mode)
        self.recompute_pre = bool(recompute_pre)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self._handles = _Handles()
        self._kept_fp8 = _KeptFp8Weights()
        self._ensure_handle()

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self._ensure_handle()
        self._kept_fp8 = _KeptFp8Weights()
        return out

    def _ensure_handle(self) -> None:
        # Created eagerly (at construction and .to/.cuda) so that forward finds it and
        # torch.compile traces no ctypes call; creating one is not capturable.
        if self.w1.device.type == "cuda":
            self._handle(self.w1.device)

    def _handle(self, device: torch.device) -> int:
        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = self._handles.by_device.get(index)
        if handle is None:
            with torch.cuda.device(index):
                handle = _capi.layer_create(self.config.to_c(), self.mode, self.recompute_pre)
            _LAYERS[handle] = _LayerInfo(self.config, self.mode, self.recompute_pre)
            self._handles.by_device[index] = handle
        return handle

    def forward(self, x: Tensor, *,
                is_first_microbatch: Optional[bool] = None) -> tuple[Tensor, Tensor]:
        flat = self._flat_input(x)
        weights = self._tensors()
        validate_inputs(self.config, flat, weights)
        handle = self._handle(flat.device)
        fp8 = self._fp8_weights(handle, weights, is_first_microbatch)
        ordered = (weights[n] for n in WEIGHT_NAMES)
        if self.fuse_wgrad_accumulation:
            if torch.compiler.is_compiling():
                raise RuntimeError("moefuse: fuse_wgrad_accumulation is for eager mode "
                                   "(torch.compile does not see main_grad)")
            main = main_grads_of(weights)
            y, losses = _AccumulatingLayer.apply(handle, flat, fp8, main, *ordered)
        else:
            y, losses, _ = layer_forward(handle, flat, *ordered, fp8)
        return y.view(x.shape), losses

    def _fp8_weights(self, handle: int, weights: dict[str, Optional[Tensor]],
                     is_first_microbatch: Optional[bool]) -> Optional[Tensor]:
        """This forward's quantised weight region (None with bf16 precision)."""
        if is_first_microbatch is not None and torch.compiler.is_compiling():
            raise RuntimeError("moefuse: is_first_microbatch is for eager mode (torch.compile "
                               "does not see the weights' version counters); leave it None")
        if self.config.precision == _capi.Precision.BF16:
            return None
        # The weights the region is made from: FP8_BLOCKWISE quantises the shared expert's too.
        names = ("w1", "w2")
        if self.config.precision == _capi.Precision.FP8_BLOCKWISE:
            names += tuple(n for n in ("shared_w1", "shared_w2") if weights[n] is not None)
        sources = {name: weights[name] for name in names}
        if is_first_microbatch is False:
            return self._kept_fp8.reuse(sources)
        if is_first_microbatch:
            self._kept_fp8 = _KeptFp8Weights()  # release the old copy before making the new one
        region = prepare_fp8_weights(handle, weights["w1"], weights["w2"], weights["shared_w1"],
                                     weights["shared_w2"])
        if is_first_microbatch:
            self._kept_fp8.keep(region, sources)
        return region

    def extra_repr(self) -> str:
        return (f"{self.config}, mode={self.mode.name}, recompute_pre={self.recompute_pre}"
                + (", fuse_wgrad_accumulation=True" if self.fuse_wgrad_accumulation else ""))

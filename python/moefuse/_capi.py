"""ctypes binding of the C ABI in include/moefuse/moefuse.h (libmoefuse_c.so). No torch here.

The library is not built by pip: run scripts/build.sh, which leaves build/release/libmoefuse_c.so.
It is looked up, in this order, at $MOEFUSE_LIBRARY, next to this file (a copy placed in the
installed package), and in build/release of the source tree this file sits in.
"""

from __future__ import annotations

import ctypes
import enum
import os
import pathlib
import threading

LIBRARY_NAME = "libmoefuse_c.so"


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    CUDA_ERROR = 2
    NOT_SUPPORTED = 3
    INTERNAL_ERROR = 4


class Activation(enum.IntEnum):
    SWIGLU = 0
    GEGLU = 1
    REGLU = 2
    SQUARED_RELU = 3
    CLAMPED_SWIGLU = 4


class RouterKind(enum.IntEnum):
    SOFTMAX_TOPK = 0
    SIGMOID_GROUP_TOPK = 1


class Precision(enum.IntEnum):
    BF16 = 0
    FP8_BLOCKWISE = 1
    MXFP8 = 2


class LayerMode(enum.IntEnum):
    FUSED = 0
    UNFUSED = 1


class ExpertGrads(enum.IntEnum):
    """moefuse_expert_grads_t: the dtype of d_w1 and d_w2."""
    FP32 = 0
    BF16 = 1


class MoefuseError(RuntimeError):
    """A failed moefuse call: .status is the Status, the message is moefuse_last_error()."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status


class MoefuseInvalidArgument(MoefuseError, ValueError):
    """MOEFUSE_STATUS_INVALID_ARGUMENT; the message names the bad argument, e.g. 'config.hidden'."""


# C enums are ints on every ABI moefuse targets (x86-64/aarch64 Linux).
_enum = ctypes.c_int


class ConfigStruct(ctypes.Structure):
    """moefuse_config_t, field for field."""

    _fields_ = [
        ("hidden", ctypes.c_int64),
        ("ffn", ctypes.c_int64),
        ("num_experts", ctypes.c_int64),
        ("top_k", ctypes.c_int64),
        ("activation", _enum),
        ("clamped_swiglu_alpha", ctypes.c_float),
        ("clamped_swiglu_limit", ctypes.c_float),
        ("expert_bias", ctypes.c_int32),
        ("shared_expert_ffn", ctypes.c_int64),
        ("router_kind", _enum),
        ("router_renormalize", ctypes.c_int32),
        ("routed_scaling_factor", ctypes.c_float),
        ("router_num_groups", ctypes.c_int32),
        ("router_topk_groups", ctypes.c_int32),
        ("router_use_score_bias", ctypes.c_int32),
        ("aux_loss_coeff", ctypes.c_float),
        ("z_loss_coeff", ctypes.c_float),
        ("precision", _enum),
        ("bf16_wgrad", ctypes.c_int32),
    ]


class LayerWeightsStruct(ctypes.Structure):
    """moefuse_layer_weights_t: device pointers (None for an absent tensor), then the FP8 weight
    region (pointer and bytes; low-precision recipes only)."""

    _fields_ = [
        (name, ctypes.c_void_p)
        for name in ("w_router", "score_bias", "w1", "b1", "w2", "b2", "shared_w1", "shared_w2",
                     "fp8_weights")
    ] + [("fp8_weights_bytes", ctypes.c_size_t)]


class LayerGradsStruct(ctypes.Structure):
    """moefuse_layer_grads_t: device pointers (None for an absent tensor), then the dtype of
    d_w1 and d_w2 (ExpertGrads; 0, fp32, unless set), then the losses' upstream gradient (an
    input: [2] fp32 on the device, None for 1 and 1), then whether backward adds to the weight
    gradients (fp32 main grads) instead of overwriting them."""

    _fields_ = [
        (name, ctypes.c_void_p)
        for name in ("dx", "d_w_router", "d_w1", "d_b1", "d_w2", "d_b2", "d_shared_w1",
                     "d_shared_w2")
    ] + [("expert_grads", _enum), ("loss_grads", ctypes.c_void_p), ("accumulate", ctypes.c_int32)]


class EpOptionsStruct(ctypes.Structure):
    """moefuse_ep_options_t (moefuse_ep.h; its functions are in libmoefuse_ep_c, _capi_ep)."""

    _fields_ = [("max_tokens_per_rank", ctypes.c_int64),
                ("receive_capacity_rows", ctypes.c_int64),
                ("chunks", ctypes.c_int32),
                ("transfer_sms", ctypes.c_int32),
                ("fp8_dispatch", ctypes.c_int32)]


STRUCTS = {
    "moefuse_config_t": ConfigStruct,
    "moefuse_layer_weights_t": LayerWeightsStruct,
    "moefuse_layer_grads_t": LayerGradsStruct,
    "moefuse_ep_options_t": EpOptionsStruct,
}

_size_p = ctypes.POINTER(ctypes.c_size_t)
_config_p = ctypes.POINTER(ConfigStruct)
_layer_p = ctypes.c_void_p  # moefuse_layer_t*, opaque

# The arguments of a layer's forward and backward after the layer handle: the same in
# moefuse_layer_* and moefuse_ep_layer_* (one C body serves both, src/core/c_api_views.cpp).
FORWARD_ARGS = [ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(LayerWeightsStruct),
                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
BACKWARD_ARGS = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                 ctypes.POINTER(LayerWeightsStruct), ctypes.POINTER(LayerGradsStruct),
                 ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                 ctypes.c_void_p]

# name: (restype, argtypes). Every call but the two string getters returns a moefuse_status_t.
_PROTOTYPES = {
    "moefuse_last_error": (ctypes.c_char_p, []),
    "moefuse_version": (ctypes.c_char_p, []),
    "moefuse_build_commit": (ctypes.c_char_p, []),
    "moefuse_config_preset": (_enum, [ctypes.c_char_p, _config_p]),
    "moefuse_config_validate": (_enum, [_config_p]),
    "moefuse_abi_layout": (_enum, [ctypes.c_char_p, ctypes.c_char_p, _size_p]),
    "moefuse_layer_sizes": (_enum, [_config_p, _enum, ctypes.c_int32, ctypes.c_int64, _size_p,
                                    _size_p]),
    "moefuse_layer_fp8_weight_bytes": (_enum, [_config_p, _size_p]),
    "moefuse_layer_prepare_fp8_weights": (_enum, [_layer_p, ctypes.POINTER(LayerWeightsStruct),
                                                  ctypes.c_void_p]),
    "moefuse_layer_create": (_enum, [_config_p, _enum, ctypes.c_int32,
                                     ctypes.POINTER(_layer_p)]),
    "moefuse_layer_destroy": (_enum, [_layer_p]),
    "moefuse_layer_forward": (_enum, [_layer_p, *FORWARD_ARGS]),
    "moefuse_layer_backward": (_enum, [_layer_p, *BACKWARD_ARGS]),
}


class Library:
    """A moefuse shared library loaded on first use, every prototype declared: looked up at
    $<env_var>, next to this file (a copy placed in the installed package), then in
    build/release of the source tree this file sits in."""

    def __init__(self, name: str, env_var: str, prototypes: dict, how_to_build: str):
        self.name, self.env_var, self.prototypes = name, env_var, prototypes
        self.how_to_build = how_to_build
        self._lock = threading.Lock()
        self._handle: ctypes.CDLL | None = None

    def candidates(self) -> list[pathlib.Path]:
        """Where the library is looked for, in order."""
        env = os.environ.get(self.env_var)
        if env:
            return [pathlib.Path(env)]
        here = pathlib.Path(__file__).resolve().parent
        return [here / self.name, here.parent.parent / "build" / "release" / self.name]

    def __call__(self) -> ctypes.CDLL:
        with self._lock:
            if self._handle is None:
                candidates = self.candidates()
                found = next((p for p in candidates if p.is_file()), None)
                if found is None:
                    raise OSError(
                        f"moefuse: {self.name} not found (looked at "
                        + ", ".join(str(p) for p in candidates)
                        + f"); {self.how_to_build} or set {self.env_var} to its path")
                handle = ctypes.CDLL(str(found))
                for name, (restype, argtypes) in self.prototypes.items():
                    fn = getattr(handle, name)
                    fn.restype, fn.argtypes = restype, argtypes
                self._handle = handle
        return self._handle


lib = Library(LIBRARY_NAME, "MOEFUSE_LIBRARY", _PROTOTYPES, "build it with scripts/build.sh")


def check(status: int, library: ctypes.CDLL | None = None) -> None:
    """Raises the exception of a failed status (the calling thread's moefuse_last_error of
    `library`, by default libmoefuse_c; each moefuse library keeps its own)."""
    if status == Status.OK:
        return
    message = (library or lib()).moefuse_last_error().decode(errors="replace")
    status = Status(status)
    cls = MoefuseInvalidArgument if status == Status.INVALID_ARGUMENT else MoefuseError
    raise cls(status, message)


def version() -> str:
    return lib().moefuse_version().decode()


def build_commit() -> str:
    """The git commit libmoefuse_c was built from (see moefuse_build_commit in moefuse.h)."""
    return lib().moefuse_build_commit().decode()


def config_preset(name: str) -> ConfigStruct:
    c = ConfigStruct()
    check(lib().moefuse_config_preset(name.encode(), ctypes.byref(c)))
    return c


def config_validate(config: ConfigStruct) -> None:
    check(lib().moefuse_config_validate(ctypes.byref(config)))


def abi_layout(type_name: str, field: str | None = None) -> int:
    """sizeof(type_name) when field is None, else offsetof(type_name, field), from the C side."""
    out = ctypes.c_size_t()
    check(lib().moefuse_abi_layout(type_name.encode(), field.encode() if field else None,
                                   ctypes.byref(out)))
    return out.value


def layer_sizes(config: ConfigStruct, mode: LayerMode, recompute_pre: bool,
                tokens: int) -> tuple[int, int]:
    """(cache_bytes, workspace_bytes) of the layer for `tokens` tokens. No GPU needed."""
    cache, workspace = ctypes.c_size_t(), ctypes.c_size_t()
    check(lib().moefuse_layer_sizes(ctypes.byref(config), int(mode), int(bool(recompute_pre)),
                                    tokens, ctypes.byref(cache), ctypes.byref(workspace)))
    return cache.value, workspace.value


def layer_fp8_weight_bytes(config: ConfigStruct) -> int:
    """Bytes of the FP8 weight region (LayerWeightsStruct.fp8_weights); 0 for bf16. No GPU."""
    out = ctypes.c_size_t()
    check(lib().moefuse_layer_fp8_weight_bytes(ctypes.byref(config), ctypes.byref(out)))
    return out.value


def layer_prepare_fp8_weights(handle: int, weights: LayerWeightsStruct, stream: int) -> None:
    """FP8 or MXFP8 precision: enqueues the quantisation of w1, w2 into weights.fp8_weights on
    `stream`."""
    check(lib().moefuse_layer_prepare_fp8_weights(handle, ctypes.byref(weights), stream))


def layer_create(config: ConfigStruct, mode: LayerMode, recompute_pre: bool) -> int:
    """A moefuse_layer_t* as an int (on the current CUDA device). Not capturable."""
    handle = _layer_p()
    check(lib().moefuse_layer_create(ctypes.byref(config), int(mode), int(bool(recompute_pre)),
                                     ctypes.byref(handle)))
    return handle.value


def layer_destroy(handle: int) -> None:
    check(lib().moefuse_layer_destroy(handle))


def layer_forward(handle: int, tokens: int, x: int, weights: LayerWeightsStruct, y: int,
                  losses: int, cache: int, cache_bytes: int, workspace: int,
                  workspace_bytes: int, stream: int) -> None:
    """Enqueues forward on `stream` (a cudaStream_t as int). Every tensor is a device pointer."""
    check(lib().moefuse_layer_forward(handle, tokens, x, ctypes.byref(weights), y, losses, cache,
                                      cache_bytes, workspace, workspace_bytes, stream))


def layer_backward(handle: int, tokens: int, x: int, dy: int, weights: LayerWeightsStruct,
                   grads: LayerGradsStruct, cache: int, cache_bytes: int, workspace: int,
                   workspace_bytes: int, stream: int) -> None:
    """Enqueues backward on `stream`; overwrites every gradient in `grads`."""
    check(lib().moefuse_layer_backward(handle, tokens, x, dy, ctypes.byref(weights),
                                       ctypes.byref(grads), cache, cache_bytes, workspace,
                                       workspace_bytes, stream))

"""ctypes binding of the expert-parallel C ABI in include/moefuse/moefuse_ep.h
(libmoefuse_ep_c.so, built when configure finds NCCL). No torch here.

Looked up, in this order, at $MOEFUSE_EP_LIBRARY, next to this file, and in build/release of the
source tree. The libnccl it loads must be the release it was built against (moefuse_ep.h): with
torch imported first, that is torch's (the process already has it loaded).
"""

from __future__ import annotations

import ctypes

from moefuse._capi import (BACKWARD_ARGS, FORWARD_ARGS, ConfigStruct, EpOptionsStruct,
                           LayerGradsStruct, LayerWeightsStruct, Library, _enum, check)

LIBRARY_NAME = "libmoefuse_ep_c.so"
UNIQUE_ID_BYTES = 128

_size_p = ctypes.POINTER(ctypes.c_size_t)
_i64_p = ctypes.POINTER(ctypes.c_int64)
_layer_p = ctypes.c_void_p  # moefuse_ep_layer_t*, opaque
_id_t = ctypes.c_uint8 * UNIQUE_ID_BYTES

_PROTOTYPES = {
    "moefuse_last_error": (ctypes.c_char_p, []),
    "moefuse_ep_unique_id": (_enum, [_id_t]),
    "moefuse_ep_layer_create": (_enum, [ctypes.POINTER(ConfigStruct), _id_t, ctypes.c_int32,
                                        ctypes.c_int32, ctypes.POINTER(EpOptionsStruct),
                                        ctypes.POINTER(_layer_p)]),
    "moefuse_ep_layer_destroy": (_enum, [_layer_p]),
    "moefuse_ep_layer_info": (_enum, [_layer_p, _i64_p, _i64_p, _size_p, _size_p]),
    "moefuse_ep_layer_forward": (_enum, [_layer_p, *FORWARD_ARGS]),
    "moefuse_ep_layer_backward": (_enum, [_layer_p, *BACKWARD_ARGS]),
}


lib = Library(LIBRARY_NAME, "MOEFUSE_EP_LIBRARY", _PROTOTYPES,
              "it is built by scripts/build.sh when NCCL is found")


def _check(status: int) -> None:
    check(status, lib())


def unique_id() -> bytes:
    out = _id_t()
    _check(lib().moefuse_ep_unique_id(out))
    return bytes(out)


def layer_create(config: ConfigStruct, uid: bytes, ranks: int, rank: int,
                 options: EpOptionsStruct) -> int:
    """Collective: a moefuse_ep_layer_t* as an int, on the current CUDA device."""
    if len(uid) != UNIQUE_ID_BYTES:
        raise ValueError(f"moefuse: the unique id must be {UNIQUE_ID_BYTES} bytes, "
                         f"got {len(uid)}")
    handle = _layer_p()
    _check(lib().moefuse_ep_layer_create(ctypes.byref(config), _id_t(*uid), ranks, rank,
                                         ctypes.byref(options), ctypes.byref(handle)))
    return handle.value


def layer_destroy(handle: int) -> None:
    _check(lib().moefuse_ep_layer_destroy(handle))


def layer_info(handle: int) -> tuple[int, int, int, int]:
    """(first_expert, local_experts, cache_bytes, workspace_bytes)."""
    first, local = ctypes.c_int64(), ctypes.c_int64()
    cache, workspace = ctypes.c_size_t(), ctypes.c_size_t()
    _check(lib().moefuse_ep_layer_info(handle, ctypes.byref(first), ctypes.byref(local),
                                       ctypes.byref(cache), ctypes.byref(workspace)))
    return first.value, local.value, cache.value, workspace.value


def layer_forward(handle: int, tokens: int, x: int, weights: LayerWeightsStruct, y: int,
                  losses: int, cache: int, cache_bytes: int, workspace: int,
                  workspace_bytes: int, stream: int) -> None:
    _check(lib().moefuse_ep_layer_forward(handle, tokens, x, ctypes.byref(weights), y, losses,
                                          cache, cache_bytes, workspace, workspace_bytes,
                                          stream))


def layer_backward(handle: int, tokens: int, x: int, dy: int, weights: LayerWeightsStruct,
                   grads: LayerGradsStruct, cache: int, cache_bytes: int, workspace: int,
                   workspace_bytes: int, stream: int) -> None:
    _check(lib().moefuse_ep_layer_backward(handle, tokens, x, dy, ctypes.byref(weights),
                                           ctypes.byref(grads), cache, cache_bytes, workspace,
                                           workspace_bytes, stream))

"""MoeConfig: the Python face of moefuse_config_t (include/moefuse/config.h explains each field)."""

from __future__ import annotations

import ctypes
import dataclasses

from moefuse import _capi
from moefuse._capi import Activation, LayerMode, Precision, RouterKind

PRESETS = ("qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3")

# Python field -> C field, where the names differ; the flags are bool here, int32 in C.
_BOOL_FIELDS = ("expert_bias", "router_renormalize", "router_use_score_bias", "bf16_wgrad")
_ENUM_FIELDS = {"activation": Activation, "router_kind": RouterKind, "precision": Precision}


@dataclasses.dataclass
class MoeConfig:
    """One MoE layer's shapes, activation, router and precision; fields as in moefuse_config_t."""

    hidden: int = 0
    ffn: int = 0
    num_experts: int = 0
    top_k: int = 0
    activation: Activation = Activation.SWIGLU
    clamped_swiglu_alpha: float = 1.702
    clamped_swiglu_limit: float = 7.0
    expert_bias: bool = False
    shared_expert_ffn: int = 0
    router_kind: RouterKind = RouterKind.SOFTMAX_TOPK
    router_renormalize: bool = True
    routed_scaling_factor: float = 1.0
    router_num_groups: int = 1
    router_topk_groups: int = 1
    router_use_score_bias: bool = False
    aux_loss_coeff: float = 0.0
    z_loss_coeff: float = 0.0
    precision: Precision = Precision.BF16
    bf16_wgrad: bool = False

    def __post_init__(self):
        # Hold the float fields as the C struct's fp32 values, so a config equals its round trip.
        for f in dataclasses.fields(self):
            if f.type == "float":
                setattr(self, f.name, ctypes.c_float(getattr(self, f.name)).value)

    @classmethod
    def preset(cls, name: str, **overrides) -> "MoeConfig":
        """A named preset (PRESETS) from the C library, with any field replaced by `overrides`."""
        return dataclasses.replace(cls.from_c(_capi.config_preset(name)), **overrides)

    @classmethod
    def from_c(cls, c: _capi.ConfigStruct) -> "MoeConfig":
        values = {}
        for f in dataclasses.fields(cls):
            v = getattr(c, f.name)
            if f.name in _BOOL_FIELDS:
                v = bool(v)
            elif f.name in _ENUM_FIELDS:
                v = _ENUM_FIELDS[f.name](v)
            values[f.name] = v
        return cls(**values)

    def to_c(self) -> _capi.ConfigStruct:
        c = _capi.ConfigStruct()
        for f in dataclasses.fields(self):
            setattr(c, f.name, int(getattr(self, f.name)) if f.name in _BOOL_FIELDS
                    or f.name in _ENUM_FIELDS else getattr(self, f.name))
        return c

    def validate(self) -> None:
        """Raises MoefuseInvalidArgument (a ValueError) naming the first bad field."""
        _capi.config_validate(self.to_c())

    @property
    def is_glu(self) -> bool:
        return self.activation != Activation.SQUARED_RELU

    @property
    def fc1_width(self) -> int:
        """Rows of an expert's FC1 weight: 2F for the GLU activations, F otherwise."""
        return 2 * self.ffn if self.is_glu else self.ffn

    @property
    def shared_fc1_width(self) -> int:
        return 2 * self.shared_expert_ffn if self.is_glu else self.shared_expert_ffn

    def layer_sizes(self, tokens: int, mode: LayerMode = LayerMode.FUSED,
                    recompute_pre: bool = False) -> tuple[int, int]:
        """(cache_bytes, workspace_bytes) of the GPU layer for `tokens` tokens (no GPU needed)."""
        return _capi.layer_sizes(self.to_c(), mode, recompute_pre, tokens)

    def fp8_weight_bytes(self) -> int:
        """Bytes of the GPU layer's quantised weight copy (0 with bf16 precision)."""
        return _capi.layer_fp8_weight_bytes(self.to_c())

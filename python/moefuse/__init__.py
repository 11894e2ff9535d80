"""moefuse: fused Mixture-of-Experts layers for Hopper GPUs, over the C library libmoefuse_c.so.

Importing the package needs neither torch nor the library; `moefuse.MoE` (torch) and the config
helpers load libmoefuse_c.so on first use (see moefuse._capi for where it is looked for).
"""

from moefuse._capi import (Activation, LayerMode, MoefuseError, MoefuseInvalidArgument,
                           Precision, RouterKind, Status, build_commit, version)
from moefuse.config import PRESETS, MoeConfig

__all__ = [
    "Activation", "LayerMode", "MoE", "MoeConfig", "MoefuseError", "MoefuseInvalidArgument",
    "PRESETS", "Precision", "RouterKind", "Status", "build_commit", "version",
]


def __getattr__(name):
    # torch is imported only when the torch-facing part is asked for.
    if name in ("MoE", "moe_layer"):
        from moefuse import layer
        return getattr(layer, name)
    raise AttributeError(f"module 'moefuse' has no attribute {name!r}")

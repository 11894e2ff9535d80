"""MoeConfig <-> moefuse_config_t, presets, validation and layer sizes, on the CPU."""

import dataclasses
import random

import pytest

import moefuse
from moefuse import Activation, LayerMode, MoeConfig, Precision, RouterKind


@pytest.mark.parametrize("name", moefuse.PRESETS)
def test_preset_round_trips_through_the_c_struct(name):
    config = MoeConfig.preset(name)
    config.validate()
    assert MoeConfig.from_c(config.to_c()) == config


def test_presets_carry_their_model_shapes():
    q = MoeConfig.preset("qwen3-30b-a3b")
    assert (q.hidden, q.ffn, q.num_experts, q.top_k) == (2048, 768, 128, 8)
    g = MoeConfig.preset("gpt-oss-120b")
    assert g.activation == Activation.CLAMPED_SWIGLU and g.expert_bias
    d = MoeConfig.preset("deepseek-v3")
    assert d.router_kind == RouterKind.SIGMOID_GROUP_TOPK and d.router_use_score_bias
    assert (d.router_num_groups, d.router_topk_groups, d.shared_expert_ffn) == (8, 4, 2048)
    assert MoeConfig.preset("mixtral-8x7b").fc1_width == 2 * 14336


def test_preset_overrides():
    c = MoeConfig.preset("qwen3-30b-a3b", hidden=256, aux_loss_coeff=0.01)
    assert c.hidden == 256 and c.ffn == 768
    assert c.aux_loss_coeff == pytest.approx(0.01)


def test_random_configs_round_trip():
    rng = random.Random()
    for _ in range(50):
        c = MoeConfig(hidden=rng.randint(1, 1 << 20), ffn=rng.randint(1, 1 << 20),
                      num_experts=rng.randint(1, 512), top_k=rng.randint(1, 16),
                      activation=rng.choice(list(Activation)),
                      expert_bias=rng.random() < 0.5, shared_expert_ffn=rng.randint(0, 4096),
                      router_kind=rng.choice(list(RouterKind)),
                      router_renormalize=rng.random() < 0.5,
                      router_num_groups=rng.randint(1, 8), router_topk_groups=rng.randint(1, 8),
                      router_use_score_bias=rng.random() < 0.5,
                      routed_scaling_factor=rng.choice([0.5, 1.0, 2.5]),
                      aux_loss_coeff=rng.choice([0.0, 0.25]), z_loss_coeff=rng.choice([0.0, 0.5]),
                      precision=rng.choice(list(Precision)), bf16_wgrad=rng.random() < 0.5)
        assert MoeConfig.from_c(c.to_c()) == c


@pytest.mark.parametrize("field, value, named", [
    ("hidden", 0, "config.hidden"),
    ("ffn", -1, "config.ffn"),
    ("num_experts", 0, "config.num_experts"),
    ("top_k", 129, "config.top_k"),
    ("shared_expert_ffn", -8, "config.shared_expert_ffn"),
    ("aux_loss_coeff", -1.0, "config.router.aux_loss_coeff"),
    ("z_loss_coeff", float("nan"), "config.router.z_loss_coeff"),
    ("router_use_score_bias", True, "config.router.use_score_bias"),
    ("activation", 9, "config.activation"),
    ("router_kind", 5, "config.router_kind"),
    ("precision", 3, "config.precision"),
    ("bf16_wgrad", True, "config.bf16_wgrad"),
])
def test_validation_names_the_field(field, value, named):
    c = dataclasses.replace(MoeConfig.preset("qwen3-30b-a3b"), **{field: value})
    with pytest.raises(moefuse.MoefuseInvalidArgument, match=f"'{named}'") as info:
        c.validate()
    assert info.value.status == moefuse.Status.INVALID_ARGUMENT


def test_sigmoid_router_groups_must_divide_the_experts():
    c = MoeConfig.preset("deepseek-v3", router_num_groups=7)
    with pytest.raises(ValueError, match="'config.router.num_groups'.*divisor"):
        c.validate()


def _align(n):
    return (n + 255) // 256 * 256


def expected_cache_bytes(c: MoeConfig, tokens: int, recompute_pre: bool) -> int:
    """The cache of docs/layer.md, computed here: routing metadata (+ FC1's pre-activation)."""
    T, E, R = tokens, c.num_experts, tokens * c.top_k
    parts = [T * E * 4, R * 4, R * 4, E * 4, (E + 1) * 4, R * 4, R * 4, R * 4]
    if c.shared_expert_ffn:
        parts.append(2 * 4)
    if not recompute_pre:
        parts.append(R * c.fc1_width * 2)
        if c.shared_expert_ffn:
            parts.append(T * c.shared_fc1_width * 2)
    return sum(_align(p) for p in parts)


@pytest.mark.parametrize("name", moefuse.PRESETS)
@pytest.mark.parametrize("mode", list(LayerMode))
@pytest.mark.parametrize("recompute_pre", [False, True])
def test_cache_size_is_the_documented_plan(name, mode, recompute_pre):
    c = MoeConfig.preset(name)
    tokens = random.randint(1, 5000)
    cache, workspace = c.layer_sizes(tokens, mode, recompute_pre)
    assert cache == expected_cache_bytes(c, tokens, recompute_pre)
    assert workspace > 0 and workspace % 256 == 0


# docs/layer.md's table at T = 16384, MiB: (cache, cache with recompute, workspace fused, unfused).
DOCUMENTED_MIB = {
    "qwen3-30b-a3b": (394.5, 10.5, 2160, 2350),
    "gpt-oss-120b": (729.3, 9.3, 2221, 2574),
    "mixtral-8x7b": (1793.1, 1.1, 3498, 4385),
    "deepseek-v3": (643.3, 3.3, 3911, 4228),
}


@pytest.mark.parametrize("name", moefuse.PRESETS)
def test_sizes_match_the_documented_table(name):
    c, mib = MoeConfig.preset(name), 1 << 20
    cache, ws_fused = c.layer_sizes(16384, LayerMode.FUSED, False)
    recompute_cache, _ = c.layer_sizes(16384, LayerMode.FUSED, True)
    _, ws_unfused = c.layer_sizes(16384, LayerMode.UNFUSED, False)
    want = DOCUMENTED_MIB[name]
    assert round(cache / mib, 1) == want[0]
    assert round(recompute_cache / mib, 1) == want[1]
    assert (round(ws_fused / mib), round(ws_unfused / mib)) == want[2:]


def test_layer_sizes_name_bad_tokens_and_config():
    with pytest.raises(ValueError, match="'tokens'"):
        MoeConfig.preset("qwen3-30b-a3b").layer_sizes(0)
    with pytest.raises(ValueError, match="'config.hidden'"):
        MoeConfig.preset("qwen3-30b-a3b", hidden=0).layer_sizes(16)

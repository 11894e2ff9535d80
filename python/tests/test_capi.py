"""The ctypes binding against the C library, on the CPU: struct layouts, errors, discovery."""

import ctypes
import re
import subprocess
import sys

import pytest

from moefuse import _capi


@pytest.mark.parametrize("type_name", sorted(_capi.STRUCTS))
def test_struct_layout_matches_the_c_header(type_name):
    struct = _capi.STRUCTS[type_name]
    assert ctypes.sizeof(struct) == _capi.abi_layout(type_name), type_name
    for field, _ in struct._fields_:
        assert getattr(struct, field).offset == _capi.abi_layout(type_name, field), field


def test_abi_layout_names_an_unknown_field():
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'field'.*'nope'"):
        _capi.abi_layout("moefuse_config_t", "nope")
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'type'"):
        _capi.abi_layout("moefuse_nothing_t")


def test_version_is_the_package_version():
    import moefuse
    assert moefuse.version() == "0.1.0"


def test_build_commit_names_a_commit():
    import moefuse
    commit = moefuse.build_commit()
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|unknown", commit), commit


def test_invalid_argument_is_a_value_error_with_status_and_message():
    with pytest.raises(ValueError) as info:
        _capi.config_preset("no-such-model")
    err = info.value
    assert isinstance(err, _capi.MoefuseError)
    assert err.status == _capi.Status.INVALID_ARGUMENT
    assert "'preset'" in str(err) and "qwen3-30b-a3b" in str(err)


def test_bad_layer_mode_is_named():
    c = _capi.config_preset("qwen3-30b-a3b")
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'mode'"):
        _capi.layer_sizes(c, 7, False, 16)


def test_layer_calls_without_a_layer_are_named():
    w, g = _capi.LayerWeightsStruct(), _capi.LayerGradsStruct()
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'layer'"):
        _capi.layer_forward(None, 16, None, w, None, None, None, 0, None, 0, None)
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'layer'"):
        _capi.layer_backward(None, 16, None, None, w, g, None, 0, None, 0, None)
    _capi.layer_destroy(None)  # like free(NULL)


def test_weights_struct_ends_with_the_fp8_region():
    names = [name for name, _ in _capi.LayerWeightsStruct._fields_]
    assert names[-2:] == ["fp8_weights", "fp8_weights_bytes"]


def test_weight_copy_bytes_only_for_low_precision():
    c = _capi.config_preset("qwen3-30b-a3b")
    assert _capi.layer_fp8_weight_bytes(c) == 0
    c.precision = _capi.Precision.FP8_BLOCKWISE
    E, H, F = c.num_experts, c.hidden, c.ffn
    # e4m3 w1 [E, 2F, H] and w2 [E, H, F] plus their 128x128-block scales, 256-byte aligned
    assert _capi.layer_fp8_weight_bytes(c) >= 3 * E * H * F
    c.precision = _capi.Precision.MXFP8
    # two bf16 copies each of w1 and w2 (qwen3's are whole multiples of 256 bytes)
    assert _capi.layer_fp8_weight_bytes(c) == 2 * 2 * (2 * E * F * H + E * H * F)


def test_fp8_rejects_unfused_and_takes_expert_bias():
    c = _capi.config_preset("qwen3-30b-a3b")
    c.precision = _capi.Precision.FP8_BLOCKWISE
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'options.mode'"):
        _capi.layer_sizes(c, _capi.LayerMode.UNFUSED, False, 16)
    c.expert_bias = 1  # the FP8 epilogues add the bias (GPT-OSS)
    cache, workspace = _capi.layer_sizes(c, _capi.LayerMode.FUSED, False, 16)
    assert cache > 0 and workspace > 0


def test_prepare_fp8_weights_without_a_layer_is_named():
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'layer'"):
        _capi.layer_prepare_fp8_weights(None, _capi.LayerWeightsStruct(), None)


def test_mxfp8_needs_whole_32_element_blocks():
    c = _capi.config_preset("qwen3-30b-a3b")
    c.precision = _capi.Precision.MXFP8
    c.hidden = 2064  # a multiple of 16, not of 32
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'config.hidden'"):
        _capi.layer_create(c, _capi.LayerMode.FUSED, False)


def test_missing_library_says_where_it_looked(tmp_path):
    missing = tmp_path / "libmoefuse_c.so"
    code = "import moefuse; moefuse.MoeConfig.preset('qwen3-30b-a3b')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"MOEFUSE_LIBRARY": str(missing), "PYTHONPATH": ":".join(sys.path)})
    assert result.returncode != 0
    assert str(missing) in result.stderr and "scripts/build.sh" in result.stderr


def _ep_binding():
    """moefuse._capi_ep with its library loaded, or a skip when it was not built (no NCCL)."""
    from moefuse import _capi_ep
    try:
        _capi_ep.lib()
    except OSError as e:
        pytest.skip(str(e))
    return _capi_ep


def test_ep_binding_names_a_bad_argument_before_any_gpu_work():
    ep = _ep_binding()
    config = _capi.config_preset("qwen3-30b-a3b")
    options = _capi.EpOptionsStruct(max_tokens_per_rank=64, chunks=1, transfer_sms=16)
    uid = bytes(ep.UNIQUE_ID_BYTES)
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'ranks'"):
        ep.layer_create(config, uid, 0, 0, options)
    with pytest.raises(_capi.MoefuseInvalidArgument, match="'rank'"):
        ep.layer_create(config, uid, 2, 5, options)
    config.hidden = 0
    with pytest.raises(_capi.MoefuseInvalidArgument, match="hidden"):
        ep.layer_create(config, uid, 2, 0, options)
    with pytest.raises(ValueError, match="128 bytes"):
        ep.layer_create(config, b"short", 2, 0, options)

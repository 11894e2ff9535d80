"""moefuse.MoE under PyTorch. Skipped without torch; the GPU tests also need an sm_90 GPU.

GPU tests compare the layer with moefuse/reference.py on every preset's kind of layer scaled
down (H 256, F 128, E <= 16, k <= 4, aux and z losses on) and the other activations, fused and
unfused. As in the C++ tests (tests/gpu/layer_test_fixture.h), x and w_router sit on dyadic grids
so both sides compute the same logits exactly and choose the same experts."""

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from moefuse import (PRESETS, Activation, LayerMode, MoE, MoeConfig, Precision,  # noqa: E402
                     RouterKind)
from moefuse.layer import (_KeptFp8Weights, deinterleave_glu, interleave_glu,  # noqa: E402
                           main_grads_of, prepare_fp8_weights)
from moefuse.reference import moe_forward  # noqa: E402


def _no_hopper_reason():
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"needs an sm_90 (Hopper) GPU, found sm_{major}{minor}"
    return None


needs_hopper = pytest.mark.skipif(_no_hopper_reason() is not None,
                                  reason=_no_hopper_reason() or "")

T = 200


def scaled(name: str, **overrides) -> MoeConfig:
    c = MoeConfig.preset(name)
    c = dataclasses.replace(c, hidden=256, ffn=128, num_experts=min(c.num_experts, 16),
                            top_k=min(c.top_k, 4),
                            shared_expert_ffn=128 if c.shared_expert_ffn else 0,
                            aux_loss_coeff=0.01, z_loss_coeff=0.001)
    if c.router_kind == RouterKind.SIGMOID_GROUP_TOPK:
        c = dataclasses.replace(c, router_num_groups=8, router_topk_groups=4)
    return dataclasses.replace(c, **overrides)


CASES = [(name, {}) for name in PRESETS] + [
    ("qwen3-30b-a3b", {"activation": a})
    for a in (Activation.GEGLU, Activation.REGLU, Activation.SQUARED_RELU)]


def dyadic(shape, scale, device="cuda"):
    """Values i / scale, |i| <= 16: exact in bf16."""
    return torch.randint(-16, 17, shape, device=device).float() / scale


def gate_up_weights(c: MoeConfig, device="cuda") -> dict:
    """Fresh weights in the usual layout, bf16-representable, fp32 where the layer keeps fp32."""
    E, H, F = c.num_experts, c.hidden, c.ffn

    def normal(*shape, std):
        return (torch.randn(shape, device=device) * std).bfloat16()

    w = {"w_router": dyadic((E, H), 64, device).bfloat16(),
         "w1": normal(E, c.fc1_width, H, std=H ** -0.5), "w2": normal(E, H, F, std=F ** -0.5)}
    if c.expert_bias:
        w["b1"] = torch.randn(E, c.fc1_width, device=device) * 0.1
        w["b2"] = torch.randn(E, H, device=device) * 0.1
    if c.router_use_score_bias:
        w["score_bias"] = dyadic((E,), 64, device)
    if c.shared_expert_ffn:
        w["shared_w1"] = normal(c.shared_fc1_width, H, std=H ** -0.5)
        w["shared_w2"] = normal(H, c.shared_expert_ffn, std=c.shared_expert_ffn ** -0.5)
    return w


def expect_close(name, got, want, tol):
    got, want = got.float(), want.float()
    assert got.shape == want.shape, f"{name}: shape {list(got.shape)} vs {list(want.shape)}"
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    worst = (got - want).abs().argmax()
    where = list(torch.unravel_index(worst, want.shape)) if want.dim() else []
    assert err <= tol, (f"{name}: rel-norm error {err:.3g} > {tol}; worst element "
                        f"{[int(i) for i in where]}: {got.flatten()[worst].item()} vs "
                        f"{want.flatten()[worst].item()}")


# ---- Without a GPU (torch only) ----------------------------------------------------------------

def test_glu_interleave_follows_the_layer_rule_and_inverts():
    ffn = 24
    rows = torch.arange(2 * ffn).float()
    inter = interleave_glu(rows, ffn, dim=0)
    # Gate row g sits at 16*(g//8) + g%8, up row u at 16*(u//8) + 8 + u%8.
    assert inter[0] == 0 and inter[8] == ffn and inter[16] == 8 and inter[24] == ffn + 8
    w = torch.randn(3, 2 * ffn, 5)
    assert torch.equal(deinterleave_glu(interleave_glu(w, ffn, dim=1), ffn, dim=1), w)


@pytest.mark.parametrize("name", PRESETS)
def test_load_from_gate_up_round_trips(name):
    c = scaled(name)
    w = gate_up_weights(c, device="cpu")
    moe = MoE(c).load_from_gate_up(**w)
    back = moe.gate_up_weights()
    for key, want in w.items():
        assert torch.equal(back[key], want), key
    assert all(back[k] is None for k in back if k not in w)


def test_load_from_gate_up_names_a_missing_or_extra_weight():
    c = scaled("gpt-oss-120b")
    w = gate_up_weights(c, device="cpu")
    with pytest.raises(ValueError, match="b1 must be given"):
        MoE(c).load_from_gate_up(**{k: v for k, v in w.items() if k != "b1"})
    with pytest.raises(ValueError, match="shared_w1 must be None"):
        MoE(c).load_from_gate_up(**w, shared_w1=w["w1"][0])
    with pytest.raises(ValueError, match=r"w2 must have shape \[16, 256, 128\]"):
        MoE(c).load_from_gate_up(**{**w, "w2": w["w2"][:, :, :64]})


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no _grouped_mm")
def test_reference_grouped_mm_path_matches_the_expert_loop():
    # Every expert gets rows (the CPU fallback of _grouped_mm's backward rejects empty groups).
    c = MoeConfig(hidden=64, ffn=32, num_experts=4, top_k=2, activation=Activation.SWIGLU,
                  router_kind=RouterKind.SOFTMAX_TOPK, router_renormalize=True,
                  aux_loss_coeff=0.01)
    gen = torch.Generator().manual_seed(torch.seed() % 2**31)
    x = torch.randn(96, 64, generator=gen).bfloat16()
    weights = [(torch.randn(*shape, generator=gen) * 0.1).bfloat16()
               for shape in ((4, 64), (4, 64, 64), (4, 64, 32))]
    results = []
    for grouped in (False, True):
        leaves = [t.clone().requires_grad_(True) for t in (x, *weights)]
        y, losses = moe_forward(c, *leaves, compute_dtype=torch.bfloat16, grouped_mm=grouped)
        (y.square().sum() + losses.sum()).backward()
        results.append([y.detach()] + [t.grad for t in leaves])
    for name, a, b in zip(("y", "dx", "dw_router", "dw1", "dw2"), *results):
        err = ((a.float() - b.float()).norm() / b.float().norm()).item()
        assert err < 1e-2, (name, err)


def test_bad_config_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match="'config.top_k'"):
        MoE(scaled("qwen3-30b-a3b", top_k=17))


def test_bad_x_raises_before_any_gpu_work():
    c = scaled("qwen3-30b-a3b")
    moe = MoE(c)  # on the CPU: the checks of dtype, shape and layout come before the device's
    H = c.hidden
    with pytest.raises(TypeError, match="x must be torch.bfloat16, got torch.float32"):
        moe(torch.randn(4, H))
    with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 256\], got \[4, 255\]"):
        moe(torch.randn(4, H - 1).bfloat16())
    with pytest.raises(ValueError, match="x must be contiguous"):
        moe(torch.randn(H, 4).bfloat16().t())
    with pytest.raises(ValueError, match=r"x must have shape \[tokens >= 1, 256\]"):
        moe(torch.randn(0, H).bfloat16())
    with pytest.raises(ValueError, match="x must be on a CUDA device, got cpu"):
        moe(torch.randn(4, H).bfloat16())


def test_kept_fp8_weights_are_reused_only_while_the_weights_are_unchanged():
    w = {"w1": torch.randn(2, 8, 4).bfloat16(), "w2": torch.randn(2, 4, 4).bfloat16()}
    kept = _KeptFp8Weights()
    with pytest.raises(RuntimeError, match="there was none"):
        kept.reuse(w)
    region = torch.empty(16, dtype=torch.uint8)
    kept.keep(region, w)
    assert kept.reuse(w) is region
    assert copy.deepcopy(kept).region is None  # a copy's weights are other tensors
    with torch.no_grad():
        w["w2"].add_(1)  # what an optimiser step does
    with pytest.raises(RuntimeError, match="w2 was replaced or written in place"):
        kept.reuse(w)
    kept.keep(region, w)
    w["w1"] = w["w1"].clone()
    with pytest.raises(RuntimeError, match="w1 was replaced"):
        kept.reuse(w)


def test_fused_wgrad_accumulation_needs_fp32_main_grads():
    moe = MoE(scaled("gpt-oss-120b"), fuse_wgrad_accumulation=True)
    with pytest.raises(ValueError, match="needs w_router.main_grad"):
        main_grads_of(moe._tensors())
    b2 = {"b2": moe.b2}  # one parameter at a time: the device check comes last (CPU here)
    for main_grad, error, match in [
            (torch.zeros(moe.b2.shape, dtype=torch.bfloat16), TypeError, "must be torch.float32"),
            (torch.zeros(3), ValueError, "b2.main_grad must have shape"),
            (torch.zeros(moe.b2.shape), ValueError, "b2.main_grad must be on a CUDA device")]:
        moe.b2.main_grad = main_grad
        with pytest.raises(error, match=match):
            main_grads_of(b2)
    assert "fuse_wgrad_accumulation=True" in repr(moe)


def test_reusing_fp8_weights_needs_a_first_microbatch():
    moe = MoE(scaled("qwen3-30b-a3b", precision=Precision.FP8_BLOCKWISE))
    with pytest.raises(RuntimeError, match="is_first_microbatch=True; there was none"):
        moe._fp8_weights(0, moe._tensors(), is_first_microbatch=False)
    assert MoE(scaled("qwen3-30b-a3b"))._fp8_weights(0, {}, is_first_microbatch=False) is None


# ---- On the GPU --------------------------------------------------------------------------------

def step_against_torch(c: MoeConfig, mode, x, tol, router_tol):
    """One forward + backward of the module (fresh weights, random dy) against
    moefuse/reference.py in fp32 on the same inputs: y, dx and every gradient within `tol`
    (d_w_router within `router_tol`), the losses within 1e-4. Returns the module."""
    w = gate_up_weights(c)
    moe = MoE(c, mode=mode, device="cuda").load_from_gate_up(**w)
    x = x.requires_grad_()
    dy = torch.randn(T, c.hidden, device="cuda").bfloat16()
    y, losses = moe(x)
    ((y.float() * dy.float()).sum() + losses.sum()).backward()

    leaves = {k: v.float().requires_grad_() for k, v in w.items() if k != "score_bias"}
    xr = x.detach().float().requires_grad_()
    yr, lr = moe_forward(c, xr, score_bias=w.get("score_bias"), **leaves)
    ((yr * dy.float()).sum() + lr.sum()).backward()

    expect_close("y", y, yr, tol)
    expect_close("losses", losses, lr, 1e-4)
    expect_close("dx", x.grad, xr.grad, tol)
    grads = moe.gate_up_grads()
    for key, leaf in leaves.items():
        expect_close("d_" + key, grads[key], leaf.grad, router_tol if key == "w_router" else tol)
    return moe


@needs_hopper
@pytest.mark.parametrize("mode", list(LayerMode), ids=lambda m: m.name.lower())
@pytest.mark.parametrize("name, overrides", CASES,
                         ids=[n + "".join("-" + v.name.lower() for v in o.values())
                              for n, o in CASES])
def test_forward_and_gradients_match_torch(name, overrides, mode):
    c = scaled(name, **overrides)
    step_against_torch(c, mode, dyadic((T, c.hidden), 8).bfloat16(), tol=2e-2, router_tol=2e-2)


@needs_hopper
@pytest.mark.parametrize("name, precision, bf16_wgrad",
                         [("gpt-oss-120b", Precision.FP8_BLOCKWISE, False),
                          ("gpt-oss-120b", Precision.FP8_BLOCKWISE, True),
                          ("gpt-oss-120b", Precision.MXFP8, False),
                          ("deepseek-v3", Precision.FP8_BLOCKWISE, False)],
                         ids=["fp8", "fp8_bf16_wgrad", "mxfp8", "fp8_shared_expert"])
def test_low_precision_layer_tracks_torch_within_the_recipe_error(name, precision, bf16_wgrad):
    """The FP8 and MXFP8 layers through the module: y and every gradient within the recipe's
    quantisation error of the bf16 torch reference (ref/layer_fp8_tolerance.h: 0.1, the
    router's 0.15; deepseek's shared expert runs FP8 too); the expert weights' gradients reach
    torch in the weights' dtype."""
    c = scaled(name, precision=precision, bf16_wgrad=bf16_wgrad)
    x = torch.randn(T, c.hidden, device="cuda").bfloat16()
    moe = step_against_torch(c, LayerMode.FUSED, x, tol=1e-1, router_tol=1.5e-1)
    for p in moe.parameters():
        assert p.grad is not None and p.grad.dtype == p.dtype


@needs_hopper
@pytest.mark.parametrize("precision", [Precision.FP8_BLOCKWISE, Precision.MXFP8],
                         ids=lambda p: p.name.lower())
def test_fp8_microbatches_reuse_the_weights_quantised_by_the_first(precision):
    """is_first_microbatch: True quantises and keeps, False reuses; both give what quantising
    each forward gives (the same codes), and a weight update between them is an error."""
    c = scaled("qwen3-30b-a3b", precision=precision)
    moe = MoE(c, device="cuda").load_from_gate_up(**gate_up_weights(c))
    dy = torch.randn(T, c.hidden, device="cuda").bfloat16()
    for micro in range(2):
        x = torch.randn(T, c.hidden, device="cuda").bfloat16().requires_grad_()
        want = _step(moe, x, dy)
        got = _step(moe, x, dy, is_first_microbatch=micro == 0)
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"micro-batch {micro}: output {i} differs"
    with torch.no_grad():
        moe.w1.mul_(0.5)
    with pytest.raises(RuntimeError, match="w1 was replaced or written in place"):
        moe(x, is_first_microbatch=False)


@needs_hopper
def test_fp8_microbatches_check_the_shared_experts_weights_too():
    """FP8 quantises the shared expert's weights into the kept copy, so is_first_microbatch=False
    after an in-place write to one of them is an error naming it."""
    c = scaled("deepseek-v3", precision=Precision.FP8_BLOCKWISE)
    moe = MoE(c, device="cuda").load_from_gate_up(**gate_up_weights(c))
    x = torch.randn(T, c.hidden, device="cuda").bfloat16()
    moe(x, is_first_microbatch=True)
    moe(x, is_first_microbatch=False)
    with torch.no_grad():
        moe.shared_w2.mul_(0.5)
    with pytest.raises(RuntimeError, match="shared_w2 was replaced or written in place"):
        moe(x, is_first_microbatch=False)


def _step(moe, x, dy, **forward_args):
    y, losses = moe(x, **forward_args)
    params = [p for p in moe.parameters()]
    grads = torch.autograd.grad((y.float() * dy.float()).sum() + losses.sum(), [x, *params])
    return (y, losses, *grads)


@needs_hopper
@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3"])
def test_router_loss_gradients_follow_autograd(name):
    """The gradient autograd passes for `losses` reaches the C layer: losses left out of the
    objective add nothing (the same bits as a module without them), and 2·aux + 0.5·z gives the
    bits of the module whose coefficients are scaled so (doubling and halving are exact)."""
    c = scaled(name)
    w = gate_up_weights(c)
    x = dyadic((T, c.hidden), 8).bfloat16()
    dy = torch.randn(T, c.hidden, device="cuda").bfloat16()

    def grads(config, objective):
        moe = MoE(config, device="cuda").load_from_gate_up(**w)
        xx = x.clone().requires_grad_()
        y, losses = moe(xx)
        return torch.autograd.grad(objective((y.float() * dy.float()).sum(), losses),
                                   [xx, *moe.parameters()])

    def expect_equal(got, want, what):
        for i, (g, ww) in enumerate(zip(got, want)):
            assert torch.equal(g, ww), f"{what}: gradient {i} differs"

    unused = grads(c, lambda dot, losses: dot)
    without = grads(dataclasses.replace(c, aux_loss_coeff=0.0, z_loss_coeff=0.0),
                    lambda dot, losses: dot + losses.sum())
    expect_equal(unused, without, "losses unused")
    weighted = grads(c, lambda dot, losses: dot + 2 * losses[0] + 0.5 * losses[1])
    rescaled = grads(dataclasses.replace(c, aux_loss_coeff=0.02, z_loss_coeff=0.0005),
                     lambda dot, losses: dot + losses.sum())
    expect_equal(weighted, rescaled, "2 aux + 0.5 z")


@needs_hopper
@pytest.mark.parametrize("name", ["gpt-oss-120b", "deepseek-v3"])
def test_fused_wgrad_accumulation_adds_into_main_grad(name):
    """fuse_wgrad_accumulation: two micro-batches of the same data leave exactly twice the first's
    main_grad ((0 + G) + G), G matching the plain module's bf16 .grad to its rounding; dx and y
    are the plain module's bit for bit; .grad stays None, or an empty dummy with
    grad_added_to_main_grad set where that attribute exists (the shared expert's here)."""
    c = scaled(name)
    w = gate_up_weights(c)
    plain = MoE(c, device="cuda").load_from_gate_up(**w)
    fused = MoE(c, fuse_wgrad_accumulation=True, device="cuda").load_from_gate_up(**w)
    for p in fused.parameters():
        p.main_grad = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
    flagged = fused.shared_w1 if c.shared_expert_ffn else fused.w2
    flagged.grad_added_to_main_grad = False
    x = dyadic((T, c.hidden), 8).bfloat16()
    dy = torch.randn(T, c.hidden, device="cuda").bfloat16()

    def step(moe):
        xx = x.clone().requires_grad_()
        y, losses = moe(xx)
        torch.autograd.backward([y, losses.sum()], [dy, None])
        return y, xx.grad

    y_plain, dx_plain = step(plain)
    y_fused, dx_fused = step(fused)
    assert torch.equal(y_fused, y_plain) and torch.equal(dx_fused, dx_plain)
    first = {n: p.main_grad.clone() for n, p in fused.named_parameters()}
    for n, p in plain.named_parameters():
        expect_close(n + ".main_grad", first[n], p.grad.float(), 1e-2)
    step(fused)
    for n, p in fused.named_parameters():
        assert torch.equal(p.main_grad, 2 * first[n]), f"{n}: main_grad is not (0 + G) + G"
        if p is flagged:
            assert p.grad_added_to_main_grad and p.grad is not None
        else:
            assert p.grad is None, f"{n}.grad was written"


@needs_hopper
@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3"])
def test_graph_capture_replays_on_new_inputs(name):
    c = scaled(name)
    moe = MoE(c, device="cuda").load_from_gate_up(**gate_up_weights(c))
    x = dyadic((T, c.hidden), 8).bfloat16().requires_grad_()
    dy = torch.randn(T, c.hidden, device="cuda").bfloat16()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (allocator, lazy init)
        _step(moe, x, dy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _step(moe, x, dy)
    for replay in range(2):
        with torch.no_grad():
            x.copy_(dyadic((T, c.hidden), 8))
            dy.copy_(torch.randn_like(dy, dtype=torch.float32))
        graph.replay()
        eager = _step(moe, x, dy)
        torch.cuda.synchronize()
        for i, (got, want) in enumerate(zip(captured, eager)):
            assert torch.equal(got, want), f"replay {replay}: output {i} differs from eager"


class Block(torch.nn.Module):
    """A residual block around the MoE: the model torch.compile sees."""

    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, x):
        y, losses = self.moe(x * 2)  # exact in bf16: the router sees the same logits as eager
        return x + y, losses


@needs_hopper
@pytest.mark.parametrize("precision", [Precision.BF16, Precision.FP8_BLOCKWISE, Precision.MXFP8],
                         ids=lambda p: p.name.lower())
def test_torch_compile_of_a_model_using_the_module(precision):
    c = scaled("gpt-oss-120b", precision=precision)
    model = Block(MoE(c, device="cuda").load_from_gate_up(**gate_up_weights(c)))

    def loss_fn(x):
        h, losses = model(x)
        return h.float().square().mean() + losses.sum()

    compiled = torch.compile(loss_fn, fullgraph=True)
    x = dyadic((T, c.hidden), 16).bfloat16().requires_grad_()
    params = [x, *model.parameters()]
    want = loss_fn(x)
    want_grads = torch.autograd.grad(want, params)
    got = compiled(x)
    got_grads = torch.autograd.grad(got, params)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-6)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        expect_close(f"grad {i}", g, w, 1e-2)
    first = torch.compile(lambda x: model.moe(x, is_first_microbatch=True), fullgraph=True)
    with pytest.raises(Exception, match="is_first_microbatch is for eager mode"):
        first(x)


@needs_hopper
def test_a_bf16_layer_has_no_weight_copy_to_prepare():
    moe = MoE(scaled("qwen3-30b-a3b"), device="cuda")
    with pytest.raises(ValueError, match="FP8_BLOCKWISE or Precision.MXFP8"):
        prepare_fp8_weights(moe._handle(moe.w1.device), moe.w1, moe.w2, None, None)


@needs_hopper
def test_bad_inputs_on_the_gpu_name_the_tensor():
    c = scaled("gpt-oss-120b")
    moe = MoE(c, device="cuda")
    x = torch.randn(8, c.hidden, device="cuda").bfloat16()
    moe.w2.data = moe.w2.data.cpu()
    with pytest.raises(ValueError, match="w2 must be on a CUDA device, got cpu"):
        moe(x)
    moe = MoE(c, device="cuda")
    moe.b1.data = moe.b1.data.bfloat16()
    with pytest.raises(TypeError, match="b1 must be torch.float32, got torch.bfloat16"):
        moe(x)
    moe = MoE(c, device="cuda")
    moe.w1.data = moe.w1.data.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match="w1 must be contiguous"):
        moe(x)

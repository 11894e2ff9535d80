"""examples/train_moe_lm.py end to end on the CPU: the tiny model with the torch back end, and
the clear refusal of a moefuse back end without a GPU. Skipped without torch (CI)."""

import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_moe_lm.py"


def run_example(*args, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLE.parents[1] / "python"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(EXAMPLE), "--tiny", "--device", "cpu",
                           "--out", str(tmp_path), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_tiny_torch_backend_trains_and_writes_losses(tmp_path):
    steps = 8
    proc = run_example("--backends", "torch", "--steps", str(steps), "--seed", "3",
                       tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s" in proc.stdout
    result = json.loads((tmp_path / "losses.json").read_text())
    losses = result["backends"]["torch"]["loss"]
    assert len(losses) == steps
    assert all(math.isfinite(v) for v in losses)
    # Bytes start near ln 256 = 5.55; a few steps of Adam already lower it.
    assert min(losses[-3:]) < losses[0], losses
    assert result["backends"]["torch"]["tokens_per_s"] > 0
    # What the file was made with: the date and, where the library loads, its build commit.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", result["date"]), result["date"]
    commit = result["library_commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{12}(-dirty)?|unknown", commit), commit
    load = result["expert_load"]
    for key in ("aux_off", "aux_on"):
        counts = load[key]["counts"]
        assert len(counts) == 8  # --tiny: 8 experts
        assert sum(counts) == 4 * 64 * 2  # batch x seq x top-k of the probe batch


def test_same_seed_same_losses(tmp_path):
    runs = []
    for i in range(2):
        out = tmp_path / str(i)
        proc = run_example("--backends", "torch", "--steps", "3", "--balance-steps", "0",
                           "--dtype", "fp32", "--seed", "5", tmp_path=out)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads((out / "losses.json").read_text())["backends"]["torch"]["loss"])
    assert runs[0] == runs[1]


def test_torch_repeat_is_compared_with_torch(tmp_path):
    proc = run_example("--backends", "torch,torch-repeat", "--steps", "3", "--balance-steps", "0",
                       "--dtype", "fp32", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((tmp_path / "losses.json").read_text())["backends"]
    # The CPU is deterministic: the repeat is the same run, its difference zero.
    assert runs["torch-repeat"]["loss"] == runs["torch"]["loss"]
    assert runs["torch-repeat"]["rel_diff_vs_reference"] == 0.0
    assert runs["torch-repeat"]["reference"] == "torch"
    assert "torch-repeat" in proc.stdout and "relative difference +0.00%" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without "
                                                      "a GPU")
def test_moefuse_backend_without_gpu_fails_with_a_message(tmp_path):
    proc = run_example("--backends", "torch,moefuse-fused", "--steps", "2", tmp_path=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "moefuse-fused" in proc.stderr and "GPU" in proc.stderr, proc.stderr


@pytest.mark.parametrize("backend", ["torch-grouped", "torch-grouped-repeat"])
def test_torch_grouped_backend_on_the_cpu_fails_with_a_message(tmp_path, backend):
    proc = run_example("--backends", backend, "--steps", "2", tmp_path=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert backend in proc.stderr and "--device cuda" in proc.stderr, proc.stderr


def load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_moe_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("masters", ["fp32", "none"])
def test_fp32_master_weights_keep_steps_below_bf16_spacing(masters):
    # A bf16 weight of 1.0 with a constant gradient: AdamW moves it by about lr a step, 1e-4,
    # below half of bf16's spacing under 1.0 (2^-9). In place every step rounds back to 1.0; an
    # fp32 master accumulates them (about 0.011 over 200 steps of the schedule).
    example = load_example()
    from types import SimpleNamespace

    model = torch.nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        model.weight.fill_(1.0)
    args = SimpleNamespace(master_weights=masters, torch_dtype=torch.bfloat16, lr=1e-4)
    opt = example.Optimiser(torch, model, args, steps=200)
    for _ in range(200):
        model.weight.grad = torch.ones_like(model.weight)
        opt.step()
        assert model.weight.grad is None
    w = model.weight.item()
    if masters == "fp32":
        assert 0.985 < w < 0.995, w
    else:
        assert w == 1.0

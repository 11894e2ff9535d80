"""scripts/bench_compare.py and scripts/ab_bench.sh on made-up reports (no GPU: runs in CI)."""

import inspect
import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def report(path: pathlib.Path, fused_ms: float) -> pathlib.Path:
    rows = [{"preset": "qwen3", "op": "fc2 dgrad", "variant": "fused", "median_ms": fused_ms,
             "vs_torch": "-"},
            {"preset": "qwen3", "op": "fc2 dgrad", "variant": "dense", "median_ms": 0.5}]
    path.write_text(json.dumps({"reports": [{"title": "backward", "rows": rows}]}))
    return path


def compare(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_compare.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_labels_side_by_side_with_means_and_ratios(tmp_path):
    a1, a2 = report(tmp_path / "a1.json", 1.0), report(tmp_path / "a2.json", 1.2)
    b1 = report(tmp_path / "b1.json", 0.77)
    proc = compare(f"main:{a1}", f"main:{a2}", f"new:{b1}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "median_ms | main | new | new/main | round spread"
    # main's two rounds of the fused row: 1.2 / 1.0 - 1; one round or equal rounds: "-" or 0
    assert "qwen3 fc2 dgrad fused | 1.1 | 0.77 | 0.700 | 20.0%" in lines
    assert "qwen3 fc2 dgrad dense | 0.5 | 0.5 | 1.000 | 0.0%" in lines


@pytest.mark.parametrize("arg,message", [("nolabel.json", "expected LABEL:FILE"),
                                         ("a:missing.json", "no such file")])
def test_bad_arguments_are_named(tmp_path, arg, message):
    proc = compare(arg)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# Each mode's timing column: the layer totals' ms, the dispatch kernels' median_us (string
# columns other than the metric key the row; a row's numbers besides the metric are ignored).
@pytest.mark.parametrize("title,row,metric,main_value,new_value,line", [
    ("layer totals",
     {"preset": "qwen3", "variant": "moefuse fused (graph)", "pass": "fwd", "TFLOP/s": 480.0},
     "ms", 2.5, 2.4, "qwen3 moefuse fused (graph) fwd | 2.5 | 2.4 | 0.960"),
    ("dispatch",
     {"preset": "qwen3", "kernel": "router_topk", "MB": 9.4, "target": "speedup>=5",
      "met": "n/a"},
     "median_us", 36.0, 27.0, "qwen3 router_topk speedup>=5 n/a | 36 | 27 | 0.750"),
])
def test_each_modes_timing_column_compares(tmp_path, title, row, metric, main_value, new_value,
                                           line):
    def write(path, value):
        path.write_text(json.dumps({"reports": [{"title": title,
                                                 "rows": [{**row, metric: value}]}]}))
        return path
    main, new = write(tmp_path / "m.json", main_value), write(tmp_path / "n.json", new_value)
    proc = compare(f"main:{main}", f"new:{new}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{metric} | main | new | new/main | round spread"
    assert line + " | -" in lines


def test_control_rows_give_the_noise_floor(tmp_path):
    # The cuBLAS and torch rows run the same code in every build: the range of their ratios is
    # printed after the table; rows naming neither are not in it.
    def write(path, cublas_ms, torch_ms, kernel_ms):
        rows = [{"preset": "P", "variant": "cublas dense bf16 (bound)", "median_ms": cublas_ms},
                {"preset": "P", "variant": "torch._grouped_mm", "median_ms": torch_ms},
                {"preset": "P", "variant": "moefuse fp8 wgrad", "median_ms": kernel_ms}]
        path.write_text(json.dumps({"reports": [{"title": "t", "rows": rows}]}))
        return path
    main = write(tmp_path / "m.json", 1.0, 2.0, 2.0)
    new = write(tmp_path / "n.json", 1.14, 1.9, 2.2)
    proc = compare(f"main:{main}", f"new:{new}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "noise floor new/main: 0.950-1.140 over 2 control rows "
        "(names holding cublas or torch: the same code in every build)")
    only_torch = compare("--control", "torch", f"main:{main}", f"new:{new}")
    assert "0.950-0.950 over 1 control rows" in only_torch.stdout.splitlines()[-1]
    none = compare("--control", "nothing", f"main:{main}", f"new:{new}")
    assert "noise floor" not in none.stdout


def test_a_metric_no_row_has_is_named(tmp_path):
    proc = compare("--metric", "TFLOP/s", f"a:{report(tmp_path / 'a.json', 1.0)}")
    assert proc.returncode != 0 and "no row of the files has a numeric 'TFLOP/s'" in proc.stderr


def fake_build(path: pathlib.Path, fused_ms: float, seconds: float = 0) -> pathlib.Path:
    """A moefuse-bench that writes a made-up report to its --json argument (taking `seconds`)."""
    path.mkdir()
    bench = path / "moefuse-bench"
    template = json.dumps({"reports": [{"title": "t", "rows": [
        {"preset": "P", "op": "fc2 dgrad", "variant": "fused", "median_ms": fused_ms}]}]})
    bench.write_text(f"#!/bin/sh\necho \"$@\" >> '{path / 'calls'}'\n"
                     f"[ -n \"$ORDER_LOG\" ] && echo {path.name} >> \"$ORDER_LOG\"\n"
                     f"sleep {seconds}\n"
                     "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && "
                     f"printf '%s' '{template}' > \"$2\"; shift; done\n")
    bench.chmod(bench.stat().st_mode | stat.S_IXUSR)
    return path


def test_ab_bench_interleaves_builds_and_compares(tmp_path):
    a, b = fake_build(tmp_path / "a", 2.0), fake_build(tmp_path / "b", 1.0)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "gemm-backward", "p1 p2", "2",
                           f"main={a}", f"new={b}"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(out)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((out / "ab").glob("*.json"))) == 8  # 2 rounds × 2 builds × 2 presets
    assert proc.stdout.count("P fc2 dgrad fused | 2 | 1 | 0.500 | 0.0%") == 2


def test_ab_bench_compares_one_binary_under_two_environments(tmp_path):
    # One made-up binary whose time depends on a variable: 1 ms with FAST set, else 2 ms.
    build = tmp_path / "t"
    build.mkdir()
    bench = build / "moefuse-bench"
    row = '{"preset": "P", "op": "fc2 dgrad", "variant": "fused", "median_ms": %s}'
    bench.write_text("#!/bin/sh\nms=${FAST:+1.0}\n"
                     "while [ $# -gt 0 ]; do [ \"$1\" = --json ] && printf "
                     f"'{{\"reports\": [{{\"title\": \"t\", \"rows\": [{row}]}}]}}' "
                     "\"${ms:-2.0}\" > \"$2\"; shift; done\n")
    bench.chmod(bench.stat().st_mode | stat.S_IXUSR)
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "gemm", "p1", "2",
                           f"slow={build}", f"fast={build}:FAST=1,OTHER=x"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(tmp_path / "out")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "P fc2 dgrad fused | 2 | 1 | 0.500 | 0.0%" in proc.stdout


def test_ab_bench_names_a_malformed_variable(tmp_path):
    a = fake_build(tmp_path / "a", 1.0)
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "gemm", "p1", "1", f"a={a}",
                           f"b={a}:1BAD=2"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(tmp_path / "out")))
    assert proc.returncode == 2
    assert f"expected VAR=VALUE after the directory of 'b={a}:1BAD=2', got '1BAD=2'" in proc.stderr


def test_ab_bench_alternates_the_build_order_by_round(tmp_path):
    a, b, c = (fake_build(tmp_path / name, 1.0) for name in "abc")
    order = tmp_path / "order"
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "gemm", "p1", "3", f"a={a}",
                           f"b={b}", f"c={c}"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(tmp_path / "out"), ORDER_LOG=str(order)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert order.read_text().split() == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]


def test_ab_bench_samples_the_clocks_of_each_build(tmp_path):
    # A made-up nvidia-smi printing one power-capped sample every 50 ms until it is killed.
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\nwhile :; do\n"
                   "  echo '2026/11/30 10:15:12.884, 1530 MHz, 692.00 W, 0x0000000000000004'\n"
                   "  sleep 0.05\ndone\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    a, b = fake_build(tmp_path / "a", 2.0, 0.3), fake_build(tmp_path / "b", 1.0, 0.3)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "layer", "p1", "1", f"main={a}",
                           f"new={b}"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(out),
                                   PATH=f"{tools}:{os.environ['PATH']}"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (out / "ab").glob("*.smi.csv")) == [
        "layer_p1_main_1.smi.csv", "layer_p1_new_1.smi.csv"]
    lines = proc.stdout.splitlines()
    i = lines.index("== clocks while each build ran (nvidia-smi, every 100 ms)")
    assert [line.split(":")[0] for line in lines[i + 1:]] == ["main", "new"]
    assert all("SM MHz p10/p50/p90 1530/1530/1530" in line and "SW power cap 100%" in line
               for line in lines[i + 1:]), lines[i + 1:]


def test_ab_bench_passes_bench_args_to_every_run(tmp_path):
    a = fake_build(tmp_path / "a", 1.0)
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), "gemm", "p1 p2", "1", f"a={a}"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, OUT=str(tmp_path / "out"),
                                   BENCH_ARGS="--no-torch --iters 3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (a / "calls").read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("gemm --preset p") for c in calls), calls
    assert all(c.endswith(" --no-torch --iters 3") for c in calls), calls


BENCH = SCRIPTS.parent / "build" / "release" / "moefuse-bench"


@pytest.mark.skipif(not BENCH.exists(), reason="moefuse-bench not built (scripts/build.sh)")
@pytest.mark.parametrize("mode", ["gemm", "gemm-backward"])
def test_gemm_modes_take_no_torch_as_a_flag(mode):
    # Accepted: without a GPU the mode then says so and measures nothing (exit 0); with one, a
    # tiny run (256 tokens, one timed iteration) of the one preset.
    ok = subprocess.run([str(BENCH), mode, "--no-torch", "--preset", "qwen3-30b-a3b", "--tokens",
                         "256", "--warmup", "0", "--iters", "1"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([str(BENCH), mode, "--no-torch", "yes"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0
    assert "'--no-torch': expected no value (a flag), got 'yes'" in bad.stdout + bad.stderr


@pytest.mark.skipif(not BENCH.exists(), reason="moefuse-bench not built (scripts/build.sh)")
@pytest.mark.parametrize("args,message", [
    (["layer", "--routing", "balanced"],
     "'--routing': expected uniform or zipf (balanced: gemm, gemm-backward, dispatch and quant "
     "only), got balanced"),
    (["layer", "--warm-ms", "70000"], "'--warm-ms': expected a value in [0, 60000], got 70000"),
    (["gemm", "--routing", "even"], "'--routing': expected uniform, zipf or balanced, got 'even'"),
    (["gemm-fp8", "--warm-ms", "-1"], "'--warm-ms': expected a value in [0, 60000], got -1"),
])
def test_bench_names_bad_options(args, message):
    # Checked before the GPU is looked for, so these fail the same way on a machine without one.
    proc = subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("args,message", [
    (["gemm", "p", "1", "x=."], "BUILD_DIR/moefuse-bench"),
    (["gemm", "p", "0", "x=."], "ROUNDS must be a positive integer, got '0'"),
    (["gemm", "p", "1"], "scripts/ab_bench.sh MODE"),  # too few arguments: the usage
])
def test_ab_bench_names_bad_arguments(tmp_path, args, message):
    proc = subprocess.run(["bash", str(SCRIPTS / "ab_bench.sh"), *args], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_torch_gemm_baselines_take_the_warm_up_options(monkeypatch):
    # The command line moefuse-bench's GEMM modes give bench/torch_gemm*.py (gemm_bench.cpp
    # run_torch_gemm): its timing fields reach median_ms in its argument order.
    monkeypatch.syspath_prepend(str(SCRIPTS.parent / "bench"))
    import torch_timing
    monkeypatch.setattr(sys, "argv", ["torch_gemm.py", "--counts", "3,0,5", "--problem",
                                      "fc1:64:32:swiglu", "--warmup", "2", "--warm-ms", "1500",
                                      "--iters", "7"])
    counts, problems, timing = torch_timing.grouped_gemm_cli("NAME:N:K:OP", fields=4)
    assert counts == [3, 0, 5] and problems == [["fc1", 64, 32, "swiglu"]]
    bound = inspect.signature(torch_timing.median_ms).bind(None, *timing).arguments
    assert (bound["warmup"], bound["iters"], bound["warm_ms"]) == (2, 7, 1500)


@pytest.mark.parametrize("args, message", [
    (["--counts", "3,x", "--problem", "fc2:64:32"], "--counts: expected comma-separated integers"),
    (["--counts", "3", "--problem", "fc2:64"], "--problem: expected NAME:N:K, got 'fc2:64'"),
    (["--counts", "3", "--problem", "fc2:64:32:plain"], "got 'fc2:64:32:plain'"),
    (["--counts", "3", "--problem", "fc2:64:0"], "got 'fc2:64:0'"),
    (["--counts", "3", "--problem", "fc2:n:32"], "got 'fc2:n:32'"),
])
def test_torch_gemm_baselines_name_a_malformed_argument(monkeypatch, capsys, args, message):
    # bench/torch_gemm*.py's shared command line: a bad --counts or --problem is argparse's usage
    # error (exit 2) naming the argument and what it got, not a traceback from deeper down.
    monkeypatch.syspath_prepend(str(SCRIPTS.parent / "bench"))
    import torch_timing
    monkeypatch.setattr(sys, "argv", ["torch_gemm_fp8.py", *args])
    with pytest.raises(SystemExit) as exit_info:
        torch_timing.grouped_gemm_cli("NAME:N:K", fields=3)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_torch_fp8_baseline_leaves_out_what_torch_refuses(monkeypatch, capsys):
    # bench/torch_gemm_fp8.py: a variant this torch refuses (e.g. blockwise scales with K not a
    # multiple of 128) prints no timing line for moefuse-bench to read, only its reason on stderr;
    # the other variants still print theirs.
    monkeypatch.syspath_prepend(str(SCRIPTS.parent / "bench"))
    import torch_gemm_fp8
    monkeypatch.setattr(torch_gemm_fp8, "median_ms", lambda fn, *timing: fn())

    def refuse():
        raise RuntimeError("blockwise scaling needs K divisible by 128\nat some frame")

    torch_gemm_fp8.report("fc2", "scaled_mm_blockwise", refuse, (1, 1, 0))
    torch_gemm_fp8.report("fc2", "scaled_mm_tensorwise", lambda: 0.25, (1, 1, 0))
    out, err = capsys.readouterr()
    assert out == "torch fc2.scaled_mm_tensorwise 0.250000\n"
    assert err == ("fc2.scaled_mm_blockwise: not available: "
                   "blockwise scaling needs K divisible by 128\n")


@pytest.mark.parametrize("args, code, message", [
    (["--gib", "0"], 2, "--gib: expected a size > 0, got 0.0"),
    (["--iters", "x"], 2, "--iters: invalid int value"),
])
def test_hbm_bandwidth_names_a_bad_argument(args, code, message):
    # bench/hbm_bandwidth.py checks its command line before it looks for torch or a GPU.
    proc = subprocess.run([sys.executable, str(SCRIPTS.parent / "bench" / "hbm_bandwidth.py"),
                           *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == code and message in proc.stderr, proc.stderr


def test_hbm_bandwidth_exits_unavailable_without_torch(monkeypatch):
    # Without torch or a GPU (torch_or_none prints why) the probe exits with
    # torch_timing.UNAVAILABLE, the code moefuse-bench's torch runs read as "not available".
    monkeypatch.syspath_prepend(str(SCRIPTS.parent / "bench"))
    import hbm_bandwidth
    import torch_timing
    monkeypatch.setattr(hbm_bandwidth.torch_timing, "torch_or_none", lambda: None)
    monkeypatch.setattr(sys, "argv", ["hbm_bandwidth.py", "--gib", "0.5"])
    assert hbm_bandwidth.main() == torch_timing.UNAVAILABLE

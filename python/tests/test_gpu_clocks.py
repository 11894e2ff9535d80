"""scripts/gpu_clocks.py on made-up nvidia-smi samples (no GPU: runs in CI)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_clocks.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def sample(mhz, watts, reasons):
    return f"2026/11/30 10:15:12.884, {mhz} MHz, {watts:.2f} W, 0x{reasons:016x}"


def test_busy_samples_their_percentiles_and_reasons(tmp_path):
    f = tmp_path / "run.smi.csv"
    f.write_text("\n".join(
        [sample(345, 78, 0x1)] * 5  # idle between runs: left out
        + [sample(1530, 692, 0x4)] * 8 + [sample(1980, 450, 0x0)] * 2
        + ["[N/A], garbage line", ""]))
    proc = run(f)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"{f}: 10 busy samples: SM MHz p10/p50/p90 1530/1530/1980, W 450/692/692; "
        "reasons: SW power cap 80%")


def test_labels_pool_a_builds_runs_and_an_idle_run_says_so(tmp_path):
    a1, a2, b = tmp_path / "a1", tmp_path / "a2", tmp_path / "b"
    a1.write_text(sample(1500, 700, 0x4 | 0x8))
    a2.write_text(sample(1600, 690, 0x4))
    b.write_text(sample(345, 70, 0x1))
    proc = run(f"main:{a1}", f"main:{a2}", f"new:{b}")
    assert proc.returncode == 0, proc.stderr
    main, new = proc.stdout.splitlines()
    assert main == ("main: 2 busy samples: SM MHz p10/p50/p90 1500/1600/1600, W 690/700/700; "
                    "reasons: SW power cap 100%, HW slowdown 50%")
    assert new == "new: 1 samples, none busy"


def test_an_unreadable_file_is_named(tmp_path):
    proc = run(f"main:{tmp_path / 'missing.smi.csv'}")
    assert proc.returncode == 2
    assert f"cannot read the samples file '{tmp_path / 'missing.smi.csv'}'" in proc.stderr

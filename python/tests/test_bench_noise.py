"""scripts/bench_noise.py on made-up A/B run files (no GPU: runs in CI)."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "bench_noise.py"


def write_run(path: pathlib.Path, cublas_ms: float, kernel_ms: float) -> None:
    rows = [{"preset": "qwen3-30b-a3b", "variant": "cublas dense (bound)", "median_ms": cublas_ms},
            {"preset": "qwen3-30b-a3b", "variant": "moefuse fused", "median_ms": kernel_ms}]
    path.write_text(json.dumps({"reports": [{"title": "t", "rows": rows}]}))


def noise(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_rows_move_as_their_rounds_say(tmp_path):
    # Build A: rounds 1 and 2 of one call; build B: round 1. The kernel row moves 10 % between
    # A's rounds, the cuBLAS row 0 % within A and 20 % from A to B; a file not named as an A/B
    # run is ignored.
    write_run(tmp_path / "call3_gemm_qwen3-30b-a3b_A_1.json", 1.0, 2.0)
    write_run(tmp_path / "call3_gemm_qwen3-30b-a3b_A_2.json", 1.0, 2.2)
    write_run(tmp_path / "call3_gemm_qwen3-30b-a3b_B_1.json", 1.2, 2.0)
    write_run(tmp_path / "notes.json", 9.0, 9.0)
    proc = noise("--min-pairs", "1", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "10.0% | 1 | - | - | gemm: qwen3-30b-a3b moefuse fused"
    assert lines[2] == "0.0% | 1 | 20.0% | 1 | gemm: qwen3-30b-a3b cublas dense (bound)"
    assert lines[3] == "median row: 5.0% over 2 rows"


def test_too_few_pairs_and_missing_directories_are_named(tmp_path):
    write_run(tmp_path / "gemm_qwen3-30b-a3b_A_1.json", 1.0, 2.0)
    proc = noise(tmp_path)
    assert proc.returncode != 0
    assert "no row has 5 same-build pairs of rounds 1 and 2" in proc.stderr
    proc = noise(tmp_path / "missing")
    assert proc.returncode != 0 and "no such directory" in proc.stderr

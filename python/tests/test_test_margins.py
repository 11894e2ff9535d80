"""scripts/test_margins.py on made-up MOEFUSE_TEST_MARGINS files (no GPU: runs in CI)."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "test_margins.py"


def margins(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_checks_sorted_by_their_worst_run_with_its_seed(tmp_path):
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    a.write_text("T.one\td_w1\t0.0018\t0.002\t0.9\t11\n"
                 "T.one\ty\t0.002\t0.02\t0.1\t11\n")
    b.write_text("T.one\td_w1\t0.0002\t0.002\t0.1\t22\n")
    proc = margins(a, b)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "worst error/bound | mean | runs | check | seed of the worst",
        "0.900 | 0.500 | 2 | T.one d_w1 | 11",
        "0.100 | 0.100 | 1 | T.one y | 11"]
    assert len(margins("--top", "1", a, b).stdout.splitlines()) == 2


def test_bad_files_are_named(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("T.one\td_w1\t0.1\n")
    proc = margins(bad)
    assert proc.returncode != 0
    assert "bad.tsv:1: expected 6 tab-separated fields, got 3" in proc.stderr
    proc = margins(tmp_path / "missing.tsv")
    assert proc.returncode != 0 and "no such file" in proc.stderr
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    assert "no check recorded" in margins(empty).stderr

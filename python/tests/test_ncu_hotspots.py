"""scripts/ncu_hotspots.py on a made-up ncu source table and on run 21's committed profile (no
GPU: runs in CI)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ncu_hotspots.py"
HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb",'
          '"stall_wait","stall_long_sb (Not Issued)"')


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_orders_by_samples_and_names_the_instruction_before(tmp_path):
    table = tmp_path / "k.csv"
    table.write_text("\n".join([
        "==PROF== some preamble", HEADER,
        '"0x7f0000a010","  SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR15+0x35000], R8","2","0","2","0"',
        '"0x7f0000a020","@!P1  BRA 0x7f0000b000","6","6","0","6"',
        '"0x7f0000a030","  HGMMA.64x256x16.F32.BF16 R24","2","0","2","0"']))
    proc = run(table, "--top", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "samples: 10"
    assert lines[1].startswith("0a020        6  60.0% stall_long_sb")
    assert lines[1].endswith("| SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR15+0x35000], R8")
    assert len(lines) == 3


def test_refuses_a_file_without_a_source_table(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text('"ID","Kernel Name"\n"0","k"\n')
    proc = run(other)
    assert proc.returncode == 2
    assert "no ncu source table" in proc.stderr


def test_reads_run_21s_wgrad_profile():
    profile = ROOT / "bench/results/2026-11-30_h200_s21/call10_ncu_wgrad_sass.csv"
    proc = run(profile, "--top", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "samples: 150817"
    assert "[UR15+0x35000]" in proc.stdout  # the consumers' wait on a stage's full barrier

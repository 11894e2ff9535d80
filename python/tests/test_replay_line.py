"""A failed GoogleTest test prints how to replay its random draw (tests/common/test_main.cpp)."""

import os
import pathlib
import subprocess

import pytest

CPU_TESTS = pathlib.Path(__file__).resolve().parents[2] / "build" / "release" / "moefuse_cpu_tests"


@pytest.mark.skipif(not CPU_TESTS.exists(), reason="moefuse_cpu_tests not built (scripts/build.sh)")
def test_a_failed_test_prints_its_seed_and_filter():
    name = "TestSeed.DISABLED_FailsToShowItsReplayLine"
    proc = subprocess.run([str(CPU_TESTS), "--gtest_also_run_disabled_tests",
                           f"--gtest_filter={name}"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, MOEFUSE_TEST_SEED="1234567890123"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"[  REPLAY  ] MOEFUSE_TEST_SEED=1234567890123 --gtest_filter='{name}'" in proc.stdout


@pytest.mark.skipif(not CPU_TESTS.exists(), reason="moefuse_cpu_tests not built (scripts/build.sh)")
def test_a_passing_test_prints_no_replay_line():
    proc = subprocess.run([str(CPU_TESTS), "--gtest_filter=TestSeed.*"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REPLAY" not in proc.stdout

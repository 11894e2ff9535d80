"""scripts/gpu_check.sh's tests stage with made-up test binaries (no GPU: runs in CI)."""

import os
import pathlib
import stat
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def executable(path: pathlib.Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_tests_stage_prints_the_checks_closest_to_their_bounds(tmp_path):
    # A GPU suite of two tests, each recording one margin the way tests/common/margins.cpp does,
    # and a CPU suite that passes.
    build = tmp_path / "build"
    build.mkdir()
    executable(build / "moefuse_gpu_tests", """#!/bin/sh
m="$MOEFUSE_TEST_MARGINS"
case "$1" in
  --gtest_list_tests) printf 'Suite.\\n  Near\\n  Far\\n' ;;
  --gtest_filter=Suite.Near) printf 'Suite.Near\\td_w1\\t0.018\\t0.02\\t0.9\\t7\\n' >> "$m" ;;
  --gtest_filter=Suite.Far) printf 'Suite.Far\\ty\\t0.002\\t0.02\\t0.1\\t7\\n' >> "$m" ;;
esac
""")
    executable(build / "moefuse_cpu_tests", "#!/bin/sh\necho '[  PASSED  ] 1 test.'\n")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "tests"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, BUILD=str(build), OUT=str(out)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "GPU tests: 2 passed, 0 failed, 0 timed out, 0 skipped" in lines
    i = lines.index("== the GPU checks closest to their bounds")
    assert lines[i + 2:i + 4] == ["0.900 | 0.900 | 1 | Suite.Near d_w1 | 7",
                                  "0.100 | 0.100 | 1 | Suite.Far y | 7"]
    assert "Suite.Near d_w1" in (out / "tests.log").read_text()


def test_a_failed_test_shows_its_replay_line_however_long_its_log(tmp_path):
    # 100 failure lines, then the replay line test_main.cpp prints at the test's end.
    build = tmp_path / "build"
    build.mkdir()
    executable(build / "moefuse_gpu_tests", """#!/bin/sh
case "$1" in
  --gtest_list_tests) printf 'Suite.\\n  Long\\n' ;;
  *) for i in $(seq 100); do echo "failure line $i"; done
     echo "[  REPLAY  ] MOEFUSE_TEST_SEED=42 --gtest_filter='Suite.Long'"
     exit 1 ;;
esac
""")
    executable(build / "moefuse_cpu_tests", "#!/bin/sh\necho '[  PASSED  ] 1 test.'\n")
    proc = subprocess.run(["bash", str(SCRIPT), "tests"], capture_output=True, text=True,
                          timeout=120,
                          env=dict(os.environ, BUILD=str(build), OUT=str(tmp_path / "out")))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("FAILED Suite.Long"))
    assert lines[i + 1] == "[  REPLAY  ] MOEFUSE_TEST_SEED=42 --gtest_filter='Suite.Long'"
    assert "GPU tests: 0 passed, 1 failed, 0 timed out, 0 skipped" in lines

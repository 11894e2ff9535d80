#!/usr/bin/env bash
# Installs what a fresh machine lacks to build moefuse: CMake, Ninja and GoogleTest from Debian,
# CUTLASS/CuTe headers from the pinned PyPI package into third_party/cutlass. The CUDA toolkit
# (nvcc 13) is expected on the machine. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

CUTLASS_VERSION=4.2.0.0

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "setup: nvcc (CUDA 13) not found" >&2; exit 1; }

# pytest runs the Python package's tests (python/tests); torch is not installed here on purpose:
# the tests that need it skip.
if ! python3 -c "import pytest" 2>/dev/null; then
  echo "setup: installing pytest"
  python3 -m pip install --quiet --disable-pip-version-check pytest
fi

stamp=third_party/cutlass/.version
if [ "$(cat "$stamp" 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
  echo "setup: installing nvidia-cutlass==$CUTLASS_VERSION headers into third_party/cutlass"
  rm -rf third_party/cutlass
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target third_party/cutlass "nvidia-cutlass==$CUTLASS_VERSION"
  echo "$CUTLASS_VERSION" > "$stamp"
fi

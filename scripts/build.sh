#!/usr/bin/env bash
# Configures and builds the release preset (library, tests, moefuse-bench) into build/release.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
cmake --preset release >/dev/null
cmake --build --preset release -j "${MOEFUSE_BUILD_JOBS:-$(nproc)}"

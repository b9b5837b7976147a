#!/usr/bin/env bash
# Configures, builds and runs the whole test suite with ctest.
# SPIRE_BUILD_DIR (default build) and SPIRE_CMAKE_ARGS change the build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SPIRE_BUILD_DIR:-build}
# CPU-only unless asked otherwise: the suite must pass without a GPU.
cmake -S . -B "$dir" -DSPIRE_CUDA=OFF ${SPIRE_CMAKE_ARGS:-}
cmake --build "$dir" -j2
ctest --test-dir "$dir" --output-on-failure -j2

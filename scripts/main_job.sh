#!/usr/bin/env bash
# The README's first command: install what is missing, configure, build and
# run the main job (for now the MLP trained by gradient descent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DSPIRE_CUDA=OFF
cmake --build build -j2
./build/examples/mnist_convnet

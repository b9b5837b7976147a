#!/usr/bin/env bash
# The README's first command: install what is missing, configure, build the
# main job (only its target: the library and examples/mnist_convnet) and run
# it (tensorpack's MNIST convnet).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DSPIRE_CUDA=OFF
cmake --build build -j2 --target mnist_convnet
./build/examples/mnist_convnet

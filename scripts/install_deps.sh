#!/usr/bin/env bash
# Installs the Debian 12 packages Spire needs to build, test and benchmark
# (skips the install when everything is already present).
set -euo pipefail
pkgs=(build-essential cmake ccache nlohmann-json3-dev libgtest-dev libgmock-dev
      libbenchmark-dev libopenblas-dev libopenblas0-pthread zlib1g-dev libjpeg-dev libpng-dev openmpi-bin libopenmpi-dev python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Python clients used by the external-format checks in tests/train (TensorBoard
# reads Spire's event files, the safetensors package reads/writes checkpoints),
# and matplotlib for the plots (scripts/plot_stats.py, bench/plot_scaling.py).
# Those tests skip when the packages are missing, so failure here is only a note.
if command -v python3 >/dev/null 2>&1; then
  if python3 -c 'import tensorboard, safetensors, numpy, matplotlib' >/dev/null 2>&1; then
    :
  elif ! python3 -m pip --version >/dev/null 2>&1; then
    echo "note: pip is not available for python3; the tensorboard/safetensors interop tests will be skipped"
  elif ! python3 -m pip install --quiet tensorboard safetensors numpy matplotlib; then
    # A Debian system python refuses plain pip installs (PEP 668); fall back to the user site.
    python3 -m pip install --quiet --user --break-system-packages tensorboard safetensors numpy matplotlib ||
      echo "note: could not pip install tensorboard safetensors numpy matplotlib; the interop and plot tests will be skipped"
  fi
else
  echo "note: python3 not found; the tensorboard/safetensors interop tests will be skipped"
fi

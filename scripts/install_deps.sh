#!/usr/bin/env bash
# Installs the Debian 12 packages Spire needs to build, test and benchmark
# (skips the install when everything is already present).
set -euo pipefail
pkgs=(build-essential cmake ccache libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
      libbenchmark-dev libopenblas-dev libopenblas0-pthread zlib1g-dev)
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

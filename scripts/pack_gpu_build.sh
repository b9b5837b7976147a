#!/usr/bin/env bash
# Packs a CUDA build made on this machine (Release, -DSPIRE_CUDA=ON, sm_90) into a small folder,
# .gpu_build/ in the repository root (git-ignored), so that a GPU machine with little time can run
# bench/gpu_check.sh on it without compiling: SPIRE_PREBUILT=<folder> bench/gpu_check.sh ...
#
# Layout (what gpu_check.sh runs, at the paths of a build directory):
#   tests/spire_tests  bench/{gpu_kernels,gpu_train_step,allreduce_bandwidth,resnet_step,
#   gpt_step,attention_bench}  examples/{mnist_convnet,gpt}
#   lib/   Spire's libraries (by soname) and the libraries they need that a bare machine may lack
#          (MPI, hwloc, libevent, libjpeg, libpng, zlib, ...): everything ldd finds except the C
#          and C++ runtimes and the CUDA libraries (cudart, cuBLAS, cuDNN, NCCL), which the GPU
#          machine's toolkit or pip packages provide (gpu_check.sh finds them).
#   data/mnist/   the MNIST files of ../shared/data/mnist when they exist (trainer_throughput.sh)
#   data/shakespeare/shakespeare.txt   the GPT example's corpus, when it exists
#   PACKED.txt    the commit, the build's type and CUDA architectures, and the date.
# Binaries and libraries are stripped of symbols (not of anything they run).
#
# Usage: scripts/pack_gpu_build.sh [BUILD_DIR] [PREFIX]
#   BUILD_DIR  a configured and built CUDA build directory (default: build-cuda); the targets above
#              are built there first (cmake --build, -j2)
#   PREFIX     output folder (default: <repo>/.gpu_build; replaced if it exists)
# The folder must stay under the device tool's 64 MiB (with the working tree): the script prints
# its size and fails above 56 MiB.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build-cuda}"
PREFIX="${2:-$REPO/.gpu_build}"
die() { echo "pack_gpu_build: $*" >&2; exit 1; }

[[ -f "$BUILD/CMakeCache.txt" ]] || die "$BUILD is not a configured build directory"
BUILD="$(cd "$BUILD" && pwd)"  # absolute, so that ldd prints absolute paths
grep -q '^SPIRE_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt" || die "$BUILD is not a CUDA build (-DSPIRE_CUDA=ON)"
BUILD_TYPE="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")"
# (CMakeLists.txt sets 90 when the cache has no CMAKE_CUDA_ARCHITECTURES.)
ARCHS="$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
ARCHS="${ARCHS:-90}"
[[ "$BUILD_TYPE" == Release ]] || echo "pack_gpu_build: warning: $BUILD is a '$BUILD_TYPE' build, not Release" >&2

BINS=(tests/spire_tests bench/gpu_kernels bench/gpu_train_step bench/allreduce_bandwidth
      bench/resnet_step bench/gpt_step bench/attention_bench examples/mnist_convnet examples/gpt)
targets=()
for b in "${BINS[@]}"; do targets+=("$(basename "$b")"); done
cmake --build "$BUILD" -j2 --target "${targets[@]}" >/dev/null || die "building ${targets[*]} in $BUILD failed"

rm -rf "$PREFIX"
mkdir -p "$PREFIX/lib" "$PREFIX/tests" "$PREFIX/bench" "$PREFIX/examples"
for b in "${BINS[@]}"; do
  cp "$BUILD/$b" "$PREFIX/$b"
done

# The libraries ldd resolves for the binaries, less the C/C++ runtimes and the CUDA libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libcudart\.|libcublas|libcudnn|libnccl|libcuda\.)'
while read -r name path; do
  [[ -n "$path" && -f "$path" ]] || continue
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$PREFIX/lib/$name"
done < <(for b in "${BINS[@]}"; do LD_LIBRARY_PATH="$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$BUILD/$b"; done |
         awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
if ldd "$BUILD/tests/spire_tests" | grep -q 'not found'; then
  die "$BUILD/tests/spire_tests has unresolved libraries here: $(ldd "$BUILD/tests/spire_tests" | grep 'not found' | tr '\n' ' ')"
fi
strip --strip-unneeded "$PREFIX"/lib/*.so* "${BINS[@]/#/$PREFIX/}" 2>/dev/null || true

if [[ -d "$REPO/../shared/data/mnist" ]]; then
  mkdir -p "$PREFIX/data/mnist"
  cp -L "$REPO/../shared/data/mnist/"*.gz "$PREFIX/data/mnist/"
fi
if [[ -f "$REPO/../shared/data/shakespeare/shakespeare.txt" ]]; then
  mkdir -p "$PREFIX/data/shakespeare"
  cp -L "$REPO/../shared/data/shakespeare/shakespeare.txt" "$PREFIX/data/shakespeare/"
fi

{
  echo "commit $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "build $BUILD_TYPE, CUDA architectures $ARCHS, $("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")" --version | tail -1)"
  echo "packed $(date -u '+%F %H:%M UTC') on $(uname -n)"
} >"$PREFIX/PACKED.txt"

size_kib="$(du -sk "$PREFIX" | cut -f1)"
echo "pack_gpu_build: $PREFIX: $((size_kib / 1024)) MiB ($(find "$PREFIX" -type f | wc -l) files)"
cat "$PREFIX/PACKED.txt"
(( size_kib <= 56 * 1024 )) || die "$PREFIX is over 56 MiB: too large to travel with the working tree"
echo "Use: SPIRE_PREBUILT=$PREFIX bench/gpu_check.sh test bench torch memcheck"

#!/usr/bin/env bash
# GPU check of Spire's CUDA backend, for a machine with an NVIDIA GPU (H100/H200):
#   build     configure + build Release with -DSPIRE_CUDA=ON (CUDA architectures 90 unless
#             CUDA_ARCHITECTURES says otherwise), -j$(nproc): the test binary and the GPU
#             benchmarks (Ninja when there is one; ccache when CMake finds it)
#   test      the GPU tests: spire_tests --gtest_filter="$GPU_TEST_FILTER"
#   memcheck  the tests of $MEMCHECK_FILTER (kept short) once under
#             compute-sanitizer --tool memcheck
#   bench     build/.../bench/gpu_kernels, gpu_train_step, and allreduce_bandwidth on the
#             visible GPUs with Spire's ring and with NCCL, and trainer_throughput.sh
#             (MNIST training on 1..N GPUs, replicated) (appended to gpu_train_step.txt)
#             and resnet_vs_torch.sh --device gpu (the ResNet-50 and ResNet-20 training steps
#             of Spire and PyTorch on the GPU, alternating; appended to gpu_train_step.txt),
#             gpt_vs_torch.sh --device gpu (nanoGPT's shakespeare_char step, f32 and bf16)
#   torch     bench/mnist_step_torch.py (the same training step in PyTorch)
# then prints a summary and the benchmark tables, the kernel table last. The steps run in the
# order test, bench, torch, memcheck (the slowest last).
#
# Usage: bench/gpu_check.sh [build] [test] [memcheck] [bench] [torch]
#   No argument runs everything. The build runs whenever test, memcheck or bench is asked (it is
#   incremental: quick when the build directory is up to date). Each step has a time limit (below);
#   where one command may run 10 minutes at most, split the work, e.g.
#     bench/gpu_check.sh build test memcheck     then     bench/gpu_check.sh bench torch
#   (the second call reuses the build directory while the machine keeps it).
#
# Without a visible GPU (nvidia-smi missing, failing or listing none) it says why after the build
# and exits 0 (1 when the build failed). Otherwise the exit status is 1 when the build, a GPU test,
# memcheck or a benchmark failed (or a filter matched no test), else 0; a missing PyTorch or
# compute-sanitizer is reported as skipped, not failed.
#
# Logs (at most 8 files, so that a runner collecting $OUT takes them all): build.log, tests.log,
# memcheck.log, gpu_kernels.txt, gpu_kernels.csv, gpu_train_step.txt, torch_step.txt, summary.txt,
# in $OUT when it is set, else in build/gpu_check/.
#
# Dependencies a bare GPU machine may lack (see bench/README.md, "On a GPU machine without network
# access"): when <repo>/.gpu_deps exists (made by scripts/pack_gpu_deps.sh: GoogleTest, nlohmann_json,
# zlib, libjpeg, libpng), the configure is pointed at it. When the CUDA toolkit has no cuDNN (cudnn.h and
# libcudnn.so), the pip package nvidia-cudnn-cu13 of $PYTHON, python3 or /opt/torch/.venv is used
# (SPIRE_CUDNN_INCLUDE_DIR/SPIRE_CUDNN_LIBRARY), and its lib/ (and the toolkit's, and the pip
# cuBLAS's where the toolkit has no libcublas) goes on LD_LIBRARY_PATH for the build (gtest
# discovery runs the test binary), the tests and the benchmarks, not for the PyTorch script.
# Arguments in SPIRE_CMAKE_ARGS come last and win; naming SPIRE_CUDNN_* there skips the search.
#
# Prebuilt: with SPIRE_PREBUILT=DIR (a folder made here by scripts/pack_gpu_build.sh from a CUDA
# build of this machine) nothing is compiled: DIR is the build directory, DIR/lib goes on
# LD_LIBRARY_PATH, and the build step reports DIR/PACKED.txt. For a machine with minutes to spare.
#
# Environment (all optional):
#   SPIRE_PREBUILT       a packed build to run instead of building (above)
#   BUILD_DIR            build directory (default build/gpu-release in the repository)
#   CUDA_ARCHITECTURES   CMAKE_CUDA_ARCHITECTURES (default: $CMAKE_CUDA_ARCHITECTURES, else 90)
#   JOBS                 build jobs (default: nproc)
#   SPIRE_CMAKE_ARGS     extra configure arguments, word-split (e.g. -DCMAKE_PREFIX_PATH=/deps)
#   GPU_TEST_FILTER, MEMCHECK_FILTER   gtest filters (defaults just below)
#   MEMCHECK_ENV         VAR=value words set for the memcheck run only (default
#                        SPIRE_CUDA_NO_CACHING=1: one cudaMalloc per buffer, so memcheck
#                        sees every buffer's bounds)
#   GPU_KERNELS_ARGS, TRAIN_STEP_ARGS, TORCH_ARGS, RESNET_ARGS, GPT_ARGS   extra arguments (e.g. --quick)
#   PYTHON               interpreter for the PyTorch script (default python3)
#   TEST_TIMEOUT, MEMCHECK_TIMEOUT, BENCH_TIMEOUT, TORCH_TIMEOUT   seconds per step
set -u -o pipefail

# ---- settings ---------------------------------------------------------------------------
# The GPU test suites (CudaCoverage, CudaParity, FusedApplyGpu, Gpu, GpuCollectives, ParityCases,
# Placement) and the short memcheck subset.
GPU_TEST_FILTER="${GPU_TEST_FILTER:-Cuda*:*Gpu*:*Parity*:Placement*}"
# (Gpu.OutOfMemoryIsAClearError is left out of memcheck: the failed cudaMalloc it provokes on
# purpose is an API error to compute-sanitizer.)
MEMCHECK_FILTER="${MEMCHECK_FILTER:-CudaParity.*:Gpu.*:-Gpu.OutOfMemoryIsAClearError}"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREBUILT="${SPIRE_PREBUILT:-}"
if [[ -n "$PREBUILT" ]]; then
  [[ -d "$PREBUILT" ]] || { echo "gpu_check: SPIRE_PREBUILT=$PREBUILT is not a folder" >&2; exit 2; }
  BUILD_DIR="$(cd "$PREBUILT" && pwd)"
fi
BUILD_DIR="${BUILD_DIR:-$REPO/build/gpu-release}"
if [[ -n "${OUT:-}" ]]; then LOG_DIR="$OUT"; else LOG_DIR="$REPO/build/gpu_check"; fi
CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-${CMAKE_CUDA_ARCHITECTURES:-90}}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
PYTHON="${PYTHON:-python3}"
TEST_TIMEOUT="${TEST_TIMEOUT:-300}"
MEMCHECK_TIMEOUT="${MEMCHECK_TIMEOUT:-300}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-300}"
TORCH_TIMEOUT="${TORCH_TIMEOUT:-240}"

BUILD_LOG="$LOG_DIR/build.log"
TESTS_LOG="$LOG_DIR/tests.log"
MEMCHECK_LOG="$LOG_DIR/memcheck.log"
KERNELS_OUT="$LOG_DIR/gpu_kernels.txt"
KERNELS_CSV="$LOG_DIR/gpu_kernels.csv"
TRAIN_OUT="$LOG_DIR/gpu_train_step.txt"
TORCH_OUT="$LOG_DIR/torch_step.txt"
SUMMARY="$LOG_DIR/summary.txt"
TEST_BIN="$BUILD_DIR/tests/spire_tests"

export PYTHONUNBUFFERED=1

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---- which steps --------------------------------------------------------------------------
want_build=0 want_test=0 want_memcheck=0 want_bench=0 want_torch=0
if [[ $# -eq 0 ]]; then
  want_build=1 want_test=1 want_memcheck=1 want_bench=1 want_torch=1
fi
for arg in "$@"; do
  case "$arg" in
    build) want_build=1 ;;
    test) want_test=1 ;;
    memcheck) want_memcheck=1 ;;
    bench) want_bench=1 ;;
    torch) want_torch=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check: unknown step '$arg' (build, test, memcheck, bench, torch; see --help)" >&2
       exit 2 ;;
  esac
done
if (( want_test || want_memcheck || want_bench )); then want_build=1; fi

mkdir -p "$LOG_DIR" || { echo "gpu_check: cannot create $LOG_DIR" >&2; exit 1; }

FAIL=0
STATUS=()  # "step: status" lines for the summary
status() { STATUS+=("$(printf '%-9s %s' "$1:" "$2")"); echo "gpu_check: $1: $2"; }
failed() { FAIL=1; status "$1" "$2"; }

# Runs "$@" under a time limit of $1 seconds (without one where `timeout` is missing).
limited() {
  local secs="$1"
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout -k 10 "$secs" "$@"
  else
    "$@"
  fi
}

timed_out() { [[ $1 -eq 124 || $1 -eq 137 ]]; }

# Prints the number of tests a gtest filter selects; fails (saying why on stderr) when the test
# binary cannot list them (e.g. it does not start).
count_tests() {
  local list
  if ! list="$("$TEST_BIN" --gtest_filter="$1" --gtest_list_tests 2>&1)"; then
    echo "gpu_check: $TEST_BIN --gtest_list_tests failed: $(tail -3 <<<"$list" | tr '\n' ' ')" >&2
    return 1
  fi
  grep -c '^  ' <<<"$list" || true
}

# gtest's closing lines ("[  PASSED  ] 12 tests." ...) joined on one line.
gtest_totals() {
  grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$1" | sed -E 's/^\[ +([A-Z]+) +\] /\1 /; s/[,.].*$//' |
    paste -sd ';' - | sed 's/;/; /g'
}

NO_GPU_REASON=""
gpu_visible() {
  local out
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    NO_GPU_REASON="nvidia-smi is not on PATH (no NVIDIA driver here)"
    return 1
  fi
  if ! out="$(nvidia-smi -L 2>&1)"; then
    NO_GPU_REASON="nvidia-smi failed: $(echo "$out" | head -3 | tr '\n' ' ')"
    return 1
  fi
  if ! grep -q '^GPU ' <<<"$out"; then
    NO_GPU_REASON="nvidia-smi lists no GPU: $(echo "$out" | head -3 | tr '\n' ' ')"
    return 1
  fi
  return 0
}

find_nvcc() {
  if command -v nvcc >/dev/null 2>&1; then command -v nvcc
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then echo /usr/local/cuda/bin/nvcc
  fi
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [[ -n "$c" && -x "$c" ]]; then echo "$c"; return; fi
  done
}

environment() {
  echo "== gpu_check environment ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
  echo "repository: $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
  echo "build dir: $BUILD_DIR; logs: $LOG_DIR; jobs: $JOBS; CUDA architectures: $CUDA_ARCHITECTURES"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
      --format=csv,noheader 2>&1 | head -4
  else
    echo "nvidia-smi: not found"
  fi
  local nvcc
  nvcc="$(find_nvcc)"
  echo "nvcc: ${nvcc:-not found} $([[ -n "$nvcc" ]] && "$nvcc" --version | tail -1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo 'not found')"
  echo "c++: $(c++ --version 2>/dev/null | head -1 || echo 'not found')"
  echo "ninja: $(command -v ninja || echo 'not found'); ccache: $(command -v ccache || echo 'not found')"
  local cs
  cs="$(find_sanitizer || true)"
  echo "compute-sanitizer: ${cs:-not found}"
}

# ---- dependencies ---------------------------------------------------------------------------
DEPS_ARGS=()   # configure arguments for the packed prefix and a pip cuDNN
DEPS_NOTES=()  # what was chosen, for the build log
ORIG_LD_SET=0 ORIG_LD=""
if [[ -n "${LD_LIBRARY_PATH+x}" ]]; then ORIG_LD_SET=1 ORIG_LD="$LD_LIBRARY_PATH"; fi

# Prefixes $1 to LD_LIBRARY_PATH (exported) unless it is there already.
add_ld_path() {
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$1:"*) ;;
    *) export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

# Prints the first folder of an installed pip package "nvidia.<name>" (a namespace package: no
# __file__) that holds the glob $2 (relative to it), trying $PYTHON, python3 and PyTorch's venv.
pip_nvidia_dir() {
  local py code
  # shellcheck disable=SC2016  # the $ are Python's
  code='import glob, os, sys
try:
    import importlib
    m = importlib.import_module("nvidia." + sys.argv[1])
    dirs = list(m.__path__)
except Exception:
    dirs = []
for d in dirs:
    if glob.glob(os.path.join(d, sys.argv[2])):
        print(d)
        break'
  local out
  for py in "$PYTHON" python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    out="$("$py" -c "$code" "$1" "$2" 2>/dev/null | head -1)" || true
    if [[ -n "$out" && -d "$out" ]]; then echo "$out"; return 0; fi
  done
  return 1
}

# Fills DEPS_ARGS and LD_LIBRARY_PATH (see the header).
setup_deps() {
  local deps="$REPO/.gpu_deps"
  if [[ -d "$deps" ]]; then
    DEPS_ARGS+=(-DCMAKE_PREFIX_PATH="$deps" -DZLIB_ROOT="$deps")
    # The packed zlib is libz.so (Debian's libz.a is not position-independent, so it cannot go
    # into libspire.so): name it, so that no libz.a elsewhere is preferred.
    local z
    for z in "$deps/lib/libz.so" "$deps/lib/libz.a"; do
      if [[ -f "$z" ]]; then
        DEPS_ARGS+=(-DZLIB_INCLUDE_DIR="$deps/include" -DZLIB_LIBRARY="$z")
        break
      fi
    done
    # The image decoders' libjpeg and libpng, packed the same way (shared libraries).
    if [[ -f "$deps/lib/libjpeg.so" && -f "$deps/include/jpeglib.h" ]]; then
      DEPS_ARGS+=(-DJPEG_INCLUDE_DIR="$deps/include" -DJPEG_LIBRARY="$deps/lib/libjpeg.so")
    fi
    if [[ -f "$deps/lib/libpng.so" && -f "$deps/include/png.h" ]]; then
      DEPS_ARGS+=(-DPNG_PNG_INCLUDE_DIR="$deps/include" -DPNG_LIBRARY="$deps/lib/libpng.so")
    fi
    DEPS_NOTES+=("packed dependencies: $deps ($(du -sh "$deps" 2>/dev/null | cut -f1))")
  else
    DEPS_NOTES+=("packed dependencies: none ($deps absent; scripts/pack_gpu_deps.sh makes it)")
  fi

  local nvcc cuda_root="" d
  nvcc="$(find_nvcc)"
  if [[ -n "$nvcc" ]]; then cuda_root="$(dirname "$(dirname "$(readlink -f "$nvcc")")")"; fi
  local inc_dirs=() lib_dirs=()
  if [[ -n "$cuda_root" ]]; then
    inc_dirs+=("$cuda_root/include" "$cuda_root/targets/x86_64-linux/include")
    lib_dirs+=("$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib")
  fi
  # find_path/find_library also search the system folders.
  inc_dirs+=(/usr/include /usr/include/x86_64-linux-gnu /usr/local/include)
  lib_dirs+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)

  local have_h=0 have_lib=0 have_cublas=0 toolkit_lib=""
  for d in "${inc_dirs[@]}"; do [[ -f "$d/cudnn.h" ]] && have_h=1; done
  for d in "${lib_dirs[@]}"; do
    [[ -e "$d/libcudnn.so" ]] && have_lib=1
    if compgen -G "$d/libcublas.so*" >/dev/null; then
      have_cublas=1
      [[ -z "$toolkit_lib" ]] && toolkit_lib="$d"
    fi
  done

  if [[ "${SPIRE_CMAKE_ARGS:-}" == *SPIRE_CUDNN_* ]]; then
    DEPS_NOTES+=("cuDNN: as SPIRE_CMAKE_ARGS says")
  elif (( have_h && have_lib )); then
    DEPS_NOTES+=("cuDNN: in the CUDA toolkit or the system folders")
  else
    local pkg lib=""
    if pkg="$(pip_nvidia_dir cudnn 'include/cudnn.h')"; then
      for lib in "$pkg/lib/libcudnn.so" "$pkg/lib/libcudnn.so.9" $(compgen -G "$pkg/lib/libcudnn.so.[0-9]*" || true); do
        [[ -f "$lib" ]] && break
        lib=""
      done
    fi
    if [[ -n "$lib" ]]; then
      DEPS_ARGS+=(-DSPIRE_CUDNN_INCLUDE_DIR="$pkg/include" -DSPIRE_CUDNN_LIBRARY="$lib")
      add_ld_path "$pkg/lib"
      # cuDNN loads cuBLASLt by itself at run time: let it find the toolkit's.
      if [[ -n "$toolkit_lib" ]]; then add_ld_path "$toolkit_lib"; fi
      DEPS_NOTES+=("cuDNN: not in the CUDA toolkit (cudnn.h $( ((have_h)) && echo found || echo missing), libcudnn.so $( ((have_lib)) && echo found || echo missing)); using the pip package: $lib")
    else
      DEPS_NOTES+=("cuDNN: not in the CUDA toolkit and no pip package nvidia-cudnn-cu13 found (the configure will say)")
    fi
  fi

  if (( !have_cublas )); then
    local cublas
    if cublas="$(pip_nvidia_dir cublas 'lib/libcublas.so*')"; then
      add_ld_path "$cublas/lib"
      DEPS_NOTES+=("cuBLAS: not in the CUDA toolkit; $cublas/lib put on LD_LIBRARY_PATH")
    elif cublas="$(pip_nvidia_dir cu13 'lib/libcublas.so*')"; then
      add_ld_path "$cublas/lib"
      DEPS_NOTES+=("cuBLAS: not in the CUDA toolkit; $cublas/lib put on LD_LIBRARY_PATH")
    else
      DEPS_NOTES+=("cuBLAS: not in the CUDA toolkit and no pip package found")
    fi
  fi
  # NCCL (libnccl.so.2): the toolkit's, else the pip package nvidia-nccl-cu13's.
  local have_nccl=0 nccl
  for d in "${lib_dirs[@]}"; do compgen -G "$d/libnccl.so*" >/dev/null && have_nccl=1; done
  if (( !have_nccl )); then
    if nccl="$(pip_nvidia_dir nccl 'lib/libnccl.so*')"; then
      add_ld_path "$nccl/lib"
      DEPS_NOTES+=("NCCL: not in the CUDA toolkit; $nccl/lib put on LD_LIBRARY_PATH")
    else
      DEPS_NOTES+=("NCCL: not in the CUDA toolkit and no pip package found")
    fi
  fi
  if [[ -n "$PREBUILT" ]]; then add_ld_path "$BUILD_DIR/lib"; fi
  if [[ "${LD_LIBRARY_PATH:-}" != "$ORIG_LD" ]]; then
    DEPS_NOTES+=("LD_LIBRARY_PATH (build, tests, benchmarks): $LD_LIBRARY_PATH")
  fi
}

# ---- build ----------------------------------------------------------------------------------
TESTS_BUILT=0
# The build step of SPIRE_PREBUILT: checks that the packed binaries start.
use_prebuilt() {
  environment >"$BUILD_LOG" 2>&1
  local note
  for note in ${DEPS_NOTES[@]+"${DEPS_NOTES[@]}"}; do echo "$note"; done >>"$BUILD_LOG"
  { echo "== prebuilt: $BUILD_DIR"; cat "$BUILD_DIR/PACKED.txt" 2>/dev/null; } >>"$BUILD_LOG"
  if [[ ! -x "$TEST_BIN" ]]; then
    failed build "FAILED: prebuilt $BUILD_DIR has no tests/spire_tests"
    return 1
  fi
  # The packed binaries' RUNPATH names this machine's folders: a library ldd does not find (the
  # CUDA runtime, cuBLAS, cuDNN, NCCL) is looked for in the toolkit, the pip packages nvidia.*
  # and, last, the whole file system; its folder goes on LD_LIBRARY_PATH.
  local lib dir found nv_dirs nvcc cuda_root=""
  nvcc="$(find_nvcc)"
  if [[ -n "$nvcc" ]]; then cuda_root="$(dirname "$(dirname "$(readlink -f "$nvcc")")")"; fi
  nv_dirs="$(for py in "$PYTHON" python3 /opt/torch/.venv/bin/python3; do
               command -v "$py" >/dev/null 2>&1 || continue
               "$py" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(p, "*", "lib"))): print(d)' 2>/dev/null
             done | sort -u)"
  for lib in $(ldd "$TEST_BIN" "$BUILD_DIR"/bench/* "$BUILD_DIR"/examples/* 2>/dev/null |
               awk '/not found/ { print $1 }' | sort -u); do
    found=""
    for dir in ${cuda_root:+"$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib"} $nv_dirs; do
      if [[ -e "$dir/$lib" ]]; then found="$dir"; break; fi
    done
    if [[ -z "$found" ]]; then
      found="$(limited 30 find / -xdev -name "$lib" -not -path '/proc/*' 2>/dev/null | head -1)"
      found="${found:+$(dirname "$found")}"
    fi
    if [[ -n "$found" ]]; then
      add_ld_path "$found"
      echo "== $lib: $found (put on LD_LIBRARY_PATH)" >>"$BUILD_LOG"
    fi
  done
  local missing
  missing="$(ldd "$TEST_BIN" "$BUILD_DIR"/bench/* "$BUILD_DIR"/examples/* 2>&1 | grep 'not found' | sort -u | tr -s ' \t\n' ' ')"
  echo "== LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}" >>"$BUILD_LOG"
  if [[ -n "$missing" ]]; then
    echo "== ldd: missing $missing" >>"$BUILD_LOG"
    failed build "FAILED: prebuilt binaries miss libraries: $missing"
    return 1
  fi
  TESTS_BUILT=1
  status build "prebuilt: $(head -2 "$BUILD_DIR/PACKED.txt" 2>/dev/null | paste -sd ';' -)"
}

do_build() {
  environment >"$BUILD_LOG" 2>&1
  local note
  for note in ${DEPS_NOTES[@]+"${DEPS_NOTES[@]}"}; do echo "$note"; done >>"$BUILD_LOG"
  local nvcc
  nvcc="$(find_nvcc)"
  if [[ -z "$nvcc" ]]; then
    failed build "FAILED: nvcc not found (neither on PATH nor /usr/local/cuda/bin)"
    return 1
  fi
  if ! command -v cmake >/dev/null 2>&1; then
    failed build "FAILED: cmake not found"
    return 1
  fi
  local gen=()
  # A generator can only be chosen for a new build directory.
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
  local extra=()
  # shellcheck disable=SC2206  # word splitting of SPIRE_CMAKE_ARGS is intended
  extra=(${SPIRE_CMAKE_ARGS:-})
  local args=(-S "$REPO" -B "$BUILD_DIR" ${gen[@]+"${gen[@]}"} -DCMAKE_BUILD_TYPE=Release
              -DSPIRE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"
              -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHITECTURES"
              -DSPIRE_BUILD_BENCH=ON -DSPIRE_BUILD_EXAMPLES=ON -DSPIRE_MPI=OFF
              ${DEPS_ARGS[@]+"${DEPS_ARGS[@]}"})
  local t0=$SECONDS
  echo "== configure: cmake ${args[*]} -DSPIRE_BUILD_TESTS=ON ${extra[*]}" >>"$BUILD_LOG"
  if cmake "${args[@]}" -DSPIRE_BUILD_TESTS=ON ${extra[@]+"${extra[@]}"} >>"$BUILD_LOG" 2>&1; then
    TESTS_BUILT=1
  else
    # Most likely GoogleTest is missing: build the benchmarks at least.
    echo "== configure with the tests failed; again without them" >>"$BUILD_LOG"
    if ! cmake "${args[@]}" -DSPIRE_BUILD_TESTS=OFF ${extra[@]+"${extra[@]}"} >>"$BUILD_LOG" 2>&1; then
      failed build "FAILED: configure (see $BUILD_LOG)"
      tail -25 "$BUILD_LOG"
      return 1
    fi
    echo "gpu_check: configure with the tests failed (GoogleTest missing? see $BUILD_LOG); building without them"
  fi
  local targets=()
  if (( TESTS_BUILT )) && (( want_test || want_memcheck || !want_bench )); then targets+=(spire_tests); fi
  if (( want_bench || !(want_test || want_memcheck) )) || (( ${#targets[@]} == 0 )); then
    targets+=(gpu_kernels gpu_train_step allreduce_bandwidth mnist_convnet)
  fi
  echo "== build: cmake --build $BUILD_DIR -j $JOBS --target ${targets[*]}" >>"$BUILD_LOG"
  echo "gpu_check: building ${targets[*]} in $BUILD_DIR with $JOBS jobs (log: $BUILD_LOG)..."
  if ! cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}" >>"$BUILD_LOG" 2>&1; then
    failed build "FAILED after $((SECONDS - t0)) s (see $BUILD_LOG)"
    grep -E 'error|Error' "$BUILD_LOG" | head -30
    tail -15 "$BUILD_LOG"
    return 1
  fi
  local note=""
  if (( !TESTS_BUILT )); then
    note="; the tests were NOT configured (see $BUILD_LOG)"
    if (( want_test || want_memcheck )); then FAIL=1; fi
  fi
  status build "ok in $((SECONDS - t0)) s (Release, SPIRE_CUDA=ON, archs $CUDA_ARCHITECTURES, ${targets[*]})$note"
  return 0
}

# ---- tests ----------------------------------------------------------------------------------
do_tests() {
  rm -f "$TESTS_LOG"
  if (( !TESTS_BUILT )); then
    failed tests "NOT RUN: the tests were not configured (see $BUILD_LOG)"
    return
  fi
  if [[ ! -x "$TEST_BIN" ]]; then
    failed tests "NOT RUN: $TEST_BIN was not built"
    return
  fi
  local n rc totals
  if ! n="$(count_tests "$GPU_TEST_FILTER")"; then
    failed tests "FAILED: the test binary cannot list its tests (see above)"
    return
  fi
  if [[ "$n" -eq 0 ]]; then
    failed tests "FAILED: the filter '$GPU_TEST_FILTER' matches no test (set GPU_TEST_FILTER)"
    return
  fi
  echo "gpu_check: running $n GPU tests ('$GPU_TEST_FILTER', log: $TESTS_LOG)..."
  limited "$TEST_TIMEOUT" "$TEST_BIN" --gtest_filter="$GPU_TEST_FILTER" --gtest_color=no \
    >"$TESTS_LOG" 2>&1
  rc=$?
  totals="$(gtest_totals "$TESTS_LOG")"
  if timed_out "$rc"; then
    failed tests "TIMED OUT after ${TEST_TIMEOUT} s ($n tests selected; see $TESTS_LOG)"
  elif [[ $rc -ne 0 ]]; then
    failed tests "FAILED (exit $rc; $totals; filter '$GPU_TEST_FILTER')"
    grep -E '^\[  FAILED  \] [A-Za-z_]' "$TESTS_LOG" | sort -u | head -20
  else
    local warn=""
    if grep -qE '^\[  SKIPPED \] [0-9]' "$TESTS_LOG"; then warn=" (tests skipped on a GPU machine: check why)"; fi
    status tests "passed ($totals; filter '$GPU_TEST_FILTER')$warn"
  fi
}

# ---- memcheck -------------------------------------------------------------------------------
do_memcheck() {
  rm -f "$MEMCHECK_LOG"
  local cs n rc errors
  cs="$(find_sanitizer || true)"
  if [[ -z "$cs" ]]; then
    status memcheck "SKIPPED: compute-sanitizer not found"
    return
  fi
  if (( !TESTS_BUILT )) || [[ ! -x "$TEST_BIN" ]]; then
    failed memcheck "NOT RUN: $TEST_BIN was not built"
    return
  fi
  if ! n="$(count_tests "$MEMCHECK_FILTER")"; then
    failed memcheck "FAILED: the test binary cannot list its tests (see above)"
    return
  fi
  if [[ "$n" -eq 0 ]]; then
    failed memcheck "FAILED: the filter '$MEMCHECK_FILTER' matches no test (set MEMCHECK_FILTER)"
    return
  fi
  echo "gpu_check: running $n tests ('$MEMCHECK_FILTER') under compute-sanitizer memcheck (log: $MEMCHECK_LOG)..."
  # Note: Spire's caching allocator hands out parts of larger cudaMalloc blocks, so an overrun
  # that stays inside a cached block is invisible to memcheck.
  # shellcheck disable=SC2086  # MEMCHECK_ENV is a list of VAR=value words
  limited "$MEMCHECK_TIMEOUT" env ${MEMCHECK_ENV:-SPIRE_CUDA_NO_CACHING=1} "$cs" --tool memcheck --error-exitcode 86 \
    --print-limit 100 "$TEST_BIN" --gtest_filter="$MEMCHECK_FILTER" --gtest_color=no \
    >"$MEMCHECK_LOG" 2>&1
  rc=$?
  errors="$(grep -E 'ERROR SUMMARY' "$MEMCHECK_LOG" | tail -1 | sed -E 's/^=+ *//')"
  if timed_out "$rc"; then
    failed memcheck "TIMED OUT after ${MEMCHECK_TIMEOUT} s ($n tests; see $MEMCHECK_LOG)"
  elif [[ $rc -eq 86 ]]; then
    failed memcheck "FAILED: ${errors:-memory errors} (filter '$MEMCHECK_FILTER'; see $MEMCHECK_LOG)"
    grep -m 10 -E '^=+ (Invalid|Program hit|Out-of-range|Misaligned)' "$MEMCHECK_LOG"
  elif [[ $rc -ne 0 ]]; then
    failed memcheck "FAILED: tests failed under the sanitizer (exit $rc; $(gtest_totals "$MEMCHECK_LOG"); ${errors:-no error summary})"
  else
    status memcheck "clean (${errors:-no error summary}; $(gtest_totals "$MEMCHECK_LOG"); filter '$MEMCHECK_FILTER')"
  fi
}

# ---- benchmarks -----------------------------------------------------------------------------
# run_bench NAME OUTPUT_FILE COMMAND...
run_bench() {
  local name="$1" out="$2" rc
  shift 2
  if [[ ! -x "$1" ]]; then
    failed "$name" "NOT RUN: $1 was not built"
    return
  fi
  echo "gpu_check: running $name (output: $out)..."
  limited "$BENCH_TIMEOUT" "$@" >"$out" 2>&1
  rc=$?
  if timed_out "$rc"; then
    failed "$name" "TIMED OUT after ${BENCH_TIMEOUT} s (see $out)"
  elif [[ $rc -ne 0 ]]; then
    failed "$name" "FAILED (exit $rc; see $out)"
  elif grep -q 'skipped:' "$out"; then
    failed "$name" "did not run: $(grep -m1 'skipped:' "$out")"
  else
    status "$name" "ok"
  fi
}

do_bench() {
  rm -f "$KERNELS_OUT" "$KERNELS_CSV" "$TRAIN_OUT"
  # shellcheck disable=SC2086  # the *_ARGS variables are word lists
  run_bench gpu_kernels "$KERNELS_OUT" "$BUILD_DIR/bench/gpu_kernels" --csv "$KERNELS_CSV" ${GPU_KERNELS_ARGS:-}
  # shellcheck disable=SC2086
  run_bench train_step "$TRAIN_OUT" "$BUILD_DIR/bench/gpu_train_step" ${TRAIN_STEP_ARGS:-}
  # Allreduce bus bandwidth on 2..N GPUs (1 when there is one: a copy), Spire's ring and NCCL;
  # appended to the train-step output (at most 8 log files travel back from a device machine).
  local ngpu devices="" k tmp="$LOG_DIR/allreduce.tmp"
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  for ((k = 2; k <= ngpu; k *= 2)); do devices+="${devices:+,}$k"; done
  [[ -n "$devices" ]] || devices=1
  for comm in ring nccl; do
    # shellcheck disable=SC2086
    run_bench "allreduce_$comm" "$tmp" "$BUILD_DIR/bench/allreduce_bandwidth" --device cuda \
      --devices "$devices" --communicator "$comm" ${ALLREDUCE_ARGS:-}
    { echo; cat "$tmp"; } >>"$TRAIN_OUT"
    rm -f "$tmp"
  done
  # The ResNet training steps, Spire against PyTorch on cuda:0 (PyTorch with the caller's
  # LD_LIBRARY_PATH, as do_torch).
  local torch_ld="${ORIG_LD}"
  (( ORIG_LD_SET )) || torch_ld="-"
  # shellcheck disable=SC2086
  TORCH_LD_LIBRARY_PATH="$torch_ld" run_bench "resnet_step" "$tmp" "$REPO/bench/resnet_vs_torch.sh" \
    --build "$BUILD_DIR" --no-build --device gpu ${RESNET_ARGS:-}
  { echo; cat "$tmp"; } >>"$TRAIN_OUT"
  rm -f "$tmp"
  # The GPT training step (nanoGPT's shakespeare_char, batch 64), f32 and bf16, beside PyTorch.
  # shellcheck disable=SC2086
  TORCH_LD_LIBRARY_PATH="$torch_ld" run_bench "gpt_step" "$tmp" "$REPO/bench/gpt_vs_torch.sh" \
    --build "$BUILD_DIR" --no-build --device gpu --configs shakespeare_char:64 --threads 4 --rounds 1 ${GPT_ARGS:-}
  { echo; cat "$tmp"; } >>"$TRAIN_OUT"
  rm -f "$tmp"
  # Multi-GPU training throughput of the main job (K = 1..N GPUs, replicated trainer).
  run_bench "trainer_throughput" "$tmp" "$REPO/bench/trainer_throughput.sh" --build "$BUILD_DIR" \
    --gpus "$(( ngpu > 0 ? ngpu : 1 ))" --trainers replicated
  { echo; cat "$tmp"; } >>"$TRAIN_OUT"
  rm -f "$tmp"
}

do_torch() {
  rm -f "$TORCH_OUT"
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    status torch "SKIPPED: $PYTHON not found"
    return
  fi
  echo "gpu_check: running bench/mnist_step_torch.py (output: $TORCH_OUT)..."
  local rc
  # PyTorch runs with the caller's LD_LIBRARY_PATH: the folders added for Spire could
  # otherwise replace the CUDA libraries PyTorch was built with.
  local ld_env=(-u LD_LIBRARY_PATH)
  if (( ORIG_LD_SET )); then ld_env=(LD_LIBRARY_PATH="$ORIG_LD"); fi
  # shellcheck disable=SC2086
  limited "$TORCH_TIMEOUT" env "${ld_env[@]}" "$PYTHON" "$REPO/bench/mnist_step_torch.py" ${TORCH_ARGS:-} \
    >"$TORCH_OUT" 2>&1
  rc=$?
  if timed_out "$rc"; then
    failed torch "TIMED OUT after ${TORCH_TIMEOUT} s (see $TORCH_OUT)"
  elif [[ $rc -ne 0 ]]; then
    failed torch "FAILED (exit $rc; see $TORCH_OUT)"
  elif grep -q 'skipped:' "$TORCH_OUT"; then
    status torch "SKIPPED: $(grep -m1 'skipped:' "$TORCH_OUT" | sed 's/^mnist_step_torch: skipped: //')"
    torch_skipped=1
  else
    status torch "ok"
  fi
}

# ---- report ---------------------------------------------------------------------------------
# Keeps each log under the 16 MiB a runner collects per file (its last 15 MiB).
cap_logs() {
  local f limit=$((15 * 1024 * 1024))
  for f in "$BUILD_LOG" "$TESTS_LOG" "$MEMCHECK_LOG" "$KERNELS_OUT" "$TRAIN_OUT" "$TORCH_OUT"; do
    if [[ -f "$f" ]] && (( $(stat -c %s "$f") > limit )); then
      tail -c "$limit" "$f" >"$f.cut" && { echo "[gpu_check: cut to its last 15 MiB]"; cat "$f.cut"; } >"$f"
      rm -f "$f.cut"
    fi
  done
}

# The table of a benchmark's output (from its "## ... table" line), else the output's end.
print_table() {
  local file="$1" marker="$2"
  [[ -f "$file" ]] || return 0
  echo
  if grep -q "^## $marker table" "$file"; then
    sed -n "/^## $marker table/,\$p" "$file"
  else
    echo "== $marker: no table; last lines of $file:"
    tail -20 "$file"
  fi
}

finish() {
  cap_logs
  {
    echo
    echo "==== gpu_check summary ($(date -u '+%Y-%m-%d %H:%M:%S UTC'); logs in $LOG_DIR) ===="
    local line
    for line in "${STATUS[@]}"; do echo "$line"; done
    if (( FAIL )); then echo "RESULT: FAILED"
    elif [[ -n "$NO_GPU_REASON" ]]; then
      echo "RESULT: ok (no GPU: $( (( want_build )) && echo 'only the build was checked' || echo 'nothing was checked'))"
    else echo "RESULT: ok"; fi
  } | tee "$SUMMARY"
  if (( ran_torch && !torch_skipped )); then print_table "$TORCH_OUT" mnist_step_torch; fi
  if (( ran_bench )); then
    print_table "$TRAIN_OUT" gpu_train_step
    print_table "$KERNELS_OUT" gpu_kernels  # last
  fi
  exit "$FAIL"
}

# ---- main -----------------------------------------------------------------------------------
ran_bench=0 ran_torch=0 torch_skipped=0
build_ok=1
setup_deps
for note in ${DEPS_NOTES[@]+"${DEPS_NOTES[@]}"}; do echo "gpu_check: $note"; done
if [[ -n "$PREBUILT" ]]; then
  use_prebuilt || build_ok=0
elif (( want_build )); then
  do_build || build_ok=0
fi

if ! gpu_visible; then
  status gpu "none visible: $NO_GPU_REASON; $( (( want_build )) && echo 'built only, ')no test or benchmark was run"
  finish
fi
status gpu "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

if (( !build_ok )); then
  if (( want_test )); then failed tests "NOT RUN: the build failed"; fi
  if (( want_memcheck )); then failed memcheck "NOT RUN: the build failed"; fi
  if (( want_bench )); then failed bench "NOT RUN: the build failed"; fi
else
  if (( want_test )); then do_tests; fi
  if (( want_bench )); then do_bench; ran_bench=1; fi
fi
if (( want_torch )); then do_torch; ran_torch=1; fi
if (( build_ok && want_memcheck )); then do_memcheck; fi
finish

#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/) for a bounded time from the seed corpus
# the test suite wrote (FuzzSeeds.WriteSeedCorpora under
# $SPIRE_BUILD_DIR/fuzz_corpus, default build/). The targets are built with
# clang, AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/, or
# in an existing tree configured with -DSPIRE_BUILD_FUZZERS=ON
# (SPIRE_FUZZ_BUILD_DIR; CI uses its ASan tree). Exits non-zero on any
# finding (a crash, a sanitizer report, an uncaught exception other than
# spire::Error, a timeout or memory beyond the limit); the input that found
# it is kept under <fuzz build>/findings/.
#   FUZZ_SECONDS         seconds per target (default 60)
#   SPIRE_BUILD_DIR      the build whose tests wrote the seeds (default build)
#   SPIRE_FUZZ_BUILD_DIR a tree configured with -DSPIRE_BUILD_FUZZERS=ON (default: build-fuzz, made here)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
seeds=${SPIRE_BUILD_DIR:-build}/fuzz_corpus
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; the fuzz targets need clang (apt-get install clang libclang-rt-dev)"
  exit 1
fi
if [ ! -d "$seeds" ]; then
  echo "fuzz: no seed corpus in $seeds: run the test suite first (bash scripts/test.sh)"
  exit 1
fi
fb=${SPIRE_FUZZ_BUILD_DIR:-build-fuzz}
if [ -z "${SPIRE_FUZZ_BUILD_DIR:-}" ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSPIRE_CUDA=OFF -DSPIRE_BUILD_FUZZERS=ON \
    -DSPIRE_BUILD_TESTS=OFF -DSPIRE_BUILD_BENCH=OFF -DSPIRE_BUILD_EXAMPLES=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" >/dev/null
elif ! grep -q '^SPIRE_BUILD_FUZZERS:BOOL=ON' "$fb/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz: $fb is not configured with -DSPIRE_BUILD_FUZZERS=ON"
  exit 1
fi
cmake --build "$fb" -j2 --target graph_json_fuzzer safetensors_fuzzer checkpoint_index_fuzzer dataset_fuzzer image_fuzzer
mkdir -p "$fb/findings"
status=0
# Two targets at a time, one per core (libFuzzer runs one process): each
# gets its whole ${seconds}s of a core, in half the wall time of one by one.
run_target() {
  local target=$1 work=$fb/corpus/$1
  "$fb/fuzz/${target}_fuzzer" "$work" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$fb/findings/${target}-" \
    >"$fb/$target.log" 2>&1
}
report() {
  local target=$1 rc=$2
  echo "== fuzz $target: ${seconds}s"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $target FOUND A PROBLEM:"
    tail -40 "$fb/$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$fb/$target.log" | tr '\n' ' '
    echo
  fi
}
for pair in "graph_json safetensors" "checkpoint_index dataset" "image"; do
  set -- $pair
  for target in "$@"; do
    rm -rf "$fb/corpus/$target" && mkdir -p "$fb/corpus/$target"
    cp "$seeds/$target"/* "$fb/corpus/$target"/
    echo "== fuzz $target for ${seconds}s from $(ls "$fb/corpus/$target" | wc -l) seeds"
  done
  run_target "$1" & first=$!
  if [ $# -ge 2 ]; then run_target "$2" & second=$!; fi
  rc1=0; wait "$first" || rc1=$?
  report "$1" "$rc1"
  if [ $# -ge 2 ]; then
    rc2=0; wait "$second" || rc2=$?
    report "$2" "$rc2"
  fi
done
exit $status

#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, then runs each for a bounded
# time from the seed corpus the test suite wrote (FuzzSeeds.WriteSeedCorpora
# under $SPIRE_BUILD_DIR/fuzz_corpus, default build/). Exits non-zero on any
# finding (a crash, a sanitizer report, an uncaught exception other than
# spire::Error, a timeout or memory beyond the limit); the input that found
# it is kept under build-fuzz/findings/.
#   FUZZ_SECONDS   seconds per target (default 60)
#   SPIRE_BUILD_DIR the build whose tests wrote the seeds (default build)
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
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSPIRE_CUDA=OFF -DSPIRE_BUILD_FUZZERS=ON \
  -DSPIRE_BUILD_TESTS=OFF -DSPIRE_BUILD_BENCH=OFF -DSPIRE_BUILD_EXAMPLES=OFF \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" >/dev/null
cmake --build build-fuzz -j2 --target graph_json_fuzzer safetensors_fuzzer checkpoint_index_fuzzer dataset_fuzzer
mkdir -p build-fuzz/findings
status=0
# Two targets at a time, one per core (libFuzzer runs one process): each
# gets its whole ${seconds}s of a core, in half the wall time of one by one.
run_target() {
  local target=$1 work=build-fuzz/corpus/$1
  build-fuzz/fuzz/${target}_fuzzer "$work" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/${target}-" \
    >build-fuzz/$target.log 2>&1
}
report() {
  local target=$1 rc=$2
  echo "== fuzz $target: ${seconds}s"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $target FOUND A PROBLEM:"
    tail -40 build-fuzz/$target.log
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" build-fuzz/$target.log | tr '\n' ' '
    echo
  fi
}
for pair in "graph_json safetensors" "checkpoint_index dataset"; do
  set -- $pair
  for target in "$1" "$2"; do
    rm -rf "build-fuzz/corpus/$target" && mkdir -p "build-fuzz/corpus/$target"
    cp "$seeds/$target"/* "build-fuzz/corpus/$target"/
    echo "== fuzz $target for ${seconds}s from $(ls "build-fuzz/corpus/$target" | wc -l) seeds"
  done
  run_target "$1" & first=$!
  run_target "$2" & second=$!
  rc1=0; wait "$first" || rc1=$?
  rc2=0; wait "$second" || rc2=$?
  report "$1" "$rc1"
  report "$2" "$rc2"
done
exit $status

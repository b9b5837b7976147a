#!/usr/bin/env bash
# Does the input keep up with training? (issue 26.) Images/s of the ResNet example's
# training input pipelines alone (build/bench/image_pipeline: the pipelines of
# examples/resnet/resnet_data.h on synthetic files) beside the trainer's images/s for the
# model they feed (build/bench/resnet_step, fake data), at the same batch:
#   imagenet  JPEG decode + fbresnet_augmentor on 1, 2, ... data threads, batch 32,
#             beside ResNet-50 (224x224)
#   cifar10   cifar_augmentor (one thread, as the example runs it), batch 128, beside
#             ResNet-20 (32x32)
# The two run one after the other, alternating, never at once, and each keeps its best
# images/s. In training they share the machine's cores (the pipeline's threads beside
# the step's): the input then takes roughly 1/ratio of the time the pipeline was given,
# so a ratio well above 1 means it keeps up at a small cost, a ratio near or below 1
# that it cannot keep up without slowing the step.
#
# Usage: bench/pipeline_vs_step.sh [--build DIR] [--no-build] [--threads T]
#                                  [--data-threads LIST] [--configs LIST] [--rounds N]
#                                  [--prefetch N] [--quick]
#   --build DIR          build directory (default: build; configured CPU-only when it has
#                        no CMakeCache.txt); image_pipeline and resnet_step are built first
#   --no-build           do not build; DIR/bench/image_pipeline and resnet_step must exist
#   --threads T          the trainer's threads (default: the machine's CPUs)
#   --data-threads LIST  the imagenet pipeline's threads, comma-separated (default: 1,2)
#   --configs LIST       model:batch pairs (default: resnet50:32,resnet20:128); resnet50
#                        is fed by the imagenet pipeline, resnet20 by the cifar10 one
#   --rounds N           runs of each, alternating (default: 2)
#   --prefetch N         pipelines behind a PrefetchData of N batches (default: none)
#   --quick              a smoke test in seconds: one round, small batches
#                        (resnet50:2,resnet20:8 unless --configs), 8 files, 1 warm-up and
#                        2 timed batches, one trainer step; its figures mean nothing
#
# On a busy machine images/s fall with the share of the cores each process gets; the
# CPU time per image (all threads) does much less, so the table also gives the CPU
# ratio: the trainer's CPU ms per image / the pipeline's, the cores the step needs per
# core the input needs.
#
# Prints each run, a table, and ends with one line per pipeline configuration:
#   PIPELINE <dataset> <data_threads> <pipeline images/s> <trainer images/s> <ratio>
# (ratio = pipeline / trainer: above 1, the input alone is faster than training).
# Exit status 1 when a run failed or a figure is missing.
set -u
BUILD=build
DO_BUILD=1
THREADS=$(nproc)
DATA_THREADS=1,2
CONFIGS=""
ROUNDS=2
PREFETCH=0
QUICK=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --threads) THREADS=$2; shift 2 ;;
    --data-threads) DATA_THREADS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --prefetch) PREFETCH=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pipeline_vs_step: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if (( QUICK )); then
  ROUNDS=1
  [[ -n $CONFIGS ]] || CONFIGS=resnet50:2,resnet20:8
fi
[[ -n $CONFIGS ]] || CONFIGS=resnet50:32,resnet20:128
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "pipeline_vs_step: --rounds needs a positive integer" >&2; exit 2; }
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || { echo "pipeline_vs_step: --threads needs a positive integer" >&2; exit 2; }
[[ $PREFETCH =~ ^[0-9]+$ ]] || { echo "pipeline_vs_step: --prefetch needs an integer >= 0" >&2; exit 2; }
[[ $DATA_THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "pipeline_vs_step: --data-threads needs a list like 1,2" >&2; exit 2; }
for c in ${CONFIGS//,/ }; do
  [[ $c =~ ^resnet(20|50):[1-9][0-9]*$ ]] || { echo "pipeline_vs_step: bad configuration '$c' (resnet20:B or resnet50:B)" >&2; exit 2; }
done

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
PIPE="$BUILD/bench/image_pipeline"
STEP="$BUILD/bench/resnet_step"
if (( DO_BUILD )); then
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    cmake -S "$SRC" -B "$BUILD" -DSPIRE_CUDA=OFF >/dev/null || { echo "pipeline_vs_step: configuring $BUILD failed" >&2; exit 1; }
  fi
  cmake --build "$BUILD" -j"$(nproc)" --target image_pipeline resnet_step >/dev/null ||
    { echo "pipeline_vs_step: building image_pipeline and resnet_step failed" >&2; exit 1; }
fi
for b in "$PIPE" "$STEP"; do
  [[ -x $b ]] || { echo "pipeline_vs_step: $b not built (cmake --build $BUILD --target $(basename "$b"))" >&2; exit 1; }
done

# dataset MODEL: the pipeline that feeds it.
dataset() { [[ $1 == resnet50 ]] && echo imagenet || echo cifar10; }
# field LINE KEY: the value of KEY=... in a RESULT line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

FAILED=0
declare -A PIPE_IPS PIPE_CPU STEP_IPS STEP_CPU
# run_pipeline MODEL BATCH: one image_pipeline process, every data-thread count.
run_pipeline() {
  local model=$1 batch=$2 ds out line t ips
  ds=$(dataset "$model")
  local -a args=(--pipeline "$ds" --batch "$batch" --prefetch "$PREFETCH")
  [[ $ds == imagenet ]] && args+=(--data-threads "$DATA_THREADS")
  if (( QUICK )); then args+=(--files 8 --warmup 1 --batches 2); fi
  if ! out=$("$PIPE" "${args[@]}" 2>&1); then
    echo "pipeline_vs_step: image_pipeline ${args[*]} failed:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  grep -m1 '^image_pipeline: ' <<<"$out"
  if ! grep -q '^RESULT ' <<<"$out"; then
    echo "pipeline_vs_step: image_pipeline ${args[*]} printed no RESULT:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  while read -r line; do
    echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
    t=$(field "$line" data_threads)
    ips=$(field "$line" images_per_s)
    local key="$ds $batch $t"
    if awk -v a="${PIPE_IPS[$key]:-0}" -v b="$ips" 'BEGIN { exit !(b > a) }'; then
      PIPE_IPS[$key]=$ips PIPE_CPU[$key]=$(field "$line" cpu_ms_per_image)
    fi
  done < <(grep '^RESULT ' <<<"$out")
}
# run_step MODEL BATCH: one resnet_step process at the trainer's threads.
run_step() {
  local model=$1 batch=$2 out line
  local -a args=(--model "$model" --batch "$batch" --threads "$THREADS")
  if (( QUICK )); then args+=(--warmup 1 --windows 1 --steps 1)
  elif [[ $model == resnet20 ]]; then args+=(--warmup 3 --windows 5 --steps 3)
  else args+=(--warmup 2 --windows 3 --steps 1); fi
  if ! out=$("$STEP" "${args[@]}" 2>&1); then
    echo "pipeline_vs_step: resnet_step ${args[*]} failed:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  line=$(grep '^RESULT ' <<<"$out" | tail -1)
  if [[ -z $line ]]; then
    echo "pipeline_vs_step: resnet_step ${args[*]} printed no RESULT:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
  local key="$model $batch" ips
  ips=$(field "$line" images_per_s)
  if awk -v a="${STEP_IPS[$key]:-0}" -v b="$ips" 'BEGIN { exit !(b > a) }'; then
    STEP_IPS[$key]=$ips
    STEP_CPU[$key]=$(awk -v c="$(field "$line" cpu_ms_per_step)" -v b="$batch" 'BEGIN { printf "%.2f", c / b }')
  fi
}

echo "pipeline_vs_step: $(date -u '+%F %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
echo "  load average $(cut -d' ' -f1-3 /proc/loadavg); configurations $CONFIGS, trainer threads $THREADS," \
     "data threads $DATA_THREADS, prefetch $PREFETCH, $ROUNDS rounds$( (( QUICK )) && echo ', quick')"
START=$SECONDS
for c in ${CONFIGS//,/ }; do
  model=${c%%:*} batch=${c##*:}
  for (( r = 0; r < ROUNDS; ++r )); do
    run_pipeline "$model" "$batch"
    run_step "$model" "$batch"
  done
done
echo "pipeline_vs_step: $(( SECONDS - START )) s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
echo
FMT='%-9s %-9s %5s %12s %15s %15s %6s %13s %13s %9s\n'
printf "$FMT" model dataset batch "data threads" "pipeline img/s" "trainer img/s" ratio "pipeline CPU" "trainer CPU" "CPU ratio"
printf "$FMT" "" "" "" "" "" "($THREADS threads)" "" "ms/image" "ms/image" ""
LINES=()
for c in ${CONFIGS//,/ }; do
  model=${c%%:*} batch=${c##*:}
  ds=$(dataset "$model")
  threads=$DATA_THREADS
  [[ $ds == cifar10 ]] && threads=1
  for t in ${threads//,/ }; do
    pi=${PIPE_IPS["$ds $batch $t"]:-} si=${STEP_IPS["$model $batch"]:-}
    pc=${PIPE_CPU["$ds $batch $t"]:-} sc=${STEP_CPU["$model $batch"]:-}
    printf "$FMT" "$model" "$ds" "$batch" "$t" "${pi:--}" "${si:--}" "$(ratio "$pi" "$si")" "${pc:--}" "${sc:--}" "$(ratio "$sc" "$pc")"
    LINES+=("PIPELINE $ds $t ${pi:-nan} ${si:-nan} $(ratio "$pi" "$si")")
    if [[ -z $pi || -z $si ]]; then
      echo "pipeline_vs_step: no figure for $model / $ds, batch $batch, $t data threads" >&2
      FAILED=1
    fi
  done
done
echo
printf '%s\n' "${LINES[@]}"
exit $FAILED

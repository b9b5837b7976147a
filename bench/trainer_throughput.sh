#!/usr/bin/env bash
# MNIST convnet training throughput (images/s) of the trainers, from the main
# job itself (build/examples/mnist_convnet on the real MNIST data, batch 128
# per tower): SimpleTrainer at 1 and 2 kernel threads, then the replicated,
# parameter-server and async trainers on K devices, and HorovodTrainer
# under mpirun on 1 and 2 ranks (one thread each; when mpirun exists and
# horovod is in --trainers), and the distributed parameter-server trainers
# under mpirun on 3 ranks (1 server, 2 workers; dist-ps, dist-replicated). Prints one table with
# scaling efficiency = throughput(K towers) / (K x throughput(1 tower)),
# where the one-tower reference is SimpleTrainer with one device's share of
# the threads (CPU: 1 thread per device; GPU: gpu:0).
#
# Usage: bench/trainer_throughput.sh [--build DIR] [--gpus N] [--images N] [--trainers LIST]
#   --build DIR      build directory with examples/mnist_convnet (default: build)
#   --gpus N         towers on gpu:0..gpu:N-1 (K = 1..N) instead of 2 CPU devices
#   --images N       training images timed per configuration (default 15360)
#   --trainers LIST  trainers to time (default: replicated,ps,async,horovod;
#                    also dist-ps, dist-replicated)
# The time is that of the epoch's steps only (the log's "Epoch 1 ... time"),
# after a warm-up epoch of 10 steps; validation is not timed.
set -u
BUILD=build
GPUS=0
IMAGES=15360
TRAINERS=replicated,ps,async,horovod
LAUNCH=()  # a launcher before the binary (mpirun for horovod)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;;
    --images) IMAGES=$2; shift 2 ;;
    --trainers) TRAINERS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "trainer_throughput: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/examples/mnist_convnet"
[[ -x "$BIN" ]] || { echo "trainer_throughput: $BIN not built (cmake --build $BUILD --target mnist_convnet)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run NAME TOWERS ARGS...: prints images/s of epoch 2 (epoch 1 warms up).
run() {
  local name=$1 towers=$2; shift 2
  local steps=$(( IMAGES / (128 * towers) ))
  local log="$TMP/$name.log"
  # Epoch 1: 10 warm-up steps are not enough to time, so run 2 epochs of
  # `steps` and time the second.
  if ! "${LAUNCH[@]}" "$BIN" --logdir "$TMP/$name" --max-epoch 2 --steps-per-epoch "$steps" "$@" >"$log" 2>&1; then
    echo "trainer_throughput: $name failed:" >&2
    tail -5 "$log" >&2
    echo "nan"
    return
  fi
  local secs
  # (Several ranks print theirs. They run in lockstep, so a rank's epoch can
  # include waiting for another's epoch-end callbacks, e.g. the chief's
  # validation: the fastest rank's time is the epoch's steps.)
  secs=$(grep -o 'Epoch 2 (global_step [0-9]*) finished, time:[0-9.e+-]*' "$log" | sed 's/.*time://' | sort -g | head -1)
  awk -v s="$secs" -v n=$(( steps * 128 * towers )) 'BEGIN { printf "%.1f", n / s }'
}

declare -a ROWS
ratio() { awk -v a="$1" -v b="$2" -v k="$3" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "-"; else printf "%.2f", a / (k * b) }'; }

if (( GPUS == 0 )); then
  one=$(run simple-1 1 --trainer simple --threads 1)
  two=$(run simple-2 1 --trainer simple --threads 2)
  ROWS+=("simple cpu 1-thread|1|$one|1.00")
  ROWS+=("simple cpu 2-thread|1|$two|$(ratio "$two" "$one" 2)")
  for t in ${TRAINERS//,/ }; do
    if [[ $t == horovod ]]; then
      command -v mpirun >/dev/null || { echo "trainer_throughput: no mpirun; horovod skipped" >&2; continue; }
      export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      for n in 1 2; do
        LAUNCH=(mpirun -np "$n")
        v=$(run "horovod-$n" "$n" --trainer horovod --threads 1)
        ROWS+=("horovod mpirun -np $n (1 thread each)|$n|$v|$(ratio "$v" "$one" "$n")")
      done
      LAUNCH=()
      continue
    fi
    if [[ $t == dist-* ]]; then
      command -v mpirun >/dev/null || { echo "trainer_throughput: no mpirun; $t skipped" >&2; continue; }
      export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
      LAUNCH=(mpirun -np 3)
      v=$(run "$t" 2 --trainer "$t" --ps 1 --threads 1)
      ROWS+=("$t mpirun -np 3 (1 server, 2 workers)|2|$v|$(ratio "$v" "$one" 2)")
      LAUNCH=()
      continue
    fi
    v=$(run "$t-2" 2 --trainer "$t" --devices cpu:0,cpu:1 --threads 2)
    ROWS+=("$t cpu:0,cpu:1 (1 thread each)|2|$v|$(ratio "$v" "$one" 2)")
  done
else
  one=$(run simple-gpu 1 --trainer simple --device gpu:0)
  ROWS+=("simple gpu:0|1|$one|1.00")
  for t in ${TRAINERS//,/ }; do
    [[ $t == horovod ]] && continue  # one GPU per rank: not timed here
    for (( k = 1; k <= GPUS; ++k )); do
      v=$(run "$t-gpu$k" "$k" --trainer "$t" --gpus "$k")
      ROWS+=("$t --gpus $k|$k|$v|$(ratio "$v" "$one" "$k")")
    done
  done
fi

echo "MNIST convnet training throughput, batch 128 per tower, $IMAGES images timed ($(date -u +%F), $(nproc) cores)"
printf '%-34s %6s %12s %11s\n' "trainer / devices" "towers" "images/s" "efficiency"
for r in "${ROWS[@]}"; do
  IFS='|' read -r a b c d <<<"$r"
  printf '%-34s %6s %12s %11s\n' "$a" "$b" "$c" "$d"
done

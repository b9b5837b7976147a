#!/usr/bin/env bash
# HorovodTrainer scaling on the ResNets (build/examples/resnet --dataset fake): images/s at
# 1 and 2 ranks, on shared memory (2 ranks on this host) and over TCP between the test hosts
# (scripts/test_hosts.sh: one rank per network namespace, each pinned to a core), with
# gradient fusion as configured by --fusions (default: "default" = 25 MiB buckets and a 1 MiB
# first bucket, "one" = one 128 MiB bucket, Horovod's threshold, as before the overlap work,
# "off" = one allreduce per gradient; "ps" = DistributedTrainerParameterServer instead, one
# server process beside the workers). Prints one table: images/s, scaling efficiency
# (2-rank images/s / (2 x 1-rank images/s)) and, from each 2-rank run's timeline
# (--timeline, bench/trace_overlap.py), the step's allreduces, when the first bucket's
# starts, and their time overlapped with compute and exposed.
#
# Usage: bench/resnet_scaling.sh [--build DIR] [--configs resnet50:8:3,resnet20:64:12]
#                                [--fusions default,one,off] [--rounds 3] [--no-tcp]
# A config is model:batch per rank:steps per epoch. Each rank runs 1 kernel thread. Timed:
# epoch 2 of 2 (epoch 1 warms up),
# validation on 8 images; the configurations alternate within each round and the best
# round counts. Over TCP the hosts need root (skipped otherwise, saying so).
set -u
cd "$(dirname "$0")/.."
BUILD=build
CONFIGS=resnet50:8:3,resnet20:64:12
FUSIONS=default,one,off
ROUNDS=3
TCP=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --fusions) FUSIONS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --no-tcp) TCP=0; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "resnet_scaling: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/examples/resnet"
[[ -x "$BIN" ]] || { echo "resnet_scaling: $BIN not built (cmake --build $BUILD --target resnet)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "resnet_scaling: mpirun not found (OpenMPI)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TMP=$(mktemp -d)
HOSTS_UP=0
cleanup() {
  [[ $HOSTS_UP == 1 ]] && bash scripts/test_hosts.sh down >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
if [[ $TCP == 1 ]]; then
  if [[ $(id -u) -eq 0 ]] && bash scripts/test_hosts.sh up >/dev/null 2>&1; then
    HOSTS_UP=1
  else
    echo "resnet_scaling: no test hosts (needs root and network namespaces); TCP rows skipped" >&2
  fi
fi

fusion_flags() {
  case "$1" in
    default) echo "" ;;
    one) echo "--fusion-threshold 134217728 --first-bucket 134217728" ;;
    off) echo "--fusion-threshold 0" ;;
    ps) echo "" ;;
    *) echo "resnet_scaling: unknown fusion $1 (default, one, off, ps)" >&2; exit 2 ;;
  esac
}

# run KEY LINK NP MODEL BATCH FUSION STEPS: appends "KEY images/s" to $TMP/results and the
# timeline summary to $TMP/overlap.
run() {
  local key=$1 link=$2 np=$3 model=$4 batch=$5 fusion=$6 STEPS=$7
  local depth=${model#resnet}
  local dir="$TMP/$key.$RANDOM"
  local args=(--dataset fake --depth "$depth" --batch "$batch" --threads 1 --val-images 8
              --max-epoch 2 --steps-per-epoch "$STEPS" --logdir "$dir")
  local procs=$np
  if [[ $fusion == ps ]]; then
    # DistributedTrainerParameterServer: one server process beside the np workers.
    args+=(--trainer dist-ps --ps 1)
    procs=$((np + 1))
  else
    args+=(--trainer horovod)
    # shellcheck disable=SC2207
    [[ $np -gt 1 ]] && args+=($(fusion_flags "$fusion") --timeline "$((STEPS + 2)):$((STEPS - 1))")
  fi
  local launch=(mpirun -np "$procs")
  [[ $link == tcp ]] && launch=(bash scripts/test_hosts.sh run --pin -np "$procs")
  if ! "${launch[@]}" "$BIN" "${args[@]}" >"$dir.log" 2>&1; then
    echo "resnet_scaling: $key failed:" >&2
    tail -5 "$dir.log" >&2
    return
  fi
  # Every rank prints its epoch time; they run in lockstep, the fastest is the steps'.
  local secs
  secs=$(grep -o 'Epoch 2 (global_step [0-9]*) finished, time:[0-9.e+-]*' "$dir.log" | sed 's/.*time://' | sort -g | head -1)
  awk -v k="$key" -v s="$secs" -v n=$((STEPS * batch * np)) 'BEGIN { printf "%s %.2f\n", k, n / s }' >>"$TMP/results"
  if [[ $np -gt 1 && $fusion != ps ]]; then
    python3 bench/trace_overlap.py --summary --label "$key" "$dir"/timeline-rank*.json >>"$TMP/overlap" 2>/dev/null ||
      echo "resnet_scaling: $key: no timeline" >&2
  fi
}

IFS=, read -r -a CFGS <<<"$CONFIGS"
IFS=, read -r -a FUS <<<"$FUSIONS"
LINKS=(shm)
[[ $HOSTS_UP == 1 ]] && LINKS+=(tcp)
for ((round = 1; round <= ROUNDS; ++round)); do
  for cfg in "${CFGS[@]}"; do
    IFS=: read -r model batch steps <<<"$cfg"
    steps=${steps:-3}
    run "$model:$batch:1:shm:-" shm 1 "$model" "$batch" default "$steps"
    for link in "${LINKS[@]}"; do
      for f in "${FUS[@]}"; do run "$model:$batch:2:$link:$f" "$link" 2 "$model" "$batch" "$f" "$steps"; done
    done
  done
done

echo "ResNet scaling, HorovodTrainer, 1 kernel thread per rank, $ROUNDS round(s), best images/s;"
echo "overlap columns: medians over the traced 2-rank steps (ms)."
echo
echo "| model | batch/rank | ranks | link | fusion | images/s | efficiency | allreduces | first bucket at | step | allreduce time | overlapped | exposed |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
python3 - "$TMP/results" "$TMP/overlap" <<'EOF'
import sys
best, overlap = {}, {}
for line in open(sys.argv[1]):
    k, v = line.split()
    best[k] = max(best.get(k, 0.0), float(v))
try:
    for line in open(sys.argv[2]):
        f = line.split()
        # label runs step allreduces buckets first comm transfer overlapped exposed
        rows = overlap.setdefault(f[0], [])
        rows.append([float(x) for x in f[2:]])
except FileNotFoundError:
    pass
for k in best:
    model, batch, np_, link, fusion = k.split(":")
    one = best.get(f"{model}:{batch}:1:shm:-")
    eff = "" if np_ == "1" or not one else "%.2f" % (best[k] / (2 * one))
    o = overlap.get(k)
    if o:
        med = [sorted(c)[len(c) // 2] for c in zip(*o)]
        step, ars, _, first, comm, _, ov, ex = med
        extra = f"{ars:.0f} | {first:.0f} ms | {step:.0f} ms | {comm:.0f} ms | {ov:.0f} ms | {ex:.0f} ms"
    else:
        extra = " | | | | | "
    print(f"| {model} | {batch} | {np_} | {link} | {fusion} | {best[k]:.1f} | {eff} | {extra} |")
EOF

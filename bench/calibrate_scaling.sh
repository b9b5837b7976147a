#!/usr/bin/env bash
# Measures Spire's allreduce on every configuration this machine can make,
# fits the scaling simulator's constants to it, and draws the plots:
#   - shared memory, 2..8 ranks on one host;
#   - TCP between the test hosts (scripts/test_hosts.sh), 2 hosts x 1..4
#     ranks, unshaped and with tc-shaped links at two rates (netem delay is
#     used where the kernel has it; otherwise the script says so);
# each run of build/bench/mpi_allreduce_bandwidth appends rows (median of
# --reps interleaved calls per size and algorithm, more where those would
# take under --min-seconds (up to 101: the few-ms sizes), each after an
# untimed call of the same algorithm, each call's time the slowest rank's,
# plus a memcpy row) to OUT/allreduce.csv, the whole sequence --runs times
# (one run on a shared machine varies 10-15%: the median of 5 runs), each
# launch between two probes of the machine's state (below); then
# bench/scaling_sim.py fit writes OUT/fit.txt and OUT/fit.json (constants per setting, predicted vs measured for every
# configuration, runs pooled by median) and bench/plot_scaling.py the PNGs.
# The ranks are bound to cores so that every run shares them alike (one
# run to the next varied up to 50% at 4 ranks unbound; bound, 4%): on one
# host round-robin by rank (--map-by core --bind-to core), the test hosts
# each on a core of its own (test_hosts.sh run --pin).
# The fit's model of this machine: the ranks share its cores so bound
# (--cores $(nproc)); a beta per size, 1 to 64 MiB (the caches: --sizes);
# the shaped settings are a wire between the hosts with the unshaped TCP
# link inside them (the test hosts' ranks talk TCP inside a host too:
# --wire, --inside).
#
# usage: bench/calibrate_scaling.sh [--build DIR] [--out DIR] [--reps N] [--min-seconds S] [--runs N]
#                                   [--probe-slack 1.3 | --no-probes] [--quick]
#   --quick: fewer ranks and sizes, one run, no probes (a smoke run, not a calibration)
# Needs root for the test hosts (skipped, saying so, without).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
OUT=bench/results
REPS=7
MIN_SECONDS=0.3
RUNS=5
PROBES=1
PROBE_SLACK=1.3
QUICK=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --min-seconds) MIN_SECONDS=$2; shift 2 ;;
    --probe-slack) PROBE_SLACK=$2; shift 2 ;;
    --no-probes) PROBES=0; shift ;;
    --runs) RUNS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "calibrate_scaling: unknown option $1" >&2; exit 2 ;;
  esac
done
BENCH=$BUILD/bench/mpi_allreduce_bandwidth
[[ -x $BENCH ]] || { echo "calibrate_scaling: $BENCH not built (configure with SPIRE_MPI on)" >&2; exit 1; }
mkdir -p "$OUT"
CSV=$OUT/allreduce.csv
echo "setting,ranks,hosts,bytes,algorithm,seconds,best" > "$CSV"
echo "setting,launch,when,probe_us,fastest_us,verdict" > "$OUT/probes.csv"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

SHM_RANKS=(2 3 4 6 8)
TCP_NP=(2 4 6 8)
MAX=64M
SHAPED_MAX=16M
if [[ $QUICK == 1 ]]; then SHM_RANKS=(2 4); TCP_NP=(2 4); MAX=4M; SHAPED_MAX=1M; REPS=3; MIN_SECONDS=0; RUNS=1; PROBES=0; fi

# The machine's state. This VM's speed at moving data between its cores
# changes for minutes at a time: every shared-memory configuration, 2 ranks
# included, took 1.6-1.8x as long at 1 MiB in some runs as in the others
# (a single rank's memcpy did not), which no model of the configuration
# can follow. So a probe (2 ranks, shared memory, 1 MiB: Spire's time in
# us) runs before and after every launch: before, until it is within
# --probe-slack of the fastest probe so far (every 15 s, at most 8 times,
# then on regardless, logged); after, a slower probe has the launch
# measured again (at most twice). Every probe goes to OUT/probes.csv
# (setting, launch, when, us, fastest so far, verdict).
PROBE_MIN=0
probe() {
  mpirun -np 2 --map-by core --bind-to core:overload-allowed "$BENCH" --min 1M --max 1M --reps 7 \
    --min-seconds "$MIN_SECONDS" --warm 1 2>/dev/null | awk '$2 == "MiB" { print $3 }'
}
probe_log() {  # probe_log SETTING LAUNCH WHEN -> 0 when the machine is as fast as it was (prints nothing)
  local t
  t=$(probe)
  [[ -n $t ]] || { echo "calibrate_scaling: the probe failed" >&2; exit 1; }
  if [[ $PROBE_MIN == 0 ]] || awk -v t="$t" -v m="$PROBE_MIN" 'BEGIN { exit !(t < m) }'; then PROBE_MIN=$t; fi
  local ok=1
  awk -v t="$t" -v m="$PROBE_MIN" -v k="$PROBE_SLACK" 'BEGIN { exit !(t <= k * m) }' || ok=0
  echo "$1,$2,$3,$t,$PROBE_MIN,$([[ $ok == 1 ]] && echo normal || echo slow)" >> "$OUT/probes.csv"
  [[ $ok == 1 ]]
}

LAUNCH=0
run() {  # run SETTING MAX LAUNCHER...
  local setting=$1 max=$2
  shift 2
  LAUNCH=$((LAUNCH + 1))
  for (( attempt = 1; ; ++attempt )); do
    if [[ $PROBES == 1 ]]; then
      for (( wait = 0; wait < 8; ++wait )); do
        probe_log "$setting" "$LAUNCH" before && break
        echo "calibrate_scaling: the machine is slow (probe over $PROBE_SLACK x $PROBE_MIN us); waiting 15 s" >&2
        sleep 15
      done
    fi
    echo "== $setting: $*" >&2
    rm -f "$OUT/launch.csv"
    "$@" "$BENCH" --min 64K --max "$max" --reps "$REPS" --min-seconds "$MIN_SECONDS" --warm 1 --csv "$OUT/launch.csv" \
      --setting "$setting" | grep -v '^\[' >&2
    if [[ $PROBES == 1 ]] && ! probe_log "$setting" "$LAUNCH" after && (( attempt < 3 )); then
      echo "calibrate_scaling: the machine slowed during the launch; measuring it again" >&2
      continue
    fi
    tail -n +2 "$OUT/launch.csv" >> "$CSV"
    break
  done
}

HOSTS=0
if [[ $(id -u) -eq 0 ]] && bash scripts/test_hosts.sh up >/dev/null 2>&1; then
  HOSTS=1
  trap 'bash scripts/test_hosts.sh down >/dev/null 2>&1 || true' EXIT
else
  echo "calibrate_scaling: test hosts need root and network namespaces; TCP settings skipped" >&2
fi
for (( k = 1; k <= RUNS; ++k )); do
  echo "== run $k of $RUNS" >&2
  for n in "${SHM_RANKS[@]}"; do
    run shm "$MAX" mpirun -np "$n" --map-by core --bind-to core:overload-allowed
  done
  if [[ $HOSTS == 1 ]]; then
    bash scripts/test_hosts.sh up >/dev/null  # (unshaped)
    for np in "${TCP_NP[@]}"; do
      run tcp "$MAX" bash scripts/test_hosts.sh run --pin -np "$np"
    done
    for rate in 1gbit 400mbit; do
      bash scripts/test_hosts.sh up --rate "$rate" --delay 200us >&2
      for np in 2 4; do
        run "tcp-$rate" "$SHAPED_MAX" bash scripts/test_hosts.sh run --pin -np "$np"
      done
    done
  fi
done

python3 -B bench/scaling_sim.py fit "$CSV" --cores "$(nproc)" --sizes 1M,4M,16M,64M --wire tcp-1gbit,tcp-400mbit --inside tcp \
  --json "$OUT/fit.json" | tee "$OUT/fit.txt" | grep -E "^setting|within"
python3 -B bench/plot_scaling.py --csv "$CSV" --fit "$OUT/fit.json" --out "$OUT"

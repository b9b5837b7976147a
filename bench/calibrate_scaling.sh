#!/usr/bin/env bash
# Measures Spire's allreduce on every configuration this machine can make,
# fits the scaling simulator's constants to it, and draws the plots:
#   - shared memory, 2..8 ranks on one host;
#   - TCP between the test hosts (scripts/test_hosts.sh), 2 hosts x 1..4
#     ranks, unshaped and with tc-shaped links at two rates (netem delay is
#     used where the kernel has it; otherwise the script says so), 2 hosts
#     x 1..4 ranks there too (up to 16 MiB);
# each run of build/bench/mpi_allreduce_bandwidth appends rows (median of
# --reps interleaved calls per size and algorithm, more where those would
# take under --min-seconds (up to 101: the few-ms sizes), each after an
# untimed call of the same algorithm, each call's time the slowest rank's,
# plus a memcpy row) to OUT/allreduce.csv, the whole sequence --runs times
# (one run on a shared machine is noisy: the median of 5 runs), the
# calls timed only while the VM's cores are near each other (below); then
# bench/scaling_sim.py fit writes OUT/fit.txt and OUT/fit.json (constants per setting, predicted vs measured for every
# configuration, runs pooled by median), scaling_sim.py crossval OUT/crossval.txt (the fit's
# error on the rows of a rank count or a size it was not given) and bench/plot_scaling.py the PNGs.
# The ranks are bound to cores so that every run shares them alike
# (unbound, the scheduler moves them and runs differ far more): on one
# host round-robin by rank (--map-by core --bind-to core), the test hosts
# each on a core of its own (test_hosts.sh run --pin).
# The fit's model of this machine: the ranks share its cores so bound
# (--cores $(nproc)); a beta per size, 1 to 64 MiB (the caches: --sizes);
# the shaped settings are a wire between the hosts with the unshaped TCP
# link inside them (the test hosts' ranks talk TCP inside a host too:
# --wire, --inside).
#
# usage: bench/calibrate_scaling.sh [--build DIR] [--out DIR] [--reps N] [--min-seconds S] [--runs N]
#                                   [--no-probes] [--quick] [--settings shm,tcp,shaped] [--ranks 2,4]
#   --no-probes: every round counts, near or far (--core-probe 0)
#   --settings: which of shm, tcp (unshaped) and shaped (both rates) to measure (default: all)
#   --ranks: only these rank counts (default: 2,3,4,6,8 on shared memory, 2,4,6,8 between the hosts);
#            several OUT/allreduce.csv files fit together: scaling_sim.py fit A.csv B.csv
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
QUICK=0
SETTINGS=",shm,tcp,shaped,"
ONLY_RANKS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --min-seconds) MIN_SECONDS=$2; shift 2 ;;
    --no-probes) PROBES=0; shift ;;
    --runs) RUNS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --settings) SETTINGS=",$2,"; shift 2 ;;
    --ranks) ONLY_RANKS=",$2,"; shift 2 ;;
    *) echo "calibrate_scaling: unknown option $1" >&2; exit 2 ;;
  esac
done
BENCH=$BUILD/bench/mpi_allreduce_bandwidth
[[ -x $BENCH ]] || { echo "calibrate_scaling: $BENCH not built (configure with SPIRE_MPI on)" >&2; exit 1; }
mkdir -p "$OUT"
CSV=$OUT/allreduce.csv
echo "setting,ranks,hosts,bytes,algorithm,seconds,best,probe_ns,kept,rounds,alu_us" > "$CSV"
echo "setting,launch,attempt,fastest_probe_ns,rows,far_rows" > "$OUT/probes.csv"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

SHM_RANKS=(2 3 4 6 8)
TCP_NP=(2 4 6 8)
SHAPED_NP=(2 4 6 8)
MAX=64M
SHAPED_MAX=16M
if [[ $QUICK == 1 ]]; then SHM_RANKS=(2 4); TCP_NP=(2 4); SHAPED_NP=(2 4); MAX=4M; SHAPED_MAX=1M; REPS=3; MIN_SECONDS=0; RUNS=1; PROBES=0; fi
wanted() { [[ $SETTINGS == *",$1,"* ]]; }  # wanted SETTING
counted() { [[ -z $ONLY_RANKS || $ONLY_RANKS == *",$1,"* ]]; }  # counted RANKS

# The machine's state. A hypervisor may move a VM's vCPUs between the
# host's cores: for seconds at a time they are near each other or far
# apart, and every byte between ranks on different cores then costs much
# more (bench/DISTRIBUTED.md: the development VM). The benchmark probes it
# around every round of calls and counts only the rounds between near
# probes (CoreProbe in mpi_allreduce_bandwidth.cc); what "near" is comes from here: the fastest
# probe of 8 short 2-rank runs 3 s apart, then of every launch (each gets
# --near-ns 2x that). A launch with a row where no round was near (kept 0
# in its CSV: far for 4x --reps rounds) is measured again after 15 s, at
# most twice; every row that was near stays, and the fit drops the others.
# OUT/probes.csv: setting, launch, attempt, fastest probe (ns), rows, far rows.
NEAR_NS=0
fastest_probe() {  # fastest_probe CSV -> the fastest probe of its rows that counted
  awk -F, 'NR > 1 && $9 > 0 && $8 > 0 { if (m == "" || $8 < m) m = $8 } END { print m }' "$1"
}
note_probe() {
  [[ -n $1 ]] || return 0
  if [[ $NEAR_NS == 0 ]] || awk -v t="$1" -v m="$NEAR_NS" 'BEGIN { exit !(t < m) }'; then NEAR_NS=$1; fi
}
if [[ $PROBES == 1 ]]; then
  for (( i = 0; i < 8; ++i )); do
    rm -f "$OUT/launch.csv"
    mpirun -np 2 --map-by core --bind-to core:overload-allowed "$BENCH" --min 4K --max 4K --reps 20 \
      --csv "$OUT/launch.csv" >/dev/null 2>&1 || { echo "calibrate_scaling: the reference probe failed" >&2; exit 1; }
    note_probe "$(fastest_probe "$OUT/launch.csv")"
    sleep 3
  done
  echo "calibrate_scaling: near cores: a round trip of $NEAR_NS ns" >&2
fi

LAUNCH=0
run() {  # run SETTING MAX LAUNCHER...
  local setting=$1 max=$2
  shift 2
  LAUNCH=$((LAUNCH + 1))
  for (( attempt = 1; ; ++attempt )); do
    echo "== $setting: $*" >&2
    rm -f "$OUT/launch.csv"
    local near=()
    if [[ $PROBES == 1 ]]; then near=(--near-ns "$(awk -v m="$NEAR_NS" 'BEGIN { print 2 * m }')"); else near=(--core-probe 0); fi
    "$@" "$BENCH" --min 64K --max "$max" --reps "$REPS" --min-seconds "$MIN_SECONDS" --warm 1 --csv "$OUT/launch.csv" \
      --setting "$setting" "${near[@]}" | grep -v '^\[' >&2
    tail -n +2 "$OUT/launch.csv" >> "$CSV"
    [[ $PROBES == 1 ]] || break
    local p far rows
    p=$(fastest_probe "$OUT/launch.csv")
    note_probe "$p"
    rows=$(awk -F, 'NR > 1 && $5 != "memcpy"' "$OUT/launch.csv" | wc -l)
    far=$(awk -F, 'NR > 1 && $5 != "memcpy" && $9 == 0' "$OUT/launch.csv" | wc -l)
    echo "$setting,$LAUNCH,$attempt,${p:-none},$rows,$far" >> "$OUT/probes.csv"
    (( far > 0 && attempt < 3 )) || break
    echo "calibrate_scaling: $far rows found the cores far apart throughout; measuring the launch again in 15 s" >&2
    sleep 15
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
  if wanted shm; then
    for n in "${SHM_RANKS[@]}"; do
      counted "$n" && run shm "$MAX" mpirun -np "$n" --map-by core --bind-to core:overload-allowed
    done
  fi
  if [[ $HOSTS == 1 ]] && wanted tcp; then
    bash scripts/test_hosts.sh up >/dev/null  # (unshaped)
    for np in "${TCP_NP[@]}"; do
      counted "$np" && run tcp "$MAX" bash scripts/test_hosts.sh run --pin -np "$np"
    done
  fi
  if [[ $HOSTS == 1 ]] && wanted shaped; then
    for rate in 1gbit 400mbit; do
      bash scripts/test_hosts.sh up --rate "$rate" --delay 200us >&2
      for np in "${SHAPED_NP[@]}"; do
        counted "$np" && run "tcp-$rate" "$SHAPED_MAX" bash scripts/test_hosts.sh run --pin -np "$np"
      done
    done
  fi
done

python3 -B bench/scaling_sim.py fit "$CSV" --cores "$(nproc)" --sizes 1M,4M,16M,64M --wire tcp-1gbit,tcp-400mbit --inside tcp \
  --json "$OUT/fit.json" | tee "$OUT/fit.txt" | grep -E "^setting|within"
python3 -B bench/scaling_sim.py crossval "$CSV" --cores "$(nproc)" --sizes 1M,4M,16M,64M --wire tcp-1gbit,tcp-400mbit \
  --inside tcp | tee "$OUT/crossval.txt"
python3 -B bench/plot_scaling.py --csv "$CSV" --fit "$OUT/fit.json" --out "$OUT"

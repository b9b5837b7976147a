#!/usr/bin/env bash
# ResNet training step, Spire against PyTorch 2 eager on the same machine (issue 26):
# images/s and peak resident memory of ResNet-20 (batch 128, 32x32) and ResNet-50
# (batches 16 and 32, 224x224) at each thread count. Each measurement is its own
# process (build/bench/resnet_step for Spire, bench/resnet_step_torch.py for PyTorch),
# so each peak RSS (VmHWM) is that engine's alone; the two engines alternate,
# S,T,S,T,..., so that both see the same share of a shared machine. Each engine keeps
# its best images/s over its runs and its largest peak RSS. The step, data and timing
# are described at the top of the two programs.
#
# Usage: bench/resnet_vs_torch.sh [--build DIR] [--no-build] [--threads LIST]
#                                 [--configs LIST] [--rounds N] [--quick] [--device cpu|gpu]
#   --build DIR     build directory (default: build; configured CPU-only when it has no
#                   CMakeCache.txt); the resnet_step target is built there first
#   --no-build      do not build; DIR/bench/resnet_step must exist
#   --threads LIST  thread counts, comma-separated (default: 1,2)
#   --configs LIST  model:batch pairs (default: resnet20:128,resnet50:16,resnet50:32)
#   --rounds N      runs of each engine per configuration, alternating (default: 2)
#   --device gpu    both engines on the first GPU (resnet_step --device gpu, the PyTorch
#                   script's --device cuda; TF32 off in both): threads default to 4 (Spire's
#                   kernel threads and PyTorch's, for what stays on the CPU), more steps
#                   per window, and the memory compared is each engine's peak of GPU memory in
#                   use (device_peak_mib) instead of the process's RSS. The environment
#                   variable TORCH_LD_LIBRARY_PATH, when set, is the PyTorch runs'
#                   LD_LIBRARY_PATH ('-': none), so that libraries put there for Spire do
#                   not replace PyTorch's own CUDA libraries.
#   --quick         a smoke test in well under a minute: one round, 1 thread (unless
#                   --threads), small batches (resnet20:16,resnet50:2 unless --configs),
#                   one warm-up step and one timed step; its ratios mean nothing
# Steps per run (full): ResNet-20 3 warm-up steps and 5 windows of 3 steps; ResNet-50
# 2 warm-up steps and 3 windows of 1 step (images/s from the median window). On the
# 2-vCPU development VM the full run took about 15 minutes.
#
# Prints each run, a table (with each best run's CPU ms per step, all threads: on a shared
# machine a check that a slow run was slow for want of a core), each engine's best thread
# count per configuration, and
# ends with one line per configuration and thread count:
#   RATIO <model> <batch> <threads> <Spire images/s / PyTorch images/s> <Spire peak MiB / PyTorch peak MiB>
# Exit status 1 when a run failed; a missing PyTorch is reported and its ratios are nan.
set -u
BUILD=build
DO_BUILD=1
THREADS=1,2
CONFIGS=""
ROUNDS=2
QUICK=0
THREADS_SET=0
DEVICE=cpu
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --threads) THREADS=$2; THREADS_SET=1; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --device) DEVICE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "resnet_vs_torch: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $DEVICE == cpu || $DEVICE == gpu ]] || { echo "resnet_vs_torch: --device is cpu or gpu" >&2; exit 2; }
if [[ $DEVICE == gpu ]] && (( !THREADS_SET )); then THREADS=4; fi
if (( QUICK )); then
  ROUNDS=1
  (( THREADS_SET )) || THREADS=1
  [[ -n $CONFIGS ]] || CONFIGS=resnet20:16,resnet50:2
fi
[[ -n $CONFIGS ]] || CONFIGS=resnet20:128,resnet50:16,resnet50:32
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "resnet_vs_torch: --rounds needs a positive integer" >&2; exit 2; }
[[ $THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "resnet_vs_torch: --threads needs a list like 1,2" >&2; exit 2; }
for c in ${CONFIGS//,/ }; do
  [[ $c =~ ^resnet(20|50):[1-9][0-9]*$ ]] || { echo "resnet_vs_torch: bad configuration '$c' (resnet20:B or resnet50:B)" >&2; exit 2; }
done

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
BIN="$BUILD/bench/resnet_step"
if (( DO_BUILD )); then
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    cmake -S "$SRC" -B "$BUILD" -DSPIRE_CUDA=OFF >/dev/null || { echo "resnet_vs_torch: configuring $BUILD failed" >&2; exit 1; }
  fi
  cmake --build "$BUILD" -j"$(nproc)" --target resnet_step >/dev/null || { echo "resnet_vs_torch: building resnet_step failed" >&2; exit 1; }
fi
[[ -x $BIN ]] || { echo "resnet_vs_torch: $BIN not built (cmake --build $BUILD --target resnet_step)" >&2; exit 1; }
TORCH=1
if ! python3 -c 'import torch' >/dev/null 2>&1; then
  echo "resnet_vs_torch: python3 has no torch (pip install torch): PyTorch runs skipped" >&2
  TORCH=0
fi

# step_args MODEL: warm-up and timing flags of one run.
step_args() {
  if (( QUICK )); then echo "--warmup 1 --windows 1 --steps 1"
  elif [[ $DEVICE == gpu ]]; then echo "--warmup 5 --windows 5 --steps 10"
  elif [[ $1 == resnet20 ]]; then echo "--warmup 3 --windows 5 --steps 3"
  else echo "--warmup 2 --windows 3 --steps 1"; fi
}

# field LINE KEY: the value of KEY=... in a RESULT line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

FAILED=0
# [engine model batch threads] -> best images/s, largest peak MiB, largest peak MiB above
# the process's resident memory at its start (PyTorch's import alone is hundreds of MiB).
# CPU: the process's CPU ms per step (all threads) in the run with the best images/s.
declare -A IPS RSS GROW CPU
# run ENGINE MODEL BATCH THREADS: one process; folds its RESULT into IPS and RSS.
run() {
  local engine=$1 model=$2 batch=$3 t=$4 out line
  local -a cmd
  # shellcheck disable=SC2207
  local args=($(step_args "$model"))
  if [[ $engine == spire ]]; then
    cmd=("$BIN")
    [[ $DEVICE == gpu ]] && cmd+=(--device gpu)
  else
    local ld=()
    if [[ -n ${TORCH_LD_LIBRARY_PATH+x} ]]; then
      if [[ $TORCH_LD_LIBRARY_PATH == - ]]; then ld=(-u LD_LIBRARY_PATH); else ld=(LD_LIBRARY_PATH="$TORCH_LD_LIBRARY_PATH"); fi
    fi
    cmd=(env ${ld[@]+"${ld[@]}"} OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" python3 "$HERE/resnet_step_torch.py")
    [[ $DEVICE == gpu ]] && cmd+=(--device cuda)
  fi
  if ! out=$("${cmd[@]}" --model "$model" --batch "$batch" --threads "$t" "${args[@]}" 2>&1); then
    echo "resnet_vs_torch: $engine $model batch $batch, $t threads failed:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  line=$(grep '^RESULT ' <<<"$out" | tail -1)
  if [[ -z $line ]]; then
    echo "resnet_vs_torch: $engine $model batch $batch, $t threads printed no RESULT:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
  local ips rss rss0 loss cpu key="$engine $model $batch $t"
  ips=$(field "$line" images_per_s)
  cpu=$(field "$line" cpu_ms_per_step)
  if [[ $DEVICE == gpu ]]; then
    rss=$(field "$line" device_peak_mib) rss0=0
  else
    rss=$(field "$line" peak_rss_mib)
    rss0=$(field "$line" start_rss_mib)
  fi
  loss=$(field "$line" loss_last)
  [[ $loss =~ ^-?[0-9] ]] || echo "resnet_vs_torch: warning: $engine $model's loss is $loss (lr too high for fake data?)" >&2
  if awk -v a="${IPS[$key]:-0}" -v b="$ips" 'BEGIN { exit !(b > a) }'; then
    IPS[$key]=$ips CPU[$key]=$cpu
  fi
  RSS[$key]=$(awk -v a="${RSS[$key]:-0}" -v b="$rss" 'BEGIN { print (b > a ? b : a) }')
  GROW[$key]=$(awk -v a="${GROW[$key]:-0}" -v b="$rss" -v c="$rss0" 'BEGIN { print (b - c > a ? b - c : a) }')
}

echo "resnet_vs_torch: $(date -u '+%F %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
echo "  load average $(cut -d' ' -f1-3 /proc/loadavg); configurations $CONFIGS, threads $THREADS, $ROUNDS rounds$( (( QUICK )) && echo ', quick'), device $DEVICE"
if [[ $DEVICE == gpu ]]; then
  echo "  GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1);" \
    "the peak and above-start columns are GPU memory in use (device_peak_mib), not RSS"
fi
START=$SECONDS
for c in ${CONFIGS//,/ }; do
  model=${c%%:*} batch=${c##*:}
  for t in ${THREADS//,/ }; do
    for (( r = 0; r < ROUNDS; ++r )); do
      run spire "$model" "$batch" "$t"
      (( TORCH )) && run torch "$model" "$batch" "$t"
    done
  done
done
echo "resnet_vs_torch: $(( SECONDS - START )) s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
echo
# ("above start": peak minus the resident memory when the program started, PyTorch's
# after importing torch; the RATIO lines compare the whole peaks.)
FMT='%-9s %5s %7s %12s %14s %6s %10s %12s %11s %13s %6s %12s %13s %6s\n'
printf "$FMT" model batch threads "Spire img/s" "PyTorch img/s" ratio "Spire CPU" "PyTorch CPU" \
  "Spire peak" "PyTorch peak" ratio "Spire above" "PyTorch above" ratio
printf "$FMT" "" "" "" "" "" "" ms/step ms/step MiB MiB "" "start MiB" "start MiB" ""
RATIOS=()
BESTS=()
for c in ${CONFIGS//,/ }; do
  model=${c%%:*} batch=${c##*:}
  best_s="" best_t="" bs_t="" bt_t=""
  for t in ${THREADS//,/ }; do
    s="spire $model $batch $t" p="torch $model $batch $t"
    si=${IPS[$s]:-} ti=${IPS[$p]:-} sr=${RSS[$s]:-} tr=${RSS[$p]:-} sg=${GROW[$s]:-} tg=${GROW[$p]:-}
    printf "$FMT" "$model" "$batch" "$t" "${si:--}" "${ti:--}" "$(ratio "$si" "$ti")" "${CPU[$s]:--}" "${CPU[$p]:--}" "${sr:--}" \
      "${tr:--}" "$(ratio "$sr" "$tr")" "${sg:--}" "${tg:--}" "$(ratio "$sg" "$tg")"
    RATIOS+=("RATIO $model $batch $t $(ratio "$si" "$ti") $(ratio "$sr" "$tr")")
    if [[ -n $si ]] && awk -v a="$si" -v b="${best_s:-0}" 'BEGIN { exit !(a > b) }'; then best_s=$si bs_t=$t; fi
    if [[ -n $ti ]] && awk -v a="$ti" -v b="${best_t:-0}" 'BEGIN { exit !(a > b) }'; then best_t=$ti bt_t=$t; fi
  done
  BESTS+=("BEST $model $batch: Spire ${best_s:--} img/s (${bs_t:--} threads), PyTorch ${best_t:--} img/s (${bt_t:--} threads): ratio $(ratio "$best_s" "$best_t"), peak memory ratio $(ratio "${RSS[spire $model $batch $bs_t]:-}" "${RSS[torch $model $batch $bt_t]:-}")")
done
echo
printf '%s\n' "${BESTS[@]}"
echo
printf '%s\n' "${RATIOS[@]}"
exit $FAILED

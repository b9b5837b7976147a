#!/usr/bin/env bash
# GPT training step, Spire against PyTorch 2 eager (and torch.compile with --compile) on the
# same machine (issue 27): tokens/s and peak resident memory of nanoGPT's "baby"
# configuration (4 layers, 4 heads, width 128, context 64, batch 12) and of its
# shakespeare_char configuration (6 layers, 6 heads, width 384, context 256; batch 8 by
# default, since a step of batch 64 takes over ten seconds on a 2-core machine), in f32 and
# bf16 (matmuls in bf16 with f32 master weights; PyTorch under torch.autocast). Each
# measurement is its own process (build/bench/gpt_step, bench/nanogpt_torch.py step); the
# engines alternate S,T,S,T,... and each keeps its best tokens/s and its largest peak RSS.
#
# Usage: bench/gpt_vs_torch.sh [--build DIR] [--no-build] [--threads LIST] [--configs LIST]
#                              [--precisions LIST] [--rounds N] [--compile] [--quick]
#                              [--device cpu|gpu]
#   --build DIR        build directory (default build); gpt_step is built there first
#   --no-build         do not build
#   --threads LIST     thread counts (default 1,2)
#   --configs LIST     config:batch pairs (default baby:12,shakespeare_char:8)
#   --precisions LIST  f32,bf16 (default both)
#   --rounds N         runs of each engine per configuration (default 2)
#   --compile          also time torch.compile (a third engine, in the table; no RATIO)
#   --quick            one round, one thread, 1 warm-up and 1 timed step: a smoke test
#   --device gpu       both engines on the first GPU (gpt_step --device gpu, nanogpt_torch.py
#                      --device cuda; TF32 off in both); the memory compared is each engine's
#                      peak of GPU memory in use (device_peak_mib). TORCH_LD_LIBRARY_PATH, when
#                      set, is the PyTorch runs' LD_LIBRARY_PATH ('-': none), as in
#                      resnet_vs_torch.sh.
# Ends with one line per configuration, precision and thread count:
#   RATIO <config> <precision> <threads> <Spire tokens/s / PyTorch eager tokens/s> <Spire peak MiB / PyTorch peak MiB>
# Exit status 1 when a run failed.
set -u
BUILD=build
DO_BUILD=1
THREADS=1,2
CONFIGS=baby:12,shakespeare_char:8
PRECISIONS=f32,bf16
ROUNDS=2
COMPILE=0
QUICK=0
DEVICE=cpu
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --threads) THREADS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --compile) COMPILE=1; shift ;;
    --quick) QUICK=1; ROUNDS=1; THREADS=1; shift ;;
    --device) DEVICE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt_vs_torch: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $DEVICE == cpu || $DEVICE == gpu ]] || { echo "gpt_vs_torch: --device is cpu or gpu" >&2; exit 2; }
for c in ${CONFIGS//,/ }; do
  [[ $c =~ ^(baby|shakespeare_char):[1-9][0-9]*$ ]] || { echo "gpt_vs_torch: bad configuration '$c'" >&2; exit 2; }
done
for p in ${PRECISIONS//,/ }; do
  [[ $p == f32 || $p == bf16 ]] || { echo "gpt_vs_torch: bad precision '$p'" >&2; exit 2; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
BIN="$BUILD/bench/gpt_step"
if (( DO_BUILD )); then
  cmake --build "$BUILD" -j"$(nproc)" --target gpt_step >/dev/null || { echo "gpt_vs_torch: building gpt_step failed" >&2; exit 1; }
fi
[[ -x $BIN ]] || { echo "gpt_vs_torch: $BIN not built" >&2; exit 1; }
TORCH=1
python3 -c 'import torch' >/dev/null 2>&1 || { echo "gpt_vs_torch: python3 has no torch: PyTorch runs skipped" >&2; TORCH=0; }

model_flags() {  # nanogpt_torch.py's flags of a configuration
  if [[ $1 == baby ]]; then echo "--n_layer 4 --n_head 4 --n_embd 128 --block_size 64"
  else echo "--n_layer 6 --n_head 6 --n_embd 384 --block_size 256"; fi
}
step_args() {  # warm-up and timing flags (Spire's names; PyTorch's are the same)
  if (( QUICK )); then echo "--warmup 1 --windows 1 --steps 1"
  elif [[ $DEVICE == gpu ]]; then echo "--warmup 5 --windows 5 --steps 10"
  elif [[ $1 == baby ]]; then echo "--warmup 3 --windows 3 --steps 10"
  else echo "--warmup 1 --windows 3 --steps 2"; fi
}
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

FAILED=0
declare -A TPS RSS CPU
run() {  # ENGINE CONFIG BATCH PRECISION THREADS
  local engine=$1 config=$2 batch=$3 prec=$4 t=$5 out line
  local -a cmd
  # shellcheck disable=SC2207
  local args=($(step_args "$config"))
  case $engine in
    spire) cmd=("$BIN" --config "$config" --batch "$batch" --precision "$prec" --threads "$t")
      [[ $DEVICE == gpu ]] && cmd+=(--device gpu) ;;
    torch|compile)
      local ld=()
      if [[ -n ${TORCH_LD_LIBRARY_PATH+x} ]]; then
        if [[ $TORCH_LD_LIBRARY_PATH == - ]]; then ld=(-u LD_LIBRARY_PATH); else ld=(LD_LIBRARY_PATH="$TORCH_LD_LIBRARY_PATH"); fi
      fi
      # shellcheck disable=SC2207
      cmd=(env ${ld[@]+"${ld[@]}"} OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" python3 "$HERE/nanogpt_torch.py" step
           $(model_flags "$config") --batch_size "$batch" --precision "$prec" --threads "$t")
      [[ $DEVICE == gpu ]] && cmd+=(--device cuda)
      [[ $engine == compile ]] && cmd+=(--compile) ;;
  esac
  if ! out=$("${cmd[@]}" "${args[@]}" 2>&1); then
    echo "gpt_vs_torch: $engine $config $prec, $t threads failed:" >&2
    tail -5 <<<"$out" >&2
    FAILED=1
    return
  fi
  line=$(grep '^RESULT ' <<<"$out" | tail -1)
  [[ -n $line ]] || { echo "gpt_vs_torch: $engine printed no RESULT:" >&2; tail -5 <<<"$out" >&2; FAILED=1; return; }
  echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
  local key="$engine $config $batch $prec $t" tps rss
  tps=$(field "$line" tokens_per_s)
  if [[ $DEVICE == gpu ]]; then rss=$(field "$line" device_peak_mib); else rss=$(field "$line" peak_rss_mib); fi
  if awk -v a="${TPS[$key]:-0}" -v b="$tps" 'BEGIN { exit !(b > a) }'; then
    TPS[$key]=$tps CPU[$key]=$(field "$line" cpu_ms_per_step)
  fi
  RSS[$key]=$(awk -v a="${RSS[$key]:-0}" -v b="$rss" 'BEGIN { print (b > a ? b : a) }')
}

echo "gpt_vs_torch: $(date -u '+%F %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
echo "  load $(cut -d' ' -f1-3 /proc/loadavg); configurations $CONFIGS, precisions $PRECISIONS, threads $THREADS, $ROUNDS rounds, device $DEVICE"
[[ $DEVICE == gpu ]] && echo "  GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); MiB columns are GPU memory in use"
START=$SECONDS
for c in ${CONFIGS//,/ }; do
  config=${c%%:*} batch=${c##*:}
  for prec in ${PRECISIONS//,/ }; do
    for t in ${THREADS//,/ }; do
      for (( r = 0; r < ROUNDS; ++r )); do
        run spire "$config" "$batch" "$prec" "$t"
        (( TORCH )) && run torch "$config" "$batch" "$prec" "$t"
        (( TORCH && COMPILE )) && run compile "$config" "$batch" "$prec" "$t"
      done
    done
  done
done
echo "gpt_vs_torch: $(( SECONDS - START )) s"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
echo
FMT='%-17s %5s %5s %7s %12s %12s %6s %12s %10s %10s %6s\n'
printf "$FMT" config batch prec threads "Spire tok/s" "eager tok/s" ratio "compile tok/s" "Spire MiB" "eager MiB" ratio
RATIOS=()
for c in ${CONFIGS//,/ }; do
  config=${c%%:*} batch=${c##*:}
  for prec in ${PRECISIONS//,/ }; do
    for t in ${THREADS//,/ }; do
      s="spire $config $batch $prec $t" p="torch $config $batch $prec $t" k="compile $config $batch $prec $t"
      printf "$FMT" "$config" "$batch" "$prec" "$t" "${TPS[$s]:--}" "${TPS[$p]:--}" "$(ratio "${TPS[$s]:-}" "${TPS[$p]:-}")" \
        "${TPS[$k]:--}" "${RSS[$s]:--}" "${RSS[$p]:--}" "$(ratio "${RSS[$s]:-}" "${RSS[$p]:-}")"
      RATIOS+=("RATIO $config $prec $t $(ratio "${TPS[$s]:-}" "${TPS[$p]:-}") $(ratio "${RSS[$s]:-}" "${RSS[$p]:-}")")
    done
  done
done
echo
printf '%s\n' "${RATIOS[@]}"
exit $FAILED

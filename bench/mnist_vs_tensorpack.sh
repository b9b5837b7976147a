#!/usr/bin/env bash
# The main job against the real tensorpack (issue 29): epoch time of tensorpack's MNIST
# convnet in Spire (build/examples/mnist_convnet, the README's main job) and in tensorpack
# 0.11 on TensorFlow 2 CPU (bench/mnist_tensorpack.py, the same model, data, optimizer and
# callbacks), alternating S,T,S,T; and the convnet step's share of the machine's FLOP limit.
#
# tensorpack and TensorFlow come from PyPI into a virtual environment of their own (they
# pin numpy < 2; the rest of the project's Python stays as it is): tensorflow-cpu 2.15.1
# (the last release whose tf.compat.v1.layers, which tensorpack's layers use, still works)
# and tensorpack. The first run installs them (about 600 MB).
#
# Usage: bench/mnist_vs_tensorpack.sh [--build DIR] [--no-build] [--threads T] [--epochs N]
#                                     [--rounds N] [--venv DIR] [--steps-per-epoch N]
#   --build DIR     build directory (default: build; configured CPU-only when new); the
#                   mnist_convnet and flop_peak targets are built there first
#   --threads T     kernel threads of each engine (default 2: Spire's --threads, TensorFlow's
#                   intra- and inter-op threads)
#   --epochs N      epochs per run (default 2); the epoch time compared is the mean of
#                   epochs 2..N (the first includes each engine's start-up), epoch 1 when N=1
#   --rounds N      runs of each engine, alternating (default 1); each keeps its fastest
#   --venv DIR      where tensorpack is installed (default ~/.cache/spire/tensorpack-venv)
#   --steps-per-epoch N   fewer steps per epoch (a smoke test; the ratio is then not the
#                   issue's figure)
# Prints each run's epoch times and validation accuracy, then
#   FLOPS convnet_step <GFLOP per step>  (batch 128: the convolutions' and matmuls'
#         forward, input-gradient and filter-gradient multiply-adds, x2)
#   PEAK <threads> <GFLOP/s> <isa>       (build/bench/flop_peak: FMA chains in registers)
#   STEP_SHARE <Spire GFLOP/s per step> <share of the peak at T threads>
#   RATIO mnist_epoch <Spire epoch s / tensorpack epoch s>
# Exit status 1 when a run failed.
set -u
BUILD=build
DO_BUILD=1
THREADS=2
EPOCHS=2
ROUNDS=1
STEPS=0
VENV=${HOME}/.cache/spire/tensorpack-venv
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --threads) THREADS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --venv) VENV=$2; shift 2 ;;
    --steps-per-epoch) STEPS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mnist_vs_tensorpack: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in THREADS EPOCHS ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "mnist_vs_tensorpack: --${v,,} needs a positive integer" >&2; exit 2; }
done
[[ $STEPS =~ ^[0-9]+$ ]] || { echo "mnist_vs_tensorpack: --steps-per-epoch needs an integer" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
DATA=${SPIRE_MNIST_DIR:-$SRC/../shared/data/mnist}
[[ -f $DATA/train-images-idx3-ubyte.gz ]] || { echo "mnist_vs_tensorpack: no MNIST in $DATA (set SPIRE_MNIST_DIR)" >&2; exit 1; }
DATA=$(cd "$DATA" && pwd)
if (( DO_BUILD )); then
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$SRC" -B "$BUILD" -DSPIRE_CUDA=OFF >/dev/null || exit 1
  cmake --build "$BUILD" -j2 --target mnist_convnet flop_peak >/dev/null || { echo "mnist_vs_tensorpack: build failed" >&2; exit 1; }
fi
SPIRE_BIN=$BUILD/examples/mnist_convnet
PEAK_BIN=$BUILD/bench/flop_peak
[[ -x $SPIRE_BIN && -x $PEAK_BIN ]] || { echo "mnist_vs_tensorpack: $SPIRE_BIN or $PEAK_BIN missing" >&2; exit 1; }

PY=$VENV/bin/python
if ! "$PY" -c 'import tensorflow, tensorpack' >/dev/null 2>&1; then
  echo "installing tensorflow-cpu 2.15.1 and tensorpack into $VENV ..."
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    apt-get install -y -qq python3-venv >/dev/null 2>&1 || true
    python3 -m venv "$VENV" || { echo "mnist_vs_tensorpack: cannot make a venv in $VENV" >&2; exit 1; }
  fi
  "$VENV/bin/pip" install --quiet 'tensorflow-cpu==2.15.1' tensorpack ||
    { echo "mnist_vs_tensorpack: could not install tensorflow-cpu and tensorpack" >&2; exit 1; }
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
# epoch_mean FILE: mean of "EPOCH n s" lines for n >= 2 (n = 1 when it is the only one)
epoch_mean() {
  awk '$1=="EPOCH"{t[$2]=$3; if ($2>m) m=$2}
       END{ if (m==0) {print "nan"; exit}
            s=0; c=0; for (e=(m>1?2:1); e<=m; ++e) {s+=t[e]; ++c}
            printf "%.3f\n", s/c }' "$1"
}
last_acc() { awk '$1=="VALIDATION_ACCURACY"{a=$3} END{print (a==""?"nan":a)}' "$1"; }

run_spire() {
  local out=$WORK/spire.$1
  local extra=()
  (( STEPS > 0 )) && extra=(--steps-per-epoch "$STEPS")
  if ! "$SPIRE_BIN" --data "$DATA" --logdir "$WORK/spire_log.$1" --max-epoch "$EPOCHS" \
       --threads "$THREADS" "${extra[@]}" >"$out.log" 2>&1; then
    echo "Spire run failed:"; tail -20 "$out.log"; FAILED=1; return
  fi
  # "Epoch 1 (global_step 468) finished, time:12.3 sec." and "validation_accuracy: 0.98"
  sed -n 's/.*Epoch \([0-9]*\) (global_step [0-9]*) finished, time:\([0-9.e+-]*\) sec.*/EPOCH \1 \2/p' "$out.log" >"$out"
  awk '/validation_accuracy: /{for(i=1;i<=NF;++i) if ($i=="validation_accuracy:") {++n; print "VALIDATION_ACCURACY", n, $(i+1)}}' "$out.log" >>"$out"
  echo "spire round $1: epochs $(awk '$1=="EPOCH"{printf "%s ", $3}' "$out")s, accuracy $(last_acc "$out")"
}
run_tensorpack() {
  local out=$WORK/tp.$1
  if ! "$PY" "$HERE/mnist_tensorpack.py" --data "$DATA" --logdir "$WORK/tp_log.$1" --epochs "$EPOCHS" \
       --threads "$THREADS" --steps-per-epoch "$STEPS" >"$out.log" 2>&1; then
    echo "tensorpack run failed:"; tail -20 "$out.log"; FAILED=1; return
  fi
  grep -oE '(EPOCH|VALIDATION_ACCURACY) [0-9]+ [0-9.e+-]+' "$out.log" >"$out"
  echo "tensorpack round $1: epochs $(awk '$1=="EPOCH"{printf "%s ", $3}' "$out")s, accuracy $(last_acc "$out")"
}

best_s=nan best_t=nan acc_s=nan acc_t=nan
for ((r = 1; r <= ROUNDS; ++r)); do
  run_spire "$r"
  run_tensorpack "$r"
  if [[ -s $WORK/spire.$r ]]; then
    m=$(epoch_mean "$WORK/spire.$r")
    if [[ $best_s == nan ]] || awk -v a="$m" -v b="$best_s" 'BEGIN{exit !(a<b)}'; then best_s=$m; acc_s=$(last_acc "$WORK/spire.$r"); fi
  fi
  if [[ -s $WORK/tp.$r ]]; then
    m=$(epoch_mean "$WORK/tp.$r")
    if [[ $best_t == nan ]] || awk -v a="$m" -v b="$best_t" 'BEGIN{exit !(a<b)}'; then best_t=$m; acc_t=$(last_acc "$WORK/tp.$r"); fi
  fi
done

# Multiply-adds per image of one training step (forward, input and filter gradients;
# conv0's input gradient is not computed): see mnist_convnet_logits.
flops=$(awk 'BEGIN{
  fwd = 28*28*32*9*1 + 2*(14*14*32*9*32) + 7*7*32*9*32 + 7*7*32*512 + 512*10
  conv0 = 28*28*32*9*1
  printf "%.4f", 2 * (3*fwd - conv0) * 128 / 1e9 }')
steps=$(( STEPS > 0 ? STEPS : 468 ))
echo "FLOPS convnet_step $flops"
"$PEAK_BIN" "$THREADS" 1.0 | tee "$WORK/peak"
peak=$(awk -v t="$THREADS" '$1=="PEAK" && $2==t {print $3}' "$WORK/peak")
echo "epoch (mean of epochs 2..$EPOCHS, best of $ROUNDS): Spire ${best_s} s (accuracy $acc_s), tensorpack ${best_t} s (accuracy $acc_t)"
awk -v f="$flops" -v s="$best_s" -v n="$steps" -v p="$peak" 'BEGIN{
  if (s=="nan" || p=="") {print "STEP_SHARE nan nan"; exit}
  r = f * n / s; printf "STEP_SHARE %.1f %.3f\n", r, r / p }'
awk -v s="$best_s" -v t="$best_t" 'BEGIN{
  if (s=="nan" || t=="nan") {print "RATIO mnist_epoch nan"; exit}
  printf "RATIO mnist_epoch %.3f\n", s / t }'
exit $FAILED

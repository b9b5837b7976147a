#!/usr/bin/env bash
# nanoGPT's CPU "baby" run, Spire against PyTorch (issue 27): the same model (4 layers,
# 4 heads, width 128, context 64, batch 12, no dropout, no biases), the same recipe (2000
# iterations, AdamW lr 1e-3 -> 1e-4 cosine with 100 warmup iterations, betas 0.9/0.99,
# weight decay 0.1 on the matrices and embeddings, clipping at 1) and the same data split
# (the file's distinct bytes as the vocabulary, the first 90% for training, the rest for
# validation) trained by build/examples/gpt and by bench/nanogpt_torch.py one after the
# other (not at once: each gets the machine). Each draws its own random batches (Spire
# from SplitMix64, PyTorch from torch.randint), so the curves agree in distribution, not
# step by step (tests/examples/gpt_parity_test.cc checks the steps). The validation loss is
# the mean over --eval-iters random validation batches every 250 iterations.
#
# Usage: bench/gpt_train_vs_torch.sh [--build DIR] [--data FILE] [--iters N] [--eval-iters N]
#                                    [--threads T] [--out DIR]
#   --build DIR       build directory with examples/gpt (default build; built first)
#   --data FILE       text file (default ../shared/data/shakespeare/shakespeare.txt)
#   --iters N         iterations (default 2000; a multiple of 250)
#   --eval-iters N    validation batches per evaluation (default 200, nanoGPT's default;
#                     the README's baby run uses 20, whose mean varies by about 0.01)
#   --threads T       threads of each engine (default 2)
#   --out DIR         where the logs and curves go (default bench/results/gpt_baby)
# Prints both curves side by side, the training times, and the line
#   FINAL <Spire val loss> <PyTorch val loss> <difference> <Spire s> <PyTorch s>
set -u
BUILD=build
DATA=""
ITERS=2000
EVAL_ITERS=200
THREADS=2
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --eval-iters) EVAL_ITERS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt_train_vs_torch: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
[[ -n $DATA ]] || DATA="$SRC/../shared/data/shakespeare/shakespeare.txt"
[[ -f $DATA ]] || { echo "gpt_train_vs_torch: $DATA not found (see ../shared/data/README.md)" >&2; exit 1; }
[[ -n $OUT ]] || OUT="$SRC/bench/results/gpt_baby"
(( ITERS % 250 == 0 )) || { echo "gpt_train_vs_torch: --iters must be a multiple of 250" >&2; exit 2; }
mkdir -p "$OUT"
cmake --build "$BUILD" -j"$(nproc)" --target gpt >/dev/null || { echo "gpt_train_vs_torch: building gpt failed" >&2; exit 1; }
python3 -c 'import torch' 2>/dev/null || { echo "gpt_train_vs_torch: python3 has no torch (pip install torch)" >&2; exit 1; }

echo "gpt_train_vs_torch: $(date -u '+%F %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  $ITERS iterations, eval every 250 on $EVAL_ITERS batches, $THREADS threads, data $DATA"

rm -rf "$OUT/spire_logdir"
START=$SECONDS
"$BUILD/examples/gpt" --config baby --data "$DATA" --max-iters "$ITERS" --lr-decay-iters "$ITERS" \
  --eval-interval 250 --eval-iters "$EVAL_ITERS" --threads "$THREADS" --logdir "$OUT/spire_logdir" \
  >"$OUT/spire.log" 2>&1 || { echo "gpt_train_vs_torch: Spire's run failed (see $OUT/spire.log)" >&2; tail -5 "$OUT/spire.log" >&2; exit 1; }
SPIRE_S=$(( SECONDS - START ))
START=$SECONDS
OMP_NUM_THREADS=$THREADS python3 "$HERE/nanogpt_torch.py" train --data "$DATA" --max_iters "$ITERS" \
  --lr_decay_iters "$ITERS" --eval_interval 250 --eval_iters "$EVAL_ITERS" --threads "$THREADS" \
  --out "$OUT/torch.json" >"$OUT/torch.log" 2>&1 || { echo "gpt_train_vs_torch: PyTorch's run failed (see $OUT/torch.log)" >&2; tail -5 "$OUT/torch.log" >&2; exit 1; }
TORCH_S=$(( SECONDS - START ))

python3 - "$OUT/spire_logdir/stats.json" "$OUT/torch.json" "$SPIRE_S" "$TORCH_S" "$ITERS" <<'EOF'
import json, sys
stats = json.load(open(sys.argv[1]))
torch_run = json.load(open(sys.argv[2]))
spire_s, torch_s, iters = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
# Spire's stats.json: one entry per epoch (250 iterations), after the epoch's steps.
spire_curve = {}
for e in stats:
    if "validation_loss" in e:
        spire_curve[int(e["global_step"])] = e["validation_loss"]
torch_curve = {p["iter"]: p["val_loss"] for p in torch_run["curve"]}
print("\n%6s %12s %12s %8s" % ("iter", "Spire val", "PyTorch val", "diff"))
for it in sorted(set(spire_curve) | set(torch_curve)):
    s, t = spire_curve.get(it), torch_curve.get(it)
    print("%6d %12s %12s %8s" % (it, "%.4f" % s if s is not None else "-", "%.4f" % t if t is not None else "-",
                                 "%+.4f" % (s - t) if s is not None and t is not None else ""))
s, t = spire_curve.get(iters), torch_curve.get(iters)
print("\nwall time: Spire %.0f s, PyTorch %.0f s (PyTorch's training steps alone %.0f s; torch %s)"
      % (spire_s, torch_s, torch_run["train_s"], torch_run["torch"]))
print("FINAL %.4f %.4f %+.4f %.0f %.0f" % (s, t, s - t, spire_s, torch_s))
EOF

// Classification losses and metrics as tensorpack's models use them
// (tfutils/symbolic_functions.py, tf.losses): cross-entropy with optional
// label smoothing, and the top-k error vector behind tensorpack's
// 'wrong-top1' / 'wrong-top5' summaries and ClassificationError validators
// (train/callbacks/inference.h). Built from the ops of core/ops, so they
// differentiate and run on every device those ops do.
#pragma once

#include <string>

#include "core/graph.h"

namespace spire {

/// Per-example softmax cross-entropy [N] of logits [N, K] against integer labels [N]
/// (i32 or i64). With label_smoothing e > 0 the target is onehot * (1 - e) + e / K
/// (TensorFlow's and PyTorch's smoothing: K counts the true class), so the loss is
/// (1 - e) * CE + e * mean_j(-log softmax_j). e must lie in [0, 1]; with e = 0 it is
/// exactly SparseSoftmaxCrossEntropyWithLogits. Needs K known when e > 0.
Output softmax_cross_entropy(const Output& logits, const Output& labels,
                             double label_smoothing = 0.0, const std::string& name = "");

/// tensorpack's prediction_incorrect: f32 [N], 1 where labels[i] is not among the
/// `topk` largest logits of row i (ties at the k-th value count as in, as in_top_k),
/// else 0. Its mean is the top-k error.
Output prediction_incorrect(const Output& logits, const Output& labels, int64_t topk = 1,
                            const std::string& name = "incorrect_vector");

}  // namespace spire

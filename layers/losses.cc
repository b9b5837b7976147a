// Cross-entropy with label smoothing and the top-k error vector (layers/losses.h).
#include "layers/losses.h"

#include "core/error.h"
#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/nn_ops.h"
#include "core/ops/reduction_ops.h"

namespace spire {

Output softmax_cross_entropy(const Output& logits, const Output& labels, double label_smoothing,
                             const std::string& name) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw_error("softmax_cross_entropy '", name, "': label_smoothing must lie in [0, 1], got ",
                label_smoothing);
  if (label_smoothing == 0.0) return ops::sparse_softmax_cross_entropy_with_logits(logits, labels, name);
  const Shape& s = logits.shape();
  if (s.rank() != 2 || s[1] <= 0)
    throw_error("softmax_cross_entropy '", name, "': label smoothing needs logits [N, K] with K ",
                "known and positive, got shape ", s.to_string());
  Output ce = ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
  Output uniform = ops::neg(ops::mean(ops::log_softmax(logits), {1}));
  return ops::add(ce * (1.0 - label_smoothing), uniform * label_smoothing, name);
}

Output prediction_incorrect(const Output& logits, const Output& labels, int64_t topk,
                            const std::string& name) {
  Output in = ops::in_top_k(logits, labels, topk);
  return ops::cast(ops::logical_not(in), DType::F32, name);
}

}  // namespace spire

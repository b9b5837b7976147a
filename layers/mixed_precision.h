// Mixed precision as a per-graph dtype policy (Keras' mixed_precision
// policy, PyTorch's autocast): one setting, PrecisionPolicy, says in which
// dtype the layers of a graph run their matrix products. Under
// kMixedBFloat16 / kMixedFloat16 a layer's matmul casts its f32 operands
// (activations and the f32 master weight) to bf16 / f16, multiplies them
// with f32 accumulation, and casts the rounded product back to f32;
// everything else (bias adds, activations, LayerNorm, softmax, losses,
// reductions, the optimizer and its slots) stays f32. The variables stay
// f32: the low-precision copy of a weight is a Cast node, so its gradient
// reaches the f32 variable through the Cast's gradient. Design and reasons:
// docs/training.md, "Mixed precision". f16 needs loss scaling:
// layers/loss_scale.h.
//
// The policy lives on the graph (Graph::extension), so every tower a
// trainer builds from the model follows it. Layers call autocast_matmul /
// autocast_batch_matmul where PyTorch's autocast lists matmul, bmm and
// linear; other layers (an attention op) may use autocast() the same way.
#pragma once

#include <string>

#include "core/graph.h"

namespace spire {

/// In which dtype layers compute their matrix products.
enum class PrecisionPolicy {
  /// Everything in the inputs' dtype (f32): the default.
  kFloat32,
  /// Matmuls in bf16 (f32 accumulation), the rest f32; no loss scaling needed.
  kMixedBFloat16,
  /// Matmuls in f16 (f32 accumulation), the rest f32; use LossScaleOptimizer.
  kMixedFloat16,
};

/// "float32", "mixed_bfloat16", "mixed_float16" (Keras' policy names).
const char* precision_policy_name(PrecisionPolicy p);
/// Keras' names above, or the short forms "f32"/"fp32", "bf16", "f16"/"fp16";
/// throws spire::Error listing them for any other name.
PrecisionPolicy parse_precision_policy(const std::string& name);
/// The dtype matmuls run in under `p`: F32, BF16 or F16.
DType compute_dtype(PrecisionPolicy p);

/// Sets the policy of the layers built in `g` (the default graph when null)
/// from now on.
void set_precision_policy(PrecisionPolicy p, Graph* g = nullptr);
/// The policy of `g` (the default graph when null); kFloat32 until set.
PrecisionPolicy precision_policy(Graph* g = nullptr);

/// Sets `g`'s policy while alive and restores the previous one after.
class PrecisionPolicyScope {
 public:
  explicit PrecisionPolicyScope(PrecisionPolicy p, Graph* g = nullptr);
  ~PrecisionPolicyScope();
  PrecisionPolicyScope(const PrecisionPolicyScope&) = delete;
  PrecisionPolicyScope& operator=(const PrecisionPolicyScope&) = delete;

 private:
  Graph& g_;
  PrecisionPolicy saved_;
};

/// `x` cast to the compute dtype of its graph's policy when the policy is
/// mixed and x is f32; x itself otherwise (f64 is never lowered).
Output autocast(const Output& x, const std::string& name = "");

/// ops::matmul under the policy of a's graph: with a mixed policy and f32
/// operands, both are rounded to the compute dtype, multiplied (f32
/// accumulation, the product rounded to the compute dtype) and the product
/// returned as f32: one MatMul node with compute_dtype set (the values of
/// cast -> 16-bit matmul -> cast, without the casts' copies); otherwise
/// ops::matmul.
Output autocast_matmul(const Output& a, const Output& b, bool transpose_a = false,
                       bool transpose_b = false, const std::string& name = "");
/// ops::batch_matmul under the policy of a's graph, as autocast_matmul.
Output autocast_batch_matmul(const Output& a, const Output& b, bool adj_a = false,
                             bool adj_b = false, const std::string& name = "");

}  // namespace spire

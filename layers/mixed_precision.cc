// The per-graph precision policy and the autocast helpers (see mixed_precision.h).
#include "layers/mixed_precision.h"

#include "core/ops.h"

namespace spire {

namespace {

/// The policy of one graph (Graph::extension).
struct PolicyState {
  PrecisionPolicy policy = PrecisionPolicy::kFloat32;
};

Graph& graph_or_default(Graph* g) { return g ? *g : default_graph(); }

/// Whether `a` and `b` are lowered under their graph's policy; sets *dt to the compute dtype.
bool lowered(const Output& a, const Output& b, DType* dt) {
  SPIRE_CHECK(a.valid() && b.valid(), "autocast matmul: an operand is not a valid graph output");
  *dt = compute_dtype(precision_policy(a.graph()));
  return *dt != DType::F32 && a.dtype() == DType::F32 && b.dtype() == DType::F32;
}

}  // namespace

const char* precision_policy_name(PrecisionPolicy p) {
  switch (p) {
    case PrecisionPolicy::kFloat32:
      return "float32";
    case PrecisionPolicy::kMixedBFloat16:
      return "mixed_bfloat16";
    case PrecisionPolicy::kMixedFloat16:
      return "mixed_float16";
  }
  return "unknown";
}

PrecisionPolicy parse_precision_policy(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "fp32") return PrecisionPolicy::kFloat32;
  if (name == "mixed_bfloat16" || name == "bf16") return PrecisionPolicy::kMixedBFloat16;
  if (name == "mixed_float16" || name == "f16" || name == "fp16")
    return PrecisionPolicy::kMixedFloat16;
  throw_error("unknown precision policy '", name,
              "'; expected float32 (f32, fp32), mixed_bfloat16 (bf16) or mixed_float16 (f16, fp16)");
}

DType compute_dtype(PrecisionPolicy p) {
  switch (p) {
    case PrecisionPolicy::kMixedBFloat16:
      return DType::BF16;
    case PrecisionPolicy::kMixedFloat16:
      return DType::F16;
    case PrecisionPolicy::kFloat32:
      break;
  }
  return DType::F32;
}

void set_precision_policy(PrecisionPolicy p, Graph* g) {
  graph_or_default(g).extension<PolicyState>().policy = p;
}

PrecisionPolicy precision_policy(Graph* g) {
  return graph_or_default(g).extension<PolicyState>().policy;
}

PrecisionPolicyScope::PrecisionPolicyScope(PrecisionPolicy p, Graph* g)
    : g_(graph_or_default(g)), saved_(precision_policy(&g_)) {
  set_precision_policy(p, &g_);
}

PrecisionPolicyScope::~PrecisionPolicyScope() { set_precision_policy(saved_, &g_); }

Output autocast(const Output& x, const std::string& name) {
  SPIRE_CHECK(x.valid(), "autocast: the input is not a valid graph output");
  const DType dt = compute_dtype(precision_policy(x.graph()));
  if (dt == DType::F32 || x.dtype() != DType::F32) return x;
  return ops::cast(x, dt, name);
}

Output autocast_matmul(const Output& a, const Output& b, bool transpose_a, bool transpose_b,
                       const std::string& name) {
  DType dt;
  if (!lowered(a, b, &dt)) return ops::matmul(a, b, transpose_a, transpose_b, name);
  // One mixed-precision MatMul node: the same values as cast -> 16-bit matmul -> cast.
  return ops::matmul(a, b, transpose_a, transpose_b, dt, name);
}

Output autocast_batch_matmul(const Output& a, const Output& b, bool adj_a, bool adj_b,
                             const std::string& name) {
  DType dt;
  if (!lowered(a, b, &dt)) return ops::batch_matmul(a, b, adj_a, adj_b, name);
  Output product = ops::batch_matmul(ops::cast(a, dt), ops::cast(b, dt), adj_a, adj_b);
  return ops::cast(product, DType::F32, name);
}

}  // namespace spire

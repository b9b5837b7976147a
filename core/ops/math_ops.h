// Graph-building functions for elementwise math with NumPy broadcasting,
// activations, comparisons, logical ops, select and cast. The ops are
// registered (with shape inference and gradients) in math_ops.cc; their
// kernels share one functor per op (kernels/functors.h) on CPU and CUDA.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

// Binary, broadcasting; both inputs must have the same dtype.
Output add(const Output& x, const Output& y, const std::string& name = "");
Output sub(const Output& x, const Output& y, const std::string& name = "");
Output mul(const Output& x, const Output& y, const std::string& name = "");
Output div(const Output& x, const Output& y, const std::string& name = "");
Output pow(const Output& x, const Output& y, const std::string& name = "");
Output maximum(const Output& x, const Output& y, const std::string& name = "");
Output minimum(const Output& x, const Output& y, const std::string& name = "");
/// Sum of several tensors of one dtype (broadcasting).
Output add_n(const std::vector<Output>& xs, const std::string& name = "");

// Unary.
Output neg(const Output& x, const std::string& name = "");
Output exp(const Output& x, const std::string& name = "");
Output log(const Output& x, const std::string& name = "");
Output sqrt(const Output& x, const std::string& name = "");
Output rsqrt(const Output& x, const std::string& name = "");
Output abs(const Output& x, const std::string& name = "");
Output square(const Output& x, const std::string& name = "");
Output sign(const Output& x, const std::string& name = "");
Output erf(const Output& x, const std::string& name = "");
Output relu(const Output& x, const std::string& name = "");
Output sigmoid(const Output& x, const std::string& name = "");
Output tanh(const Output& x, const std::string& name = "");
/// GELU's form, PyTorch's `approximate` argument: kNone is the exact x * Phi(x)
/// (PyTorch's default, nanoGPT's nn.GELU()), kTanh the tanh approximation
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of GPT-2 and llm.c. The op's
/// attr "approximate" holds PyTorch's spelling ("none" or "tanh").
enum class GeluApproximate { kNone, kTanh };
/// The GeluApproximate spelled `name` ("none" or "tanh"); throws spire::Error
/// naming `who` and the accepted spellings for any other string.
GeluApproximate parse_gelu_approximate(const std::string& name, const char* who = "Gelu");
/// PyTorch's spelling of `a`: "none" or "tanh".
const char* gelu_approximate_name(GeluApproximate a);
/// Exact GELU: x * Phi(x) (as PyTorch's default and TF's approximate=False).
Output gelu(const Output& x, const std::string& name = "");
/// GELU in the given form (torch.nn.functional.gelu(x, approximate=...)).
Output gelu(const Output& x, GeluApproximate approximate, const std::string& name = "");
/// The exact GELU's gradient, dy * (Phi(x) + x phi(x)) in one pass (GeluGrad; dy and x of
/// one shape and float dtype). Differentiable (second order).
Output gelu_grad(const Output& dy, const Output& x, const std::string& name = "");
Output softplus(const Output& x, const std::string& name = "");
Output leaky_relu(const Output& x, double alpha = 0.2, const std::string& name = "");

// Comparisons (bool result) and logical ops (bool inputs).
Output equal(const Output& x, const Output& y, const std::string& name = "");
Output not_equal(const Output& x, const Output& y, const std::string& name = "");
Output less(const Output& x, const Output& y, const std::string& name = "");
Output less_equal(const Output& x, const Output& y, const std::string& name = "");
Output greater(const Output& x, const Output& y, const std::string& name = "");
Output greater_equal(const Output& x, const Output& y, const std::string& name = "");
Output logical_and(const Output& x, const Output& y, const std::string& name = "");
Output logical_or(const Output& x, const Output& y, const std::string& name = "");
Output logical_not(const Output& x, const std::string& name = "");

/// Elementwise cond ? x : y with broadcasting of all three.
Output where(const Output& cond, const Output& x, const Output& y, const std::string& name = "");
inline Output select(const Output& cond, const Output& x, const Output& y,
                     const std::string& name = "") {
  return where(cond, x, y, name);
}
Output cast(const Output& x, DType dtype, const std::string& name = "");

}  // namespace spire::ops

namespace spire {
// Operator sugar on graph outputs (scalars take the dtype of the tensor).
Output operator+(const Output& a, const Output& b);
Output operator-(const Output& a, const Output& b);
Output operator*(const Output& a, const Output& b);
Output operator/(const Output& a, const Output& b);
Output operator-(const Output& a);
Output operator+(const Output& a, double b);
Output operator-(const Output& a, double b);
Output operator*(const Output& a, double b);
Output operator/(const Output& a, double b);
Output operator+(double a, const Output& b);
Output operator-(double a, const Output& b);
Output operator*(double a, const Output& b);
Output operator/(double a, const Output& b);
}  // namespace spire

// Helpers of the fusion tests (tests/core/fusion_test.cc, epilogue_fusion_test.cc): the
// op types of a traced run's steps, bitwise tensor equality, and random elementwise
// expressions over every fusable op.
#pragma once

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/support/op_test_util.h"

namespace spire::testing {

// Steps of a traced run by op type.
inline std::multiset<std::string> op_types(const StepStats& st) {
  std::multiset<std::string> ops;
  for (const TraceEvent& e : st.events)
    if (e.depth == 0) ops.insert(e.category);
  return ops;
}

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A random expression of `depth` over the inputs: every fusable op (unary and binary), with
// operands that broadcast in every way the kernel reads them.
inline Output random_expression(std::mt19937_64& rng, const std::vector<Output>& leaves, int depth) {
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  if (depth == 0) return leaves[static_cast<size_t>(pick(rng)) % leaves.size()];
  Output a = random_expression(rng, leaves, depth - 1);
  switch (pick(rng) % 22) {
    case 0: return ops::add(a, random_expression(rng, leaves, depth - 1));
    case 1: return ops::sub(a, random_expression(rng, leaves, depth - 1));
    case 2: return ops::mul(a, random_expression(rng, leaves, depth - 1));
    case 3: return ops::div(a, ops::add(ops::abs(random_expression(rng, leaves, depth - 1)), a * 0.0 + 0.5));
    case 4: return ops::maximum(a, random_expression(rng, leaves, depth - 1));
    case 5: return ops::minimum(a, random_expression(rng, leaves, depth - 1));
    case 6: return ops::gelu_grad(a, ops::tanh(a));  // GeluGrad does not broadcast
    case 7: return ops::neg(a);
    case 8: return ops::exp(ops::tanh(a));
    case 9: return ops::tanh(a);
    case 10: return ops::sigmoid(a);
    case 11: return ops::relu(a);
    case 12: return ops::sign(a) * a;
    case 13: return ops::square(a);
    case 14: return ops::gelu(a);
    case 15: return ops::gelu(a, ops::GeluApproximate::kTanh);
    case 16: return ops::leaky_relu(a, 0.1);
    case 17: return ops::sqrt(ops::abs(a));
    case 18: return ops::softplus(a);
    case 19: return ops::erf(a);
    case 20: return ops::log(ops::abs(a) + 1.0);
    default: return a * 1.5 + 0.25;
  }
}

}  // namespace spire::testing

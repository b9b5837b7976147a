// Measured convolution algorithms (SessionOptions::measure_conv_algorithms,
// kernels/cpu/conv_algorithm.h): the first run of each shape times each algorithm once per
// pass and session (Winograd for the forward pass and the input gradient), returns the chosen one's result (later runs give the same bits), and
// agrees with the fixed rule's result up to rounding.
#include <cstring>
#include <random>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct ConvStep {
  Graph g;
  Output x, w, dy, y, dx, dw;
  ConvStep(int64_t n, int64_t hw, int64_t c, int64_t o) {
    DefaultGraphGuard guard(g);
    x = ops::placeholder(DType::F32, {n, hw, hw, c}, "x");
    w = ops::placeholder(DType::F32, {3, 3, c, o}, "w");
    dy = ops::placeholder(DType::F32, {n, hw, hw, o}, "dy");
    y = ops::conv2d(x, w, {1, 1}, "SAME", {1, 1}, "fwd");
    dx = ops::conv2d_backprop_input(x, w, dy, {1, 1}, "SAME", {1, 1}, "bwd_input");
    dw = ops::conv2d_backprop_filter(x, w, dy, {1, 1}, "SAME", {1, 1}, "bwd_filter");
  }
};

int searches(const StepStats& st) {
  int n = 0;
  for (const TraceEvent& e : st.events) n += e.name == "conv algorithm search";
  return n;
}

TEST(ConvAlgorithms, MeasuredOnceAndTheChoiceIsKept) {
  ConvStep c(4, 12, 16, 16);
  std::mt19937_64 rng(7);
  FeedDict feeds = {{c.x, random_tensor(DType::F32, {4, 12, 12, 16}, rng)},
                    {c.w, random_tensor(DType::F32, {3, 3, 16, 16}, rng)},
                    {c.dy, random_tensor(DType::F32, {4, 12, 12, 16}, rng)}};
  SessionOptions o;
  o.measure_conv_algorithms = true;
  Session s(c.g, o);
  StepStats first, second;
  auto a = s.run({c.y, c.dx, c.dw}, feeds, {}, &first);
  auto b = s.run({c.y, c.dx, c.dw}, feeds, {}, &second);
  EXPECT_EQ(searches(first), 3) << "one search per pass";
  // Winograd is a candidate for the forward pass and the input gradient only.
  int with_winograd = 0;
  for (const TraceEvent& e : first.events)
    for (const auto& [k, v] : e.args) with_winograd += e.name == "conv algorithm search" && k == "winograd_ms";
  EXPECT_EQ(with_winograd, 2);
  EXPECT_EQ(searches(second), 0) << "the session keeps the choices";
  Session fixed(c.g);
  auto want = fixed.run({c.y, c.dx, c.dw}, feeds);
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(std::memcmp(a[k].raw_data(), b[k].raw_data(), a[k].nbytes()), 0)
        << "output " << k << ": the first run returned another algorithm's result than it kept";
    const float* pa = a[k].data<float>();
    const float* pw = want[k].data<float>();
    for (int64_t i = 0; i < a[k].num_elements(); ++i) ASSERT_NEAR(pa[i], pw[i], 1e-4) << k << " at " << i;
  }
  // Another session measures again.
  Session other(c.g, o);
  StepStats st;
  other.run({c.y}, feeds, {}, &st);
  EXPECT_EQ(searches(st), 1);
}

TEST(ConvAlgorithms, NotMeasuredByDefaultNorWhereOneAlgorithmApplies) {
  // 3 input channels (no Winograd) and 9 filters (not whole vectors: no direct kernel): only
  // im2col + GEMM applies.
  ConvStep c(2, 8, 3, 9);
  std::mt19937_64 rng(8);
  FeedDict feeds = {{c.x, random_tensor(DType::F32, {2, 8, 8, 3}, rng)},
                    {c.w, random_tensor(DType::F32, {3, 3, 3, 9}, rng)},
                    {c.dy, random_tensor(DType::F32, {2, 8, 8, 9}, rng)}};
  Session plain(c.g);
  StepStats st;
  plain.run({c.y, c.dx, c.dw}, feeds, {}, &st);
  EXPECT_EQ(searches(st), 0);
  SessionOptions o;
  o.measure_conv_algorithms = true;
  Session s(c.g, o);
  StepStats st2;
  s.run({c.y}, feeds, {}, &st2);
  EXPECT_EQ(searches(st2), 0);
}

}  // namespace
}  // namespace spire::testing

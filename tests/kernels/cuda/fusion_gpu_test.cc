// Fusion on a CUDA device (kernels/cuda/fused_program.cu; skipped with a message where no GPU
// is visible): the plan of a graph on cuda:0 runs its elementwise groups as FusedElementwise
// and its MatMul / Conv2D epilogues as FusedMatMul / FusedConv2D steps on the GPU, and their
// results equal the unfused GPU graph's (also when a group writes into a dying input's buffer). Every instruction runs its op's own functor, as the
// unfused kernels do, so the results are expected to be equal; the test allows a relative
// 1e-6 (f32) / 1e-14 (f64) and reports how many runs were bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "core/device_backend.h"
#include "tests/support/fusion_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

std::string skip_reason() {
  if (find_device_backend(DeviceType::CUDA) == nullptr) return "this build has no CUDA backend (SPIRE_CUDA=OFF)";
  if (device_count(DeviceType::CUDA) == 0) return "no CUDA device is visible on this machine";
  return {};
}

SessionOptions fusion(bool on, bool epilogues = true) {
  SessionOptions o;
  o.fuse_elementwise = on;
  o.fuse_epilogues = on && epilogues;
  return o;
}

// Runs y fused and unfused; expects close results and `op` among the fused run's steps.
// Returns whether the two were bit-identical.
bool expect_fused_equal(Graph& g, const Output& y, const FeedDict& feeds, const std::string& op,
                        bool epilogues = true) {
  Session off(g, fusion(false)), on(g, fusion(true, epilogues));
  const Tensor want = off.run({y}, feeds)[0];
  StepStats st;
  const Tensor got = on.run({y}, feeds, {}, &st)[0];
  EXPECT_GE(op_types(st).count(op), 1u) << op << " should run on the GPU:\n" << g.to_text();
  EXPECT_EQ(want.shape(), got.shape());
  const double tol = want.dtype() == DType::F32 ? 1e-6 : 1e-14;
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements() && bad < 5; ++i) {
    const double a = want.element_as_double(i), b = got.element_as_double(i);
    if (std::isnan(a) ? !std::isnan(b) : std::abs(a - b) > tol * (1 + std::abs(a))) {
      ++bad;
      ADD_FAILURE() << op << " element " << i << ": unfused " << a << ", fused " << b << "\n" << g.to_text();
    }
  }
  return bit_equal(want, got);
}

TEST(CudaFusion, FusedGroupsAndEpiloguesEqualTheUnfusedGpuGraph) {
  const std::string why = skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  std::mt19937_64 rng(20261128);
  int runs = 0, identical = 0;
  for (DType dt : {DType::F32, DType::F64}) {
    for (int trial = 0; trial < 12; ++trial) {
      Graph g;
      DefaultGraphGuard guard(g);
      DeviceScope scope(g, Device::cuda(0));
      const int64_t B = 3 + trial % 4, H = 7, C = 37 + trial;
      std::vector<Output> leaves = {ops::placeholder(dt, {-1, H, C}, "full"), ops::placeholder(dt, {C}, "row"),
                                    ops::placeholder(dt, {-1, 1, 1}, "column"), ops::placeholder(dt, {}, "scalar")};
      Output y = ops::add(random_expression(rng, leaves, 2 + trial % 4), leaves[0] * 0.5, "result");
      FeedDict feeds;
      const std::vector<Shape> shapes = {{B, H, C}, {C}, {B, 1, 1}, {}};
      for (size_t k = 0; k < leaves.size(); ++k) feeds.emplace_back(leaves[k], random_tensor(dt, shapes[k], rng, -2, 2));
      identical += expect_fused_equal(g, y, feeds, "FusedElementwise");
      ++runs;
    }
    {  // MatMul + bias + Gelu (tanh)
      Graph g;
      DefaultGraphGuard guard(g);
      DeviceScope scope(g, Device::cuda(0));
      Output a = ops::placeholder(dt, {33, 70}, "a"), w = ops::placeholder(dt, {70, 45}, "w");
      Output bias = ops::placeholder(dt, {45}, "bias");
      Output y = ops::gelu(ops::add(ops::matmul(a, w), bias), ops::GeluApproximate::kTanh, "out");
      FeedDict feeds = {{a, random_tensor(dt, {33, 70}, rng, -1, 1)}, {w, random_tensor(dt, {70, 45}, rng, -1, 1)},
                        {bias, random_tensor(dt, {45}, rng, -1, 1)}};
      identical += expect_fused_equal(g, y, feeds, "FusedMatMul");
      // Without epilogues the product dies at the FusedElementwise step, which may then
      // write its result into the product's buffer (in place).
      identical += expect_fused_equal(g, y, feeds, "FusedElementwise", false);
      runs += 2;
    }
    {  // Conv2D + residual + Relu
      Graph g;
      DefaultGraphGuard guard(g);
      DeviceScope scope(g, Device::cuda(0));
      Output x = ops::placeholder(dt, {2, 10, 10, 8}, "x"), f = ops::placeholder(dt, {3, 3, 8, 8}, "f");
      Output r = ops::placeholder(dt, {2, 10, 10, 8}, "residual");
      Output y = ops::relu(ops::add(r, ops::conv2d(x, f, {1, 1}, "SAME")), "out");
      FeedDict feeds = {{x, random_tensor(dt, {2, 10, 10, 8}, rng, -1, 1)},
                        {f, random_tensor(dt, {3, 3, 8, 8}, rng, -1, 1)},
                        {r, random_tensor(dt, {2, 10, 10, 8}, rng, -1, 1)}};
      identical += expect_fused_equal(g, y, feeds, "FusedConv2D");
      ++runs;
    }
  }
  std::printf("[ fusion ] %d of %d fused runs on cuda:0 were bit-identical to the unfused graph\n", identical,
              runs);
}

}  // namespace
}  // namespace spire::testing

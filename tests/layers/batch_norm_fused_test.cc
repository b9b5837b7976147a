// Tests of the fused BatchNorm path (FusedBatchNorm, core/ops/batch_norm_ops.h)
// against the layer built from primitive ops (BatchNorm fused(false)): outputs,
// gradients of x, gamma and beta, and the EMA updates agree in f64 and f32,
// channels last and on another axis; the fused kernels give bit-identical
// results with 1 and 2 threads; double backward through a fused layer is a
// clear error; bad parameter shapes are clear errors.
#include <random>

#include "layers/layers.h"
#include "tests/layers/layer_test_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct BnRun {
  std::vector<Tensor> values;  // y, dx, dgamma, dbeta, mean/EMA, variance/EMA
};

// One BatchNorm layer on x (random, with a channel offset so means are not 0),
// loss = sum(y * w) for a random w, one run of y and the gradients with the
// update ops, then the EMAs.
BnRun run_bn(bool fused, DType dt, const Shape& shape, int64_t axis, int threads) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(11);
  Tensor xv = random_tensor(dt, shape, rng, -1, 3);
  Tensor wv = random_tensor(dt, shape, rng, -2, 2);
  Output x = ops::placeholder(dt, shape, "x");
  Output y = BatchNorm("bn", x,
                       BatchNormOptions().axis(axis).fused(fused).epsilon(1e-3).momentum(0.8));
  EXPECT_EQ(g.find_node("bn/FusedBatchNorm") != nullptr, fused);
  Output loss = ops::sum(y * ops::constant(wv));
  Node* gamma = g.find_node("bn/gamma");
  Node* beta = g.find_node("bn/beta");
  std::vector<Output> grads = gradients({loss}, {x, gamma->output(0), beta->output(0)});
  SessionOptions opts;
  opts.num_threads = threads;
  Session s(g, opts);
  s.run_targets({global_variables_initializer(&g)});
  const int64_t c = gamma->output_shape(0)[0];
  Tensor gv = random_tensor(dt, {c}, rng, 0.5, 2), bv = random_tensor(dt, {c}, rng, -1, 1);
  s.set_variable_value(gamma, gv);
  s.set_variable_value(beta, bv);
  std::vector<Output> fetch = {y, grads[0], grads[1], grads[2]};
  std::vector<Node*> updates;
  for (const Output& o : g.get_collection(GraphKeys::UPDATE_OPS)) updates.push_back(o.node);
  BnRun r;
  r.values = s.run(fetch, {{x, xv}}, updates);
  r.values.push_back(s.variable_value(g.find_node("bn/mean/EMA")));
  r.values.push_back(s.variable_value(g.find_node("bn/variance/EMA")));
  return r;
}

void expect_agree(const BnRun& a, const BnRun& b, double tol) {
  const char* names[] = {"y", "dx", "dgamma", "dbeta", "mean/EMA", "variance/EMA"};
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    std::vector<double> va = vals(a.values[i]), vb = vals(b.values[i]);
    ASSERT_EQ(va.size(), vb.size()) << names[i];
    double worst = 0;
    for (size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::abs(va[j] - vb[j]) / std::max(1.0, std::abs(vb[j])));
    EXPECT_LE(worst, tol) << names[i];
  }
}

TEST(FusedBatchNorm, MatchesUnfusedLayerF64) {
  expect_agree(run_bn(true, DType::F64, {4, 3, 5, 6}, -1, 1),
               run_bn(false, DType::F64, {4, 3, 5, 6}, -1, 1), 1e-12);
  expect_agree(run_bn(true, DType::F64, {3, 4, 5, 2}, 1, 1),
               run_bn(false, DType::F64, {3, 4, 5, 2}, 1, 1), 1e-12);
  expect_agree(run_bn(true, DType::F64, {7, 5}, -1, 2), run_bn(false, DType::F64, {7, 5}, -1, 2),
               1e-12);
}

TEST(FusedBatchNorm, MatchesUnfusedLayerF32) {
  expect_agree(run_bn(true, DType::F32, {8, 6, 6, 16}, -1, 2),
               run_bn(false, DType::F64, {8, 6, 6, 16}, -1, 1), 2e-5);
  expect_agree(run_bn(true, DType::F32, {4, 8, 3, 3}, 1, 2),
               run_bn(false, DType::F64, {4, 8, 3, 3}, 1, 1), 2e-5);
}

// Row blocks of kernels/cpu/batch_norm_kernels.cc are fixed, so the thread
// count cannot change a bit (1000 rows: many blocks and a ragged last one).
// In f64 too: f32 values summed in double and rounded back to f32 hide a
// regrouping of the sums; f64 shows it.
TEST(FusedBatchNorm, ThreadCountDoesNotChangeResults) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t axis : {int64_t{-1}, int64_t{1}}) {
      BnRun one = run_bn(true, dt, {10, 10, 10, 24}, axis, 1);
      BnRun two = run_bn(true, dt, {10, 10, 10, 24}, axis, 2);
      for (size_t i = 0; i < one.values.size(); ++i)
        EXPECT_EQ(vals(one.values[i]), vals(two.values[i]))
            << dtype_name(dt) << " value " << i << " axis " << axis;
    }
}

TEST(FusedBatchNorm, SecondOrderNeedsTheUnfusedLayer) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {4, 3}, "x");
  Output y = BatchNorm("bn", x);
  Output gx = gradients({ops::sum(ops::square(y))}, {x})[0];
  expect_error([&] { gradients({ops::sum(gx)}, {x}); },
               {"no gradient defined for op FusedBatchNormGrad"});
  Output y2 = BatchNorm("bn2", x, BatchNormOptions().fused(false));
  Output gx2 = gradients({ops::sum(ops::square(y2 * x))}, {x})[0];
  EXPECT_TRUE(gradients({ops::sum(gx2)}, {x})[0].valid());
}

TEST(FusedBatchNorm, BadParameterShapesAreClearErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 4, 4, 3}, "x");
  Output c3 = ops::constant(Tensor::full(DType::F32, {3}, 1.0));
  Output c4 = ops::constant(Tensor::full(DType::F32, {4}, 1.0));
  expect_error([&] { ops::fused_batch_norm(x, c4, c3, 1e-5, -1, "bn"); },
               {"FusedBatchNorm", "bn", "must have shape [3]", "[4]"});
  expect_error([&] { ops::fused_batch_norm(x, c3, c3, 1e-5, 4, "bn_axis"); },
               {"axis 4 is out of range for rank 4"});
  Output c3d = ops::constant(Tensor::full(DType::F64, {3}, 1.0));
  expect_error([&] { ops::fused_batch_norm(x, c3d, c3, 1e-5, -1, "bn_dtype"); }, {"bn_dtype"});
  Output v = ops::placeholder(DType::F32, {-1, 3}, "v");
  Output yv = ops::fused_batch_norm(v, c3, c3, 1e-5, -1, "runtime").y;
  Session s(g);
  expect_error([&] { s.run({yv}, {{v, Tensor::zeros(DType::F32, {0, 3})}}); },
               {"FusedBatchNorm", "runtime", "no elements per channel"});
}

}  // namespace
}  // namespace spire::testing

// Autodiff behaviour beyond per-op checks: summing gradients of outputs with
// several consumers, unreachable xs, stop_gradient, grad_ys, the error for
// ops without gradient, and gradients of gradients.
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

SPIRE_REGISTER_OP("TestNoGrad")
    .cpu_only()  // test-only: CPU kernels only
    .input("x")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); });
SPIRE_STATIC_INIT(test_no_grad_kernel) {
  KernelRegistry::global().add("TestNoGrad", DeviceType::CPU, DType::F64,
                               [](KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); });
}
SPIRE_FORWARD_TEST(TestNoGrad, PassesThrough) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::scalar(3, DType::F64);
  expect_tensor(run1(g.add_node("TestNoGrad", {x})->output(0)), {}, {3});
}

TEST(Gradients, SumsOverConsumers) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {}, "x");
  Output y = x * x + ops::exp(x) + x;  // dy/dx = 2x + e^x + 1
  Output gx = gradient(y, x);
  Tensor r = run1(gx, {{x, Tensor::scalar<double>(0.5)}});
  EXPECT_NEAR(r.item<double>(), 1.0 + std::exp(0.5) + 1.0, 1e-12);
}

TEST(Gradients, UnreachableXHasNoGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {}, "x");
  Output z = ops::placeholder(DType::F64, {}, "z");
  Output y = x * 2.0;
  auto gs = gradients({y}, {x, z});
  EXPECT_TRUE(gs[0].valid());
  EXPECT_FALSE(gs[1].valid());
  // Blocked by stop_gradient: also "no gradient".
  EXPECT_FALSE(gradient(ops::stop_gradient(x) * 3.0, x).valid());
}

TEST(Gradients, GradYsWeightTheOutputs) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {2}, "x");
  Output y = x * 3.0;
  Output w = ops::constant(Tensor::from_vector<double>({2}, {1, -2}));
  Output gx = gradients({y}, {x}, {w})[0];
  expect_tensor(run1(gx, {{x, Tensor::from_vector<double>({2}, {5, 6})}}), {2}, {3, -6});
  expect_error([&] { gradients({y}, {x}, {ops::cast(w, DType::F32)}); }, {"grad_ys[0]", "f32", "f64"});
}

TEST(Gradients, ErrorNamesNodeWithoutGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {}, "x");
  Output mid = g.add_node("TestNoGrad", {x * 2.0}, {}, "opaque")->output(0);
  Output y = mid * mid;
  expect_error([&] { gradient(y, x); }, {"no gradient defined", "TestNoGrad", "'opaque'"});
  // Wrapping it in stop_gradient makes it a constant for autodiff.
  Output y2 = ops::stop_gradient(mid) * x;
  EXPECT_TRUE(gradient(y2, x).valid());
}

TEST(Gradients, SecondOrder) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {}, "x");
  Output y = x * x * x + ops::tanh(x);  // y' = 3x^2 + 1 - tanh^2; y'' = 6x - 2 tanh (1 - tanh^2)
  Output d1 = gradient(y, x);
  Output d2 = gradient(d1, x);
  Output d3 = gradient(d2, x);
  double xv = 0.7, t = std::tanh(xv);
  auto r = run({d1, d2, d3}, {{x, Tensor::scalar<double>(xv)}});
  EXPECT_NEAR(r[0].item<double>(), 3 * xv * xv + 1 - t * t, 1e-12);
  EXPECT_NEAR(r[1].item<double>(), 6 * xv - 2 * t * (1 - t * t), 1e-12);
  // y''' = 6 - 2 (1 - t^2)(1 - 3 t^2)
  EXPECT_NEAR(r[2].item<double>(), 6 - 2 * (1 - t * t) * (1 - 3 * t * t), 1e-12);
}

TEST(Gradients, IntegerPathsCarryNoGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {2}, "x");
  Output y = ops::cast(ops::cast(x, DType::I32), DType::F64) + x;
  expect_tensor(run1(gradient(y, x), {{x, Tensor::from_vector<double>({2}, {1.5, 2.5})}}), {2}, {1, 1});
}

TEST(Gradients, VariablesAsXs) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output w = ops::variable({2}, DType::F64, "w");
  Output init = ops::assign(w, ops::constant(Tensor::from_vector<double>({2}, {1, 2})));
  Output loss = w * w;
  Output gw = gradient(loss, w);
  Output step = ops::assign_sub(w, gw * 0.25);
  Session s(g);
  s.run({init});
  s.run({step});  // w -= 0.25 * 2w  => w / 2
  expect_tensor(s.run({w})[0], {2}, {0.5, 1});
}

}  // namespace
}  // namespace spire::testing

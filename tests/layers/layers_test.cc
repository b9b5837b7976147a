// Tests of layers/layers.h except BatchNorm (batch_norm_test.cc): variable
// names, shapes and defaults, output names and shapes, forward values against
// hand-computed references on tiny f64 inputs, argscope precedence (explicit >
// innermost argscope > default, nested scopes, per-graph state, argument
// checks), Dropout following is_training, regularize_cost, and error messages.
#include "layers/layers.h"

#include <cmath>
#include <random>

#include "tests/layers/layer_test_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

std::vector<double> iota(int64_t n, double start = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i);
  return v;
}

/// Op type of the node feeding the "output" identity (the activation, if any).
std::string pre_output_op(const Output& out) {
  EXPECT_EQ(out.node->op_type(), "Identity");
  return out.node->input(0).node->op_type();
}

// ---- FullyConnected ---------------------------------------------------------------------------

TEST(LayerFullyConnected, VariablesShapesAndForward) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 1, 3}, "x");
  Output y = FullyConnected("fc0", x, 2);
  EXPECT_EQ(y.node->name(), "fc0/output");
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.dtype(), DType::F64);
  EXPECT_EQ(names_of(trainable_variables()), (std::vector<std::string>{"fc0/W", "fc0/b"}));
  EXPECT_EQ(var_node(env.g, "fc0/W")->output_shape(0), (Shape{3, 2}));
  EXPECT_EQ(var_node(env.g, "fc0/b")->output_shape(0), (Shape{2}));
  EXPECT_EQ(pre_output_op(y), "Add");  // identity activation by default

  auto s = init_session(env.g);
  // Bias defaults to zeros.
  expect_tensor(s->variable_value(var_node(env.g, "fc0/b")), {2}, {0, 0}, 0);
  s->set_variable_value(var_node(env.g, "fc0/W"), f64({3, 2}, {1, 2, 3, 4, 5, 6}));
  s->set_variable_value(var_node(env.g, "fc0/b"), f64({2}, {0.5, -1}));
  Tensor out = s->run({y}, {{x, f64({2, 1, 3}, {1, 0, -1, 2, 1, 0})}})[0];
  // [1,0,-1] @ W = [-4, -4]; [2,1,0] @ W = [5, 8]; plus b.
  expect_tensor(out, {2, 2}, {-3.5, -5, 5.5, 7}, 1e-12);
}

TEST(LayerFullyConnected, ActivationNoBiasAndUnknownBatch) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {-1, 2}, "x");
  Output y =
      FullyConnected("fc", x, 2, FullyConnectedOptions().activation(ops::relu).use_bias(false));
  EXPECT_EQ(y.shape(), (Shape{-1, 2}));
  EXPECT_EQ(pre_output_op(y), "Relu");
  EXPECT_EQ(env.g.find_node("fc/b"), nullptr);
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "fc/W"), f64({2, 2}, {1, -1, 2, -2}));
  Tensor out = s->run({y}, {{x, f64({3, 2}, {1, 1, -1, 0, 0, 0.5})}})[0];
  // x @ W: [3, -3], [-1, 1], [1, -1]; relu.
  expect_tensor(out, {3, 2}, {3, 0, 0, 1, 1, 0}, 1e-12);
}

TEST(LayerFullyConnected, DefaultKernelInitializerIsVarianceScaling2FanIn) {
  GraphEnv env;
  env.g.set_seed(3);
  Output x = ops::placeholder(DType::F64, {-1, 400}, "x");
  FullyConnected("fc", x, 100);
  auto s = init_session(env.g);
  std::vector<double> w = vals(s->variable_value(var_node(env.g, "fc/W")));
  ASSERT_EQ(w.size(), 40000u);
  double sum = 0, sq = 0, mx = 0;
  for (double v : w) {
    sum += v;
    sq += v * v;
    mx = std::max(mx, std::abs(v));
  }
  const double mean = sum / 40000, sd = std::sqrt(sq / 40000 - mean * mean);
  const double expected_sd = std::sqrt(2.0 / 400);  // variance scale / fan_in
  EXPECT_NEAR(mean, 0.0, 0.003);
  EXPECT_NEAR(sd, expected_sd, 0.03 * expected_sd);
  // Truncated at two standard deviations of the underlying (corrected) normal.
  EXPECT_LE(mx, 2 * expected_sd / 0.87962566 + 1e-9);
}

// ---- Conv2D
// ---------------------------------------------------------------------------------------

TEST(LayerConv2D, VariablesDefaultsAndShapes) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {-1, 5, 5, 3}, "x");
  Output y = Conv2D("conv0", x, 4, 3);
  EXPECT_EQ(y.node->name(), "conv0/output");
  EXPECT_EQ(y.shape(), (Shape{-1, 5, 5, 4}));  // SAME, stride 1 by default
  EXPECT_EQ(var_node(env.g, "conv0/W")->output_shape(0), (Shape{3, 3, 3, 4}));
  EXPECT_EQ(var_node(env.g, "conv0/b")->output_shape(0), (Shape{4}));
  EXPECT_EQ(pre_output_op(y), "Add");
  Output conv = y.node->input(0).node->input(0);
  EXPECT_EQ(conv.node->op_type(), "Conv2D");
  EXPECT_EQ(conv.node->attr<std::string>("padding"), "SAME");
  EXPECT_EQ(conv.node->attr<std::vector<int64_t>>("strides"), (std::vector<int64_t>{1, 1}));

  EXPECT_EQ(Conv2D("conv1", x, 2, {3, 1}, Conv2DOptions().strides(2)).shape(),
            (Shape{-1, 3, 3, 2}));
  EXPECT_EQ(var_node(env.g, "conv1/W")->output_shape(0), (Shape{3, 1, 3, 2}));
  EXPECT_EQ(Conv2D("conv2", x, 2, 3, Conv2DOptions().padding("valid")).shape(),
            (Shape{-1, 3, 3, 2}));
  EXPECT_EQ(Conv2D("conv3", x, 2, 2, Conv2DOptions().dilation_rate(2).padding("VALID")).shape(),
            (Shape{-1, 3, 3, 2}));
  // He-style default: W is random, not zero; b is zero.
  auto s = init_session(env.g);
  std::vector<double> w = vals(s->variable_value(var_node(env.g, "conv0/W")));
  double sq = 0;
  for (double v : w) sq += v * v;
  EXPECT_GT(sq, 0.0);
  expect_tensor(s->variable_value(var_node(env.g, "conv0/b")), {4}, {0, 0, 0, 0}, 0);
}

TEST(LayerConv2D, ForwardValues) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {1, 3, 3, 1}, "x");
  Output y = Conv2D("c", x, 1, 2, Conv2DOptions().padding("VALID"));
  Output z = Conv2D("same", x, 1, 2, Conv2DOptions().use_bias(false).activation(ops::neg));
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "c/W"), f64({2, 2, 1, 1}, {1, 0, 0, 1}));
  s->set_variable_value(var_node(env.g, "c/b"), f64({1}, {1}));
  s->set_variable_value(var_node(env.g, "same/W"), f64({2, 2, 1, 1}, {1, 0, 0, 1}));
  auto out = s->run({y, z}, {{x, f64({1, 3, 3, 1}, iota(9))}});
  // out[i][j] = x[i][j] + x[i+1][j+1] + b.
  expect_tensor(out[0], {1, 2, 2, 1}, {7, 9, 13, 15}, 1e-12);
  // SAME (k=2: pad 0 before, 1 after), negated: x[i][j] + x[i+1][j+1] (0 outside).
  expect_tensor(out[1], {1, 3, 3, 1}, {-6, -8, -3, -12, -14, -6, -7, -8, -9}, 1e-12);
}

// ---- Conv2DTranspose
// --------------------------------------------------------------------------------

/// Direct transposed convolution: y[n, i*s + a - pad, j*s + b - pad, f] += x[n, i, j, c] * W[a, b,
/// f, c].
std::vector<double> deconv_reference(const std::vector<double>& x, const Shape& xs,
                                     const std::vector<double>& w, const Shape& ws, int64_t s,
                                     int64_t oh, int64_t ow, int64_t pad_h, int64_t pad_w) {
  const int64_t n = xs[0], h = xs[1], wd = xs[2], c = xs[3], kh = ws[0], kw = ws[1], f = ws[2];
  std::vector<double> y(static_cast<size_t>(n * oh * ow * f), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < wd; ++j)
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t q = 0; q < kw; ++q) {
            int64_t oy = i * s + a - pad_h, ox = j * s + q - pad_w;
            if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
            for (int64_t fi = 0; fi < f; ++fi)
              for (int64_t ci = 0; ci < c; ++ci)
                y[static_cast<size_t>(((b * oh + oy) * ow + ox) * f + fi)] +=
                    x[static_cast<size_t>(((b * h + i) * wd + j) * c + ci)] *
                    w[static_cast<size_t>(((a * kw + q) * f + fi) * c + ci)];
          }
  return y;
}

TEST(LayerConv2DTranspose, ShapesAndVariables) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {-1, 2, 2, 2}, "x");
  Output y = Conv2DTranspose("up", x, 3, 2, Conv2DTransposeOptions().strides(2));
  EXPECT_EQ(y.node->name(), "up/output");
  EXPECT_EQ(y.shape(), (Shape{-1, 4, 4, 3}));
  EXPECT_EQ(var_node(env.g, "up/W")->output_shape(0),
            (Shape{2, 2, 3, 2}));  // [kh, kw, filters, in]
  EXPECT_EQ(var_node(env.g, "up/b")->output_shape(0), (Shape{3}));
  EXPECT_EQ(
      Conv2DTranspose("v", x, 1, 3, Conv2DTransposeOptions().strides(2).padding("VALID")).shape(),
      (Shape{-1, 5, 5, 1}));  // (2 - 1) * 2 + 3
  EXPECT_EQ(Conv2DTranspose("s1", x, 1, 3).shape(), (Shape{-1, 2, 2, 1}));
  // VALID with k < stride: in * stride (TF's deconv_output_length).
  Output v1 = Conv2DTranspose("v1", x, 1, 1, Conv2DTransposeOptions().strides(2).padding("VALID"));
  EXPECT_EQ(v1.shape(), (Shape{-1, 4, 4, 1}));
  auto s = init_session(env.g);
  std::mt19937_64 rng(1);
  auto out = s->run({y, v1}, {{x, random_tensor(DType::F32, {2, 2, 2, 2}, rng)}});
  EXPECT_EQ(out[0].shape(), (Shape{2, 4, 4, 3}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 4, 4, 1}));
}

TEST(LayerConv2DTranspose, ForwardValues) {
  GraphEnv env;
  Output x1 = ops::placeholder(DType::F64, {1, 2, 2, 1}, "x1");
  Output y1 = Conv2DTranspose("d1", x1, 1, 2, Conv2DTransposeOptions().strides(2).use_bias(false));
  Output x2 = ops::placeholder(DType::F64, {2, 3, 3, 2}, "x2");
  Output y2 = Conv2DTranspose("d2", x2, 3, 3, Conv2DTransposeOptions().strides(2));
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "d1/W"), f64({2, 2, 1, 1}, {1, 2, 3, 4}));
  std::mt19937_64 rng(5);
  Tensor w2 = random_tensor(DType::F64, {3, 3, 3, 2}, rng),
         x2v = random_tensor(DType::F64, {2, 3, 3, 2}, rng);
  s->set_variable_value(var_node(env.g, "d2/W"), w2);
  s->set_variable_value(var_node(env.g, "d2/b"), f64({3}, {0.5, -0.25, 1}));
  auto out = s->run({y1, y2}, {{x1, f64({1, 2, 2, 1}, {1, 2, 3, 4})}, {x2, x2v}});
  // Each input pixel scatters x[i][j] * W into the 2x2 block at (2i, 2j).
  expect_tensor(out[0], {1, 4, 4, 1}, {1, 2, 2, 4, 3, 4, 6, 8, 3, 6, 4, 8, 9, 12, 12, 16}, 1e-12);
  // SAME, k=3, s=2, in 3 -> out 6: the forward conv pads 1 in total, 0 before.
  std::vector<double> ref =
      deconv_reference(vals(x2v), {2, 3, 3, 2}, vals(w2), {3, 3, 3, 2}, 2, 6, 6, 0, 0);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += std::vector<double>{0.5, -0.25, 1}[i % 3];
  expect_tensor(out[1], {2, 6, 6, 3}, ref, 1e-12);
}

// ---- pooling, flatten, dropout ------------------------------------------------------------------

TEST(LayerPooling, MaxAvgGlobalValues) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {1, 4, 4, 1}, "x");
  Output mp = MaxPooling("pool0", x, 2);
  Output ap = AvgPooling("pool1", x, 2);
  Output mp1 = MaxPooling("pool2", x, 2, PoolingOptions().strides(1));
  Output mps = MaxPooling("pool3", x, 3, PoolingOptions().strides(2).padding("same"));
  EXPECT_EQ(mp.node->name(), "pool0/output");
  EXPECT_EQ(mp.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(mp1.shape(), (Shape{1, 3, 3, 1}));
  EXPECT_EQ(mps.shape(), (Shape{1, 2, 2, 1}));
  Output x2 = ops::placeholder(DType::F64, {2, 2, 2, 3}, "x2");
  Output gap = GlobalAvgPooling("gap", x2);
  EXPECT_EQ(gap.node->name(), "gap/output");
  EXPECT_EQ(gap.shape(), (Shape{2, 3}));
  auto s = init_session(env.g);
  auto out = s->run({mp, ap, mp1, gap},
                    {{x, f64({1, 4, 4, 1}, iota(16))}, {x2, f64({2, 2, 2, 3}, iota(24))}});
  expect_tensor(out[0], {1, 2, 2, 1}, {6, 8, 14, 16}, 0);
  expect_tensor(out[1], {1, 2, 2, 1}, {3.5, 5.5, 11.5, 13.5}, 1e-12);
  expect_tensor(out[2], {1, 3, 3, 1}, {6, 7, 8, 10, 11, 12, 14, 15, 16}, 0);
  // Batch 0 channel c: mean of 1+c, 4+c, 7+c, 10+c = 5.5 + c; batch 1: 17.5 + c.
  expect_tensor(out[3], {2, 3}, {5.5, 6.5, 7.5, 17.5, 18.5, 19.5}, 1e-12);
}

TEST(LayerFlatten, ShapesAndValues) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {-1, 2, 3}, "x");
  Output y = Flatten("flat", x);
  EXPECT_EQ(y.node->name(), "flat/output");
  EXPECT_EQ(y.shape(), (Shape{-1, 6}));
  Tensor out = run1(y, {{x, f64({2, 2, 3}, iota(12))}});
  expect_tensor(out, {2, 6}, iota(12), 0);
  EXPECT_EQ(batch_flatten(ops::placeholder(DType::F32, {4, -1, 2})).shape(), (Shape{4, -1}));
  expect_error(
      [&] {
        batch_flatten(ops::placeholder(DType::F32, {-1, -1, 2}));
      },
      {"batch_flatten", "f32[?, ?, 2]"});
}

TEST(LayerDropout, FollowsIsTraining) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {1000}, "x");
  Output outside = Dropout("d0", x);  // no tower: training
  EXPECT_EQ(outside.node->name(), "d0/output");
  EXPECT_EQ(pre_output_op(outside), "Dropout");
  EXPECT_EQ(pre_output_op(Dropout("d1", x, DropoutOptions().training(false))), "Placeholder");
  {
    TowerContext tower("tower0", true);
    Output d = Dropout("d", x);
    EXPECT_EQ(d.node->name(), "tower0/d/output");
    EXPECT_EQ(pre_output_op(d), "Dropout");
    EXPECT_EQ(pre_output_op(Dropout("off", x, DropoutOptions().training(false))), "Placeholder");
    EXPECT_EQ(pre_output_op(Dropout("zero", x, DropoutOptions().rate(0.0))), "Placeholder");
  }
  {
    TowerContext pred("pred", false);
    Output d = Dropout("d", x);
    EXPECT_EQ(pre_output_op(d), "Placeholder");
    EXPECT_EQ(pre_output_op(Dropout("on", x, DropoutOptions().training(true))), "Dropout");
  }
  // Values: inverted dropout with rate 0.25 keeps ~75% scaled by 4/3.
  Output d = Dropout("dv", x, DropoutOptions().rate(0.25));
  std::vector<double> ones(1000, 1.0);
  Tensor out = run1(d, {{x, f64({1000}, ones)}});
  int kept = 0;
  for (double v : vals(out)) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 4.0 / 3.0) < 1e-12) << v;
    kept += v != 0.0;
  }
  EXPECT_NEAR(kept / 1000.0, 0.75, 0.06);
}

// ---- argscope
// -------------------------------------------------------------------------------------

TEST(LayerArgScope, ExplicitBeatsArgScopeBeatsDefault) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {2, 4, 4, 2}, "x");
  Output f = ops::placeholder(DType::F32, {2, 3}, "f");
  {
    ArgScope scope({LayerKind::Conv2D, LayerKind::FullyConnected},
                   LayerArgs().activation(ops::relu).use_bias(false));
    Output c0 = Conv2D("c0", x, 2, 3);
    EXPECT_EQ(pre_output_op(c0), "Relu");
    EXPECT_EQ(env.g.find_node("c0/b"), nullptr);
    Output fc0 = FullyConnected("fc0", f, 2);
    EXPECT_EQ(pre_output_op(fc0), "Relu");
    EXPECT_EQ(env.g.find_node("fc0/b"), nullptr);
    // Explicit options win.
    Output c1 =
        Conv2D("c1", x, 2, 3, Conv2DOptions().activation(activations::sigmoid()).use_bias(true));
    EXPECT_EQ(pre_output_op(c1), "Sigmoid");
    EXPECT_NE(env.g.find_node("c1/b"), nullptr);
    // Kinds not listed are unaffected.
    Output t0 = Conv2DTranspose("t0", x, 2, 3);
    EXPECT_EQ(pre_output_op(t0), "Add");
  }
  // Back to the built-in defaults.
  Output c2 = Conv2D("c2", x, 2, 3);
  EXPECT_EQ(pre_output_op(c2), "Add");
  EXPECT_NE(env.g.find_node("c2/b"), nullptr);
}

TEST(LayerArgScope, NestedScopesMergeFieldByField) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {2, 8, 8, 2}, "x");
  ArgScope outer({LayerKind::Conv2D}, LayerArgs().activation(ops::relu).padding("VALID"));
  {
    ArgScope inner(Conv2DOptions().activation(ops::tanh).strides(2));
    Output c = Conv2D("c_inner", x, 2, 3);
    EXPECT_EQ(pre_output_op(c), "Tanh");        // inner wins
    EXPECT_EQ(c.shape(), (Shape{2, 3, 3, 2}));  // VALID from outer, stride 2 from inner
    Output e = Conv2D("c_explicit", x, 2, 3, Conv2DOptions().padding("SAME"));
    EXPECT_EQ(e.shape(), (Shape{2, 4, 4, 2}));
    {
      ArgScope innermost({LayerKind::Conv2D}, LayerArgs().activation(activations::identity()));
      EXPECT_EQ(pre_output_op(Conv2D("c_id", x, 2, 3)), "Add");
    }
    EXPECT_EQ(pre_output_op(Conv2D("c_inner2", x, 2, 3)), "Tanh");
  }
  Output c = Conv2D("c_outer", x, 2, 3);
  EXPECT_EQ(pre_output_op(c), "Relu");
  EXPECT_EQ(c.shape(), (Shape{2, 6, 6, 2}));
}

TEST(LayerArgScope, InitializerPoolingBatchNormAndDropoutScopes) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {1, 4, 4, 1}, "x");
  {
    ArgScope scope(
        {LayerKind::Conv2D, LayerKind::FullyConnected},
        LayerArgs().kernel_initializer(init::constant(0.5)).bias_initializer(init::ones()));
    Conv2D("c", x, 1, 2);
    FullyConnected("fc", x, 2);
  }
  {
    ArgScope pool(PoolingOptions().strides(1));
    EXPECT_EQ(MaxPooling("mp", x, 2).shape(), (Shape{1, 3, 3, 1}));
    EXPECT_EQ(AvgPooling("ap", x, 2).shape(), (Shape{1, 3, 3, 1}));
  }
  {
    ArgScope bn(BatchNormOptions().center(false).training(false));
    BatchNorm("bn", x);
    EXPECT_EQ(env.g.find_node("bn/beta"), nullptr);
    EXPECT_NE(env.g.find_node("bn/gamma"), nullptr);
    EXPECT_TRUE(env.g.get_collection(GraphKeys::UPDATE_OPS).empty());  // not training
  }
  {
    ArgScope drop(DropoutOptions().training(false));
    EXPECT_EQ(pre_output_op(Dropout("d", x)), "Placeholder");
  }
  auto s = init_session(env.g);
  expect_tensor(s->variable_value(var_node(env.g, "c/W")), {2, 2, 1, 1}, {0.5, 0.5, 0.5, 0.5}, 0);
  expect_tensor(s->variable_value(var_node(env.g, "c/b")), {1}, {1}, 0);
  expect_tensor(s->variable_value(var_node(env.g, "fc/b")), {2}, {1, 1}, 0);
}

TEST(LayerArgScope, PerGraphAndChecked) {
  Graph other;
  GraphEnv env;
  ArgScope scope({LayerKind::Conv2D}, LayerArgs().activation(ops::relu));
  {
    DefaultGraphGuard guard(other);
    Output x = ops::placeholder(DType::F32, {1, 4, 4, 1}, "x");
    EXPECT_EQ(pre_output_op(Conv2D("c", x, 1, 3)), "Add");  // the scope is on env.g only
  }
  Output x = ops::placeholder(DType::F32, {1, 4, 4, 1}, "x");
  EXPECT_EQ(pre_output_op(Conv2D("c", x, 1, 3)), "Relu");
  expect_error(
      [] {
        ArgScope bad({LayerKind::Conv2D, LayerKind::BatchNorm}, LayerArgs().activation(ops::relu));
      },
      {"argscope", "BatchNorm has no argument 'activation'"});
  expect_error([] { ArgScope bad({LayerKind::MaxPooling}, LayerArgs().use_bias(false)); },
               {"MaxPooling has no argument 'use_bias'"});
  FullyConnectedOptions wrong;
  wrong.args.momentum(0.5);
  expect_error([&] { FullyConnected("fc", x, 2, wrong); },
               {"FullyConnected has no argument 'momentum'"});
}

// ---- activations
// ---------------------------------------------------------------------------------

TEST(LayerActivations, ValuesAndBNReLU) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {1, 4}, "x");
  std::vector<double> xv = {-2, -0.5, 0.5, 3};
  std::vector<Output> outs;
  for (const Activation& a :
       {activations::relu(), activations::leaky_relu(0.1), activations::sigmoid(),
        activations::tanh(), activations::gelu(), activations::softplus(), activations::identity()})
    outs.push_back(a(x));
  auto s = init_session(env.g);
  auto r = s->run(outs, {{x, f64({1, 4}, xv)}});
  for (size_t i = 0; i < xv.size(); ++i) {
    double v = xv[i];
    EXPECT_NEAR(r[0].element_as_double(i), std::max(v, 0.0), 1e-12);
    EXPECT_NEAR(r[1].element_as_double(i), v > 0 ? v : 0.1 * v, 1e-12);
    EXPECT_NEAR(r[2].element_as_double(i), 1 / (1 + std::exp(-v)), 1e-12);
    EXPECT_NEAR(r[3].element_as_double(i), std::tanh(v), 1e-12);
    EXPECT_NEAR(r[4].element_as_double(i), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(r[5].element_as_double(i), std::log1p(std::exp(v)), 1e-12);
    EXPECT_NEAR(r[6].element_as_double(i), v, 0);
  }
  // BNReLU as an activation makes "<layer>/bn/..." variables.
  Output img = ops::placeholder(DType::F32, {2, 4, 4, 1}, "img");
  Output c = Conv2D("conv", img, 3, 3, Conv2DOptions().activation(BNReLU));
  EXPECT_EQ(pre_output_op(c), "Relu");
  for (const char* v : {"conv/W", "conv/b", "conv/bn/beta", "conv/bn/gamma", "conv/bn/mean/EMA",
                        "conv/bn/variance/EMA"})
    EXPECT_NE(env.g.find_node(v), nullptr) << v;
  ArgScope scope(Conv2DOptions().activation(activations::bnrelu()));
  Conv2D("conv2", img, 3, 3);
  EXPECT_NE(env.g.find_node("conv2/bn/gamma"), nullptr);
}

// ---- regularize_cost --------------------------------------------------------------------------

TEST(LayerRegularizeCost, L2OfMatchingVariables) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 3}, "x");
  Output h = FullyConnected("fc0", x, 2);
  FullyConnected("fc1", h, 1);
  Output cost = regularize_cost(".*/W", 1e-2);
  EXPECT_EQ(cost.node->name(), "regularize_cost");
  EXPECT_EQ(names_of(env.g.get_collection(GraphKeys::REGULARIZATION_LOSSES)),
            (std::vector<std::string>{"regularize_cost"}));
  Output l1 = regularize_cost("fc1/W$", l1_regularizer(0.5), "l1_cost");
  Output none = regularize_cost("nothing", 1.0);
  EXPECT_EQ(none.node->name(), "empty_regularize_cost");
  Output total = regularize_cost_from_collection("total_reg");
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "fc0/W"), f64({3, 2}, {1, 2, 3, 4, 5, 6}));
  s->set_variable_value(var_node(env.g, "fc0/b"), f64({2}, {10, 10}));  // not regularized
  s->set_variable_value(var_node(env.g, "fc1/W"), f64({2, 1}, {-1, 2}));
  auto r = s->run({cost, l1, none, total});
  const double l2 = 1e-2 * (1 + 4 + 9 + 16 + 25 + 36 + 1 + 4) / 2;
  EXPECT_NEAR(r[0].item<double>(), l2, 1e-14);
  EXPECT_NEAR(r[1].item<double>(), 0.5 * 3, 1e-14);
  EXPECT_EQ(r[2].dtype(), DType::F32);
  EXPECT_EQ(r[2].item<double>(), 0.0);
  EXPECT_NEAR(r[3].item<double>(), l2 + 1.5, 1e-14);
  expect_error([] { regularize_cost("(", 1.0); }, {"regularize_cost", "invalid regex"});
}

TEST(LayerRegularizeCost, Towers) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 3}, "x");
  Output train_cost, pred_cost, train_total;
  {
    TowerContext tower("tower0", true);
    FullyConnected("fc", x, 2);
    train_cost = regularize_cost(".*/W", 1.0);
    train_total = get_regularization_loss();
  }
  {
    TowerContext pred("pred", false);
    FullyConnected("fc", x, 2);
    pred_cost = regularize_cost(".*/W", 1.0);
  }
  EXPECT_EQ(train_cost.node->name(), "tower0/regularize_cost");
  EXPECT_EQ(pred_cost.node->name(), "pred/empty_regularize_cost");
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "fc/W"), f64({3, 2}, {1, 1, 1, 1, 1, 2}));
  auto r = s->run({train_cost, pred_cost, train_total});
  EXPECT_NEAR(r[0].item<double>(), 9.0 / 2, 1e-14);
  EXPECT_EQ(r[1].item<double>(), 0.0);
  EXPECT_NEAR(r[2].item<double>(), 9.0 / 2, 1e-14);
}

// ---- errors
// ------------------------------------------------------------------------------------------

TEST(LayerErrors, NameLayerShapeAndDtype) {
  GraphEnv env;
  Output m = ops::placeholder(DType::F32, {2, 3}, "m");
  Output img = ops::placeholder(DType::F32, {1, 4, 4, 2}, "img");
  Output ints = ops::placeholder(DType::I32, {2, 3}, "ints");
  expect_error([&] { Conv2D("c", m, 2, 3); }, {"Conv2D 'c'", "f32[2, 3]", "rank 4"});
  expect_error([&] { FullyConnected("fc", ints, 2); },
               {"FullyConnected 'fc'", "i32[2, 3]", "floating"});
  expect_error([&] { FullyConnected("fc", m, 0); }, {"FullyConnected 'fc'", "units"});
  expect_error([&] { Conv2D("g", img, 2, 3, Conv2DOptions().split(2)); }, {"Conv2D 'g'", "split"});
  expect_error([&] { Conv2D("p", img, 2, 3, Conv2DOptions().padding("FULL")); },
               {"Conv2D 'p'", "padding"});
  expect_error([&] { Conv2D("k", img, 2, 5, Conv2DOptions().padding("VALID")); },
               {"Conv2D 'k'", "f32[1, 4, 4, 2]", "height"});
  expect_error([&] { MaxPooling("mp", m, 2); }, {"MaxPooling 'mp'", "f32[2, 3]"});
  expect_error([&] { GlobalAvgPooling("gap", m); }, {"GlobalAvgPooling 'gap'", "rank 4"});
  expect_error([&] { Dropout("d", m, DropoutOptions().rate(1.0)); }, {"Dropout 'd'", "rate"});
  expect_error([&] { BatchNorm("bn", m, BatchNormOptions().axis(2)); }, {"BatchNorm 'bn'", "axis"});
  expect_error([&] { parse_ema_update("sometimes"); }, {"BatchNorm", "ema_update", "sometimes"});
  expect_error([&] { Conv2D("", img, 2, 3); }, {"Conv2D", "name"});
  // Creating the same layer twice without reuse fails in get_variable.
  Conv2D("dup", img, 2, 3);
  EXPECT_THROW(Conv2D("dup", img, 2, 3), Error);
}

}  // namespace
}  // namespace spire::testing

// Forward tests of the convolution and pooling ops of nn_ops (Conv2D,
// Conv2DBackpropInput, Conv2DBackpropFilter, MaxPool, MaxPoolGrad, MaxPoolGradGrad,
// AvgPool, AvgPoolGrad): hand-computed values for SAME padding with stride 2 on odd
// sizes, VALID, dilation 2, 1x1 convolutions, empty batches and unknown batch dims, plus
// a comparison of the im2col/GEMM kernels with a direct loop reference on random data
// (including a batch large enough to be processed in several chunks) and error messages.
#include <cmath>
#include <random>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using Ints = std::vector<int64_t>;

Tensor vec(const Shape& s, const std::vector<double>& v, DType dt = DType::F32) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i)
    visit_dtype(dt, "vec", [&](auto z) { t.data<decltype(z)>()[i] = static_cast<decltype(z)>(v[i]); });
  return t;
}
std::vector<double> iota(int64_t n, double start = 1, double step = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + step * static_cast<double>(i);
  return v;
}
std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = t.element_as_double(i);
  return v;
}

// ---- direct-loop convolution reference ---------------------------------------------------

struct ConvCase {
  Shape x, f;
  Ints strides, dilations;
  std::string padding;
};

// Calls fn(x_index, f_index, y_index) for every multiply-add of conv2d(x, f).
template <typename F>
Shape for_each_conv_tap(const ConvCase& c, F fn) {
  const int64_t n = c.x[0], h = c.x[1], w = c.x[2], ch = c.x[3];
  const int64_t kh = c.f[0], kw = c.f[1], o = c.f[3];
  ops::WindowDim hd, wd;
  EXPECT_EQ(ops::window_dim(h, kh, c.strides[0], c.dilations[0], c.padding, &hd), "");
  EXPECT_EQ(ops::window_dim(w, kw, c.strides[1], c.dilations[1], c.padding, &wd), "");
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < hd.out; ++oy)
      for (int64_t ox = 0; ox < wd.out; ++ox)
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx) {
            int64_t iy = oy * c.strides[0] - hd.pad_before + ky * c.dilations[0];
            int64_t ix = ox * c.strides[1] - wd.pad_before + kx * c.dilations[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            for (int64_t ci = 0; ci < ch; ++ci)
              for (int64_t oc = 0; oc < o; ++oc)
                fn(((b * h + iy) * w + ix) * ch + ci, ((ky * kw + kx) * ch + ci) * o + oc,
                   ((b * hd.out + oy) * wd.out + ox) * o + oc);
          }
  return Shape{n, hd.out, wd.out, o};
}

void check_against_reference(const ConvCase& c, DType dt, double tol) {
  SCOPED_TRACE(c.x.to_string() + " * " + c.f.to_string() + " " + c.padding);
  std::mt19937_64 rng(7);
  Tensor xt = random_tensor(dt, c.x, rng), ft = random_tensor(dt, c.f, rng);
  Shape ys = for_each_conv_tap(c, [](int64_t, int64_t, int64_t) {});
  Tensor dyt = random_tensor(dt, ys, rng);
  std::vector<double> x = values(xt), f = values(ft), dy = values(dyt);
  std::vector<double> y(static_cast<size_t>(ys.num_elements()), 0.0), dx(x.size(), 0.0),
      dw(f.size(), 0.0);
  for_each_conv_tap(c, [&](int64_t xi, int64_t fi, int64_t yi) {
    y[static_cast<size_t>(yi)] += x[static_cast<size_t>(xi)] * f[static_cast<size_t>(fi)];
    dx[static_cast<size_t>(xi)] += dy[static_cast<size_t>(yi)] * f[static_cast<size_t>(fi)];
    dw[static_cast<size_t>(fi)] += dy[static_cast<size_t>(yi)] * x[static_cast<size_t>(xi)];
  });
  Graph g;
  DefaultGraphGuard guard(g);
  Output xo = ops::constant(xt), fo = ops::constant(ft), dyo = ops::constant(dyt);
  auto outs = run({ops::conv2d(xo, fo, c.strides, c.padding, c.dilations),
                   ops::conv2d_backprop_input(xo, fo, dyo, c.strides, c.padding, c.dilations),
                   ops::conv2d_backprop_filter(xo, fo, dyo, c.strides, c.padding, c.dilations)});
  expect_tensor(outs[0], ys, y, tol);
  expect_tensor(outs[1], c.x, dx, tol);
  expect_tensor(outs[2], c.f, dw, tol * 10);
}

// ---- Conv2D -----------------------------------------------------------------------------

SPIRE_FORWARD_TEST(Conv2D, ValidSingleChannel) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({1, 3, 3, 1}, iota(9)));
  Output f = ops::constant(vec({2, 2, 1, 1}, {1, 0, 0, 1}));
  Output y = ops::conv2d(x, f, {1, 1}, "VALID");
  EXPECT_EQ(y.shape(), Shape({1, 2, 2, 1}));
  expect_tensor(run1(y), {1, 2, 2, 1}, {6, 8, 12, 14});
}
SPIRE_FORWARD_TEST(Conv2D, SameStride2OddInput) {
  Graph g;
  DefaultGraphGuard guard(g);
  // 5x5 input, 3x3 ones, stride 2, SAME: out 3x3, one padded row/col on each side.
  Output x = ops::constant(vec({1, 5, 5, 1}, iota(25), DType::F64));
  Output f = ops::constant(vec({3, 3, 1, 1}, std::vector<double>(9, 1.0), DType::F64));
  Output y = ops::conv2d(x, f, {2, 2}, "SAME");
  EXPECT_EQ(y.shape(), Shape({1, 3, 3, 1}));
  expect_tensor(run1(y), {1, 3, 3, 1}, {16, 33, 28, 69, 117, 87, 76, 123, 88});
  // Asymmetric strides: {1, 2} gives 5x3.
  EXPECT_EQ(ops::conv2d(x, f, {1, 2}, "SAME").shape(), Shape({1, 5, 3, 1}));
}
SPIRE_FORWARD_TEST(Conv2D, Dilation2) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({1, 5, 5, 1}, iota(25)));
  Output ones = ops::constant(vec({2, 2, 1, 1}, {1, 1, 1, 1}));
  Output valid = ops::conv2d(x, ones, {1, 1}, "VALID", {2, 2});
  EXPECT_EQ(valid.shape(), Shape({1, 3, 3, 1}));
  expect_tensor(run1(valid), {1, 3, 3, 1}, {28, 32, 36, 48, 52, 56, 68, 72, 76});
  Output f = ops::constant(vec({2, 2, 1, 1}, {1, 2, 3, 4}));
  Output same = ops::conv2d(x, f, {1, 1}, "SAME", {2, 2});
  expect_tensor(run1(same), {1, 5, 5, 1},
                {28, 50, 57, 64, 27, 52, 92, 102, 112, 46, 82, 142, 152, 162, 66,
                 112, 192, 202, 212, 86, 34, 52, 55, 58, 19});
}
SPIRE_FORWARD_TEST(Conv2D, PointwiseMultiChannelBatch) {
  Graph g;
  DefaultGraphGuard guard(g);
  // 1x1 conv, C=2 -> O=3: (a, b) -> (a, b, a + b); batch of 2.
  Output x = ops::constant(vec({2, 1, 2, 2}, iota(8)));
  Output f = ops::constant(vec({1, 1, 2, 3}, {1, 0, 1, 0, 1, 1}));
  expect_tensor(run1(ops::conv2d(x, f)), {2, 1, 2, 3}, {1, 2, 3, 3, 4, 7, 5, 6, 11, 7, 8, 15});
  // Same 1x1 with stride 2 (not the pointwise fast path).
  expect_tensor(run1(ops::conv2d(x, f, {2, 2}, "VALID")), {2, 1, 1, 3}, {1, 2, 3, 5, 6, 11});
}
SPIRE_FORWARD_TEST(Conv2D, EmptyBatchAndUnknownDims) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output f = ops::constant(vec({2, 2, 1, 3}, iota(12)));
  expect_tensor(run1(ops::conv2d(ops::constant(vec({0, 3, 3, 1}, {})), f, {1, 1}, "VALID")),
                {0, 2, 2, 3}, {});
  Output x = ops::placeholder(DType::F32, {-1, 5, -1, 1}, "x");
  Output y = ops::conv2d(x, f, {2, 2}, "SAME");
  EXPECT_EQ(y.shape(), Shape({-1, 3, -1, 3}));
  // Unknown filter size: unknown output size; unknown input channels are not checked.
  Output fu = ops::placeholder(DType::F32, {-1, 3, -1, 4}, "fu");
  EXPECT_EQ(ops::conv2d(ops::placeholder(DType::F32, {2, 0, 5, 1}), fu, {1, 1}, "VALID").shape(),
            Shape({2, -1, 3, 4}));
  // Batch of 1, width 1 fed at run time.
  expect_tensor(run1(y, {{x, vec({1, 5, 1, 1}, {1, 1, 1, 1, 1})}}), {1, 3, 1, 3},
                {1 + 7, 2 + 8, 3 + 9, 1 + 7, 2 + 8, 3 + 9, 1, 2, 3});
}
SPIRE_FORWARD_TEST(Conv2D, MatchesReference) {
  check_against_reference({{2, 5, 5, 3}, {3, 3, 3, 2}, {2, 2}, {1, 1}, "SAME"}, DType::F64, 1e-12);
  check_against_reference({{2, 6, 7, 3}, {3, 2, 3, 4}, {2, 1}, {1, 1}, "SAME"}, DType::F64, 1e-12);
  check_against_reference({{1, 7, 6, 2}, {3, 3, 2, 3}, {1, 1}, {2, 2}, "SAME"}, DType::F64, 1e-12);
  check_against_reference({{3, 7, 7, 2}, {2, 3, 2, 2}, {2, 3}, {2, 1}, "VALID"}, DType::F64, 1e-12);
  check_against_reference({{2, 4, 4, 5}, {1, 1, 5, 3}, {1, 1}, {1, 1}, "SAME"}, DType::F64, 1e-12);
  check_against_reference({{2, 5, 5, 3}, {3, 3, 3, 2}, {2, 2}, {1, 1}, "SAME"}, DType::F32, 1e-4);
}
SPIRE_FORWARD_TEST(Conv2D, ChunkedBatchMatchesReference) {
  // 3 images of 48x48x80 with a 3x3 filter: ~1.7M im2col elements per image, so the
  // kernels process the batch in chunks (2 + 1 images).
  check_against_reference({{3, 48, 48, 80}, {3, 3, 80, 2}, {1, 1}, {1, 1}, "SAME"}, DType::F32,
                          2e-3);
}
SPIRE_FORWARD_TEST(Conv2D, ErrorsThrow) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1, 3, 3, 2}, "x");
  expect_error([&] {
    ops::conv2d(x, ops::placeholder(DType::F32, {2, 2, 3, 1}), {1, 1}, "SAME", {1, 1}, "conv");
  }, {"Conv2D", "conv", "input channels 2", "filter's input channels 3", "[1, 3, 3, 2]", "[2, 2, 3, 1]"});
  Output f = ops::placeholder(DType::F32, {2, 2, 2, 1}, "f");
  expect_error([&] { ops::conv2d(x, f, {1, 1}, "FULL", {1, 1}, "c2"); },
               {"Conv2D", "c2", "padding", "FULL"});
  expect_error([&] { ops::conv2d(x, f, {0, 1}); }, {"Conv2D", "strides must be positive"});
  expect_error([&] { ops::conv2d(x, f, {1, 1, 1}); }, {"Conv2D", "strides", "2 entries"});
  expect_error([&] { ops::conv2d(x, ops::placeholder(DType::F32, {4, 1, 2, 1}), {1, 1}, "VALID"); },
               {"Conv2D", "smaller than", "window"});
  expect_error([&] { ops::conv2d(ops::placeholder(DType::F32, {3, 3, 2}), f); }, {"Conv2D", "NHWC"});
  // Run-time channel mismatch through an unknown dim.
  Output xu = ops::placeholder(DType::F32, {1, 3, 3, -1}, "xu");
  Output y = ops::conv2d(xu, f, {1, 1}, "SAME", {1, 1}, "c3");
  expect_error([&] { run1(y, {{xu, vec({1, 3, 3, 3}, iota(27))}, {f, vec({2, 2, 2, 1}, iota(8))}}); },
               {"c3", "input channels 3"});
}

// ---- Conv2DBackpropInput / Conv2DBackpropFilter ------------------------------------------

SPIRE_FORWARD_TEST(Conv2DBackpropInput, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::constant(vec({1, 3, 3, 1}, std::vector<double>(9, 0.0)));
  Output f = ops::constant(vec({2, 2, 1, 1}, {1, 0, 0, 1}));
  Output dy = ops::constant(vec({1, 2, 2, 1}, {1, 2, 3, 4}));
  expect_tensor(run1(ops::conv2d_backprop_input(like, f, dy, {1, 1}, "VALID", {1, 1})),
                {1, 3, 3, 1}, {1, 2, 0, 3, 5, 2, 0, 3, 4});
  // SAME stride 2 on 5x5: each input pixel gets the number of windows covering it.
  Output like5 = ops::constant(vec({1, 5, 5, 1}, std::vector<double>(25, 0.0)));
  Output ones = ops::constant(vec({3, 3, 1, 1}, std::vector<double>(9, 1.0)));
  Output dy3 = ops::constant(vec({1, 3, 3, 1}, std::vector<double>(9, 1.0)));
  std::vector<double> cover{1, 2, 1, 2, 1}, want;
  for (double r : cover)
    for (double c : cover) want.push_back(r * c);
  expect_tensor(run1(ops::conv2d_backprop_input(like5, ones, dy3, {2, 2}, "SAME", {1, 1})),
                {1, 5, 5, 1}, want);
  // A 6x6 input gives the same 3x3 output: the shape comes from input_like.
  Output like6 = ops::constant(vec({1, 6, 6, 1}, std::vector<double>(36, 0.0)));
  EXPECT_EQ(ops::conv2d_backprop_input(like6, ones, dy3, {2, 2}, "SAME", {1, 1}).shape(),
            Shape({1, 6, 6, 1}));
  // Empty batch.
  expect_tensor(run1(ops::conv2d_backprop_input(ops::constant(vec({0, 3, 3, 1}, {})), f,
                                                ops::constant(vec({0, 2, 2, 1}, {})), {1, 1},
                                                "VALID", {1, 1})),
                {0, 3, 3, 1}, {});
}
SPIRE_FORWARD_TEST(Conv2DBackpropInput, BadDyThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::placeholder(DType::F32, {1, 3, 3, 1});
  Output f = ops::placeholder(DType::F32, {2, 2, 1, 1});
  expect_error([&] {
    ops::conv2d_backprop_input(like, f, ops::placeholder(DType::F32, {1, 3, 3, 1}), {1, 1},
                               "VALID", {1, 1}, "bpi");
  }, {"Conv2DBackpropInput", "bpi", "dy has shape [1, 3, 3, 1]", "expected [1, 2, 2, 1]"});
}
SPIRE_FORWARD_TEST(Conv2DBackpropFilter, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({1, 3, 3, 1}, iota(9)));
  Output like = ops::constant(vec({2, 2, 1, 1}, {0, 0, 0, 0}));
  Output dy1 = ops::constant(vec({1, 2, 2, 1}, {1, 0, 0, 0}));
  expect_tensor(run1(ops::conv2d_backprop_filter(x, like, dy1, {1, 1}, "VALID", {1, 1})),
                {2, 2, 1, 1}, {1, 2, 4, 5});
  Output dy = ops::constant(vec({1, 2, 2, 1}, {1, 1, 1, 1}));
  expect_tensor(run1(ops::conv2d_backprop_filter(x, like, dy, {1, 1}, "VALID", {1, 1})),
                {2, 2, 1, 1}, {12, 16, 24, 28});
  // Empty batch: zero gradient.
  expect_tensor(run1(ops::conv2d_backprop_filter(ops::constant(vec({0, 3, 3, 1}, {})), like,
                                                 ops::constant(vec({0, 2, 2, 1}, {})), {1, 1},
                                                 "VALID", {1, 1})),
                {2, 2, 1, 1}, {0, 0, 0, 0});
  // 1x1 filter (pointwise path): dw = x^T dy.
  Output x2 = ops::constant(vec({1, 1, 2, 2}, {1, 2, 3, 4}));
  Output dy2 = ops::constant(vec({1, 1, 2, 1}, {10, 100}));
  expect_tensor(run1(ops::conv2d_backprop_filter(x2, ops::constant(vec({1, 1, 2, 1}, {0, 0})),
                                                 dy2, {1, 1}, "SAME", {1, 1})),
                {1, 1, 2, 1}, {310, 420});
}
SPIRE_FORWARD_TEST(Conv2DBackpropFilter, ChannelMismatchThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] {
    ops::conv2d_backprop_filter(ops::placeholder(DType::F32, {1, 3, 3, 2}),
                                ops::placeholder(DType::F32, {2, 2, 1, 1}),
                                ops::placeholder(DType::F32, {1, 2, 2, 1}), {1, 1}, "VALID",
                                {1, 1}, "bpf");
  }, {"Conv2DBackpropFilter", "bpf", "input channels 2"});
}

// ---- MaxPool and its gradients ------------------------------------------------------------

SPIRE_FORWARD_TEST(MaxPool, ValidAndSame) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::max_pool(ops::constant(vec({1, 4, 4, 1}, iota(16))), {2, 2}, {2, 2})),
                {1, 2, 2, 1}, {6, 8, 14, 16});
  // SAME, stride 2, odd size; negative values show padding never wins.
  Output x = ops::constant(vec({1, 5, 5, 1}, iota(25)));
  Output neg = ops::constant(vec({1, 5, 5, 1}, iota(25, -1, -1), DType::F64));
  Output y = ops::max_pool(x, {3, 3}, {2, 2}, "SAME");
  EXPECT_EQ(y.shape(), Shape({1, 3, 3, 1}));
  expect_tensor(run1(y), {1, 3, 3, 1}, {7, 9, 10, 17, 19, 20, 22, 24, 25});
  expect_tensor(run1(ops::max_pool(neg, {3, 3}, {2, 2}, "SAME")), {1, 3, 3, 1},
                {-1, -2, -4, -6, -7, -9, -16, -17, -19});
  // Channels pool independently.
  expect_tensor(run1(ops::max_pool(ops::constant(vec({1, 2, 2, 2}, {1, 8, 2, 7, 3, 6, 4, 5})),
                                   {2, 2}, {2, 2})),
                {1, 1, 1, 2}, {4, 8});
}
SPIRE_FORWARD_TEST(MaxPool, EmptyBatchUnknownDimsAndErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::max_pool(ops::constant(vec({0, 4, 4, 2}, {})), {2, 2}, {2, 2})),
                {0, 2, 2, 2}, {});
  Output p = ops::placeholder(DType::F32, {-1, 7, 7, 3});
  EXPECT_EQ(ops::max_pool(p, {3, 3}, {2, 2}, "SAME").shape(), Shape({-1, 4, 4, 3}));
  EXPECT_EQ(ops::max_pool(p, {3, 3}, {2, 2}, "VALID").shape(), Shape({-1, 3, 3, 3}));
  expect_error([&] { ops::max_pool(p, {2, 2}, {2, 2}, "same", "mp"); },
               {"MaxPool", "mp", "padding", "same"});
  expect_error([&] { ops::max_pool(p, {2}, {2, 2}); }, {"MaxPool", "ksize", "2 entries"});
  expect_error([&] { ops::max_pool(ops::placeholder(DType::F32, {7, 7}), {2, 2}, {2, 2}); },
               {"MaxPool", "NHWC"});
}
SPIRE_FORWARD_TEST(MaxPoolGrad, RoutesToFirstMax) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({1, 4, 4, 1}, iota(16)));
  Ints k{2, 2}, s{2, 2};
  Output y = ops::max_pool(x, k, s);
  Output dx = ops::max_pool_grad(x, y, ops::constant(vec({1, 2, 2, 1}, {1, 2, 3, 4})), k, s, "VALID");
  expect_tensor(run1(dx), {1, 4, 4, 1}, {0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4});
  // Ties go to the first maximum only.
  Output z = ops::constant(vec({1, 2, 2, 1}, {0, 0, 0, 0}));
  expect_tensor(run1(ops::max_pool_grad(z, ops::max_pool(z, k, s), ops::constant(vec({1, 1, 1, 1}, {5})),
                                        k, s, "VALID")),
                {1, 2, 2, 1}, {5, 0, 0, 0});
  // Overlapping windows accumulate.
  Output w = ops::constant(vec({1, 1, 3, 1}, {1, 3, 2}));
  expect_tensor(run1(ops::max_pool_grad(w, ops::max_pool(w, {1, 2}, {1, 1}),
                                        ops::constant(vec({1, 1, 2, 1}, {1, 2})), {1, 2}, {1, 1},
                                        "VALID")),
                {1, 1, 3, 1}, {0, 3, 0});
  // SAME with stride 2 on 5x5 (maxima at the bottom-right valid element of each window).
  Output x5 = ops::constant(vec({1, 5, 5, 1}, iota(25)));
  Output y5 = ops::max_pool(x5, {3, 3}, {2, 2}, "SAME");
  expect_tensor(run1(ops::max_pool_grad(x5, y5, ops::constant(vec({1, 3, 3, 1}, iota(9))), {3, 3},
                                        {2, 2}, "SAME")),
                {1, 5, 5, 1}, {0, 0, 0, 0, 0, 0, 1, 0, 2, 3, 0, 0, 0, 0, 0, 0, 4, 0, 5, 6,
                               0, 7, 0, 8, 9});
}
SPIRE_FORWARD_TEST(MaxPoolGrad, BadShapesThrow) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1, 4, 4, 1});
  Output y = ops::placeholder(DType::F32, {1, 2, 2, 1});
  expect_error([&] {
    ops::max_pool_grad(x, y, ops::placeholder(DType::F32, {1, 3, 3, 1}), {2, 2}, {2, 2}, "VALID", "mpg");
  }, {"MaxPoolGrad", "mpg", "dy has shape [1, 3, 3, 1]"});
}
SPIRE_FORWARD_TEST(MaxPoolGradGrad, GathersAtFirstMax) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({1, 4, 4, 1}, iota(16)));
  Ints k{2, 2}, s{2, 2};
  Output gg = ops::max_pool_grad_grad(x, ops::max_pool(x, k, s),
                                      ops::constant(vec({1, 4, 4, 1}, iota(16, 10, 10))), k, s, "VALID");
  EXPECT_EQ(gg.shape(), Shape({1, 2, 2, 1}));
  expect_tensor(run1(gg), {1, 2, 2, 1}, {60, 80, 140, 160});
  Output w = ops::constant(vec({1, 1, 3, 1}, {1, 3, 2}));
  expect_tensor(run1(ops::max_pool_grad_grad(w, ops::max_pool(w, {1, 2}, {1, 1}),
                                             ops::constant(vec({1, 1, 3, 1}, {10, 20, 30})),
                                             {1, 2}, {1, 1}, "VALID")),
                {1, 1, 2, 1}, {20, 20});
}

// ---- AvgPool and its gradient --------------------------------------------------------------

SPIRE_FORWARD_TEST(AvgPool, ValidAndSame) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::avg_pool(ops::constant(vec({1, 4, 4, 1}, iota(16))), {2, 2}, {2, 2})),
                {1, 2, 2, 1}, {3.5, 5.5, 11.5, 13.5});
  // SAME divides by the number of valid (unpadded) elements.
  Output x = ops::constant(vec({1, 5, 5, 1}, iota(25), DType::F64));
  expect_tensor(run1(ops::avg_pool(x, {3, 3}, {2, 2}, "SAME")), {1, 3, 3, 1},
                {4, 5.5, 7, 11.5, 13, 14.5, 19, 20.5, 22});
  // Two images, two channels.
  expect_tensor(run1(ops::avg_pool(ops::constant(vec({2, 1, 2, 2}, iota(8))), {1, 2}, {1, 2})),
                {2, 1, 1, 2}, {2, 3, 6, 7});
  expect_tensor(run1(ops::avg_pool(ops::constant(vec({0, 3, 3, 1}, {})), {2, 2}, {1, 1}, "SAME")),
                {0, 3, 3, 1}, {});
}
SPIRE_FORWARD_TEST(AvgPoolGrad, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::constant(vec({1, 4, 4, 1}, std::vector<double>(16, 0.0)));
  expect_tensor(run1(ops::avg_pool_grad(like, ops::constant(vec({1, 2, 2, 1}, {4, 8, 12, 16})),
                                        {2, 2}, {2, 2}, "VALID")),
                {1, 4, 4, 1}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // SAME, 2x2 windows, stride 1 on 3x3: the last row/col windows hold fewer elements.
  Output like3 = ops::constant(vec({1, 3, 3, 1}, std::vector<double>(9, 0.0)));
  expect_tensor(run1(ops::avg_pool_grad(like3, ops::constant(vec({1, 3, 3, 1}, std::vector<double>(9, 1.0))),
                                        {2, 2}, {1, 1}, "SAME")),
                {1, 3, 3, 1}, {0.25, 0.5, 0.75, 0.5, 1.0, 1.5, 0.75, 1.5, 2.25});
  expect_error([&] {
    ops::avg_pool_grad(like3, ops::constant(vec({1, 2, 2, 1}, {1, 1, 1, 1})), {2, 2}, {1, 1},
                       "SAME", "apg");
  }, {"AvgPoolGrad", "apg", "dy has shape [1, 2, 2, 1]", "expected [1, 3, 3, 1]"});
}

// ---- composition ----------------------------------------------------------------------------

// A small convnet with an unknown batch dim: the autodiff gradient of the mean loss w.r.t.
// the conv filter matches central finite differences.
TEST(NnOps, SmallConvNetGradientWithUnknownBatch) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(3);
  Output x = ops::placeholder(DType::F64, {-1, 6, 6, 2}, "x");
  Output labels = ops::placeholder(DType::I32, {-1}, "labels");
  Output w = ops::placeholder(DType::F64, {3, 3, 2, 4}, "w");
  Output dense = ops::constant(random_tensor(DType::F64, {36, 3}, rng));
  Output h = ops::relu(ops::conv2d(x, w, {1, 1}, "SAME"));
  Output p = ops::avg_pool(ops::max_pool(h, {2, 2}, {2, 2}, "VALID"), {2, 2}, {1, 1}, "SAME");
  EXPECT_EQ(p.shape(), Shape({-1, 3, 3, 4}));
  Output logits = ops::matmul(ops::reshape(p, {-1, 36}), dense);
  Output loss = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, labels));
  Output dw = gradient(loss, w);
  ASSERT_TRUE(dw.valid());
  EXPECT_EQ(dw.shape(), Shape({3, 3, 2, 4}));
  Tensor xt = random_tensor(DType::F64, {2, 6, 6, 2}, rng);
  Tensor wt = random_tensor(DType::F64, {3, 3, 2, 4}, rng);
  Tensor lt = Tensor::from_vector<int32_t>({2}, {1, 2});
  Session s(g);
  auto eval = [&](const Tensor& wv) {
    return s.run({loss}, {{x, xt}, {labels, lt}, {w, wv}})[0].item<double>();
  };
  Tensor analytic = s.run({dw}, {{x, xt}, {labels, lt}, {w, wt}})[0];
  for (int64_t j : {0, 7, 25, 40, 71}) {
    Tensor plus = wt.clone(), minus = wt.clone();
    plus.data<double>()[j] += 1e-6;
    minus.data<double>()[j] -= 1e-6;
    double numeric = (eval(plus) - eval(minus)) / 2e-6;
    EXPECT_NEAR(analytic.data<double>()[j], numeric, 1e-6 * (1 + std::abs(numeric))) << j;
  }
}

}  // namespace
}  // namespace spire::testing

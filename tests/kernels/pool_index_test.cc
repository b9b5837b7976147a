// Host test of the window math of the CUDA pooling kernels (kernels/pool_index.h): the very
// functions the GPU kernels call per element run here on the host over every element, for
// several shapes, window sizes, strides and SAME/VALID paddings (odd sizes, asymmetric SAME
// padding, windows larger than the input, strides larger than the window, 1x1), and must
// agree with the CPU kernels (kernels/cpu/pool_kernels.cc) run through a Session. Inputs are
// rounded to a few integer levels so windows hold ties: the first-maximum rule of MaxPool,
// MaxPoolGrad and MaxPoolGradGrad is exercised, not just the common no-tie case.
#include "kernels/pool_index.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/ops/nn_ops.h"
#include "spire.h"

namespace spire {
namespace {

using kernels::PoolGeometry;
using Ints = std::vector<int64_t>;

struct PoolCase {
  Shape x;
  Ints ksize, strides;
  std::string padding;
};

// The geometry as the CUDA kernels plan it (pool_geometry in pool_kernels.cu).
PoolGeometry geometry(const PoolCase& c) {
  ops::WindowDim hd, wd;
  EXPECT_EQ(ops::window_dim(c.x[1], c.ksize[0], c.strides[0], 1, c.padding, &hd), "");
  EXPECT_EQ(ops::window_dim(c.x[2], c.ksize[1], c.strides[1], 1, c.padding, &wd), "");
  PoolGeometry g;
  g.n = c.x[0], g.h = c.x[1], g.w = c.x[2], g.c = c.x[3];
  g.kh = c.ksize[0], g.kw = c.ksize[1], g.sh = c.strides[0], g.sw = c.strides[1];
  g.oh = hd.out, g.ow = wd.out, g.pt = hd.pad_before, g.pl = wd.pad_before;
  return g;
}

// Values in {-2, -1, 0, 1, 2} (ties) or continuous in [-2, 2].
template <typename T>
Tensor random_values(const Shape& s, std::mt19937_64& rng, bool ties) {
  std::uniform_real_distribution<double> u(-2, 2);
  Tensor t(dtype_of<T>, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = u(rng);
    t.data<T>()[i] = static_cast<T>(ties ? std::round(v) : v);
  }
  return t;
}

template <typename T>
void expect_close(const Tensor& want, const std::vector<T>& got, double rel,
                  const std::string& what) {
  ASSERT_EQ(want.num_elements(), static_cast<int64_t>(got.size())) << what;
  const T* w = want.data<T>();
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements() && bad < 5; ++i) {
    const double a = static_cast<double>(w[i]),
                 b = static_cast<double>(got[static_cast<size_t>(i)]);
    if (!(std::abs(a - b) <= rel * (1 + std::abs(a)))) {
      ADD_FAILURE() << what << ": element " << i << " is " << b << ", the CPU kernel gives " << a;
      ++bad;
    }
  }
}

template <typename T>
void check_case(const PoolCase& c, bool ties, uint64_t seed) {
  SCOPED_TRACE(c.x.to_string() + " ksize " + std::to_string(c.ksize[0]) + "x" +
               std::to_string(c.ksize[1]) + " strides " + std::to_string(c.strides[0]) + "x" +
               std::to_string(c.strides[1]) + " " + c.padding + (ties ? " ties" : "") + " " +
               dtype_name(dtype_of<T>));
  const PoolGeometry g = geometry(c);
  const Shape ys{g.n, g.oh, g.ow, g.c};
  std::mt19937_64 rng(seed);
  Tensor x = random_values<T>(c.x, rng, ties);
  Tensor dy = random_values<T>(ys, rng, false);
  Tensor gin = random_values<T>(c.x, rng, false);

  Graph graph;
  DefaultGraphGuard guard(graph);
  Output xo = ops::constant(x), dyo = ops::constant(dy), go = ops::constant(gin);
  Output y = ops::max_pool(xo, c.ksize, c.strides, c.padding);
  std::vector<Output> fetches = {
      y,
      ops::max_pool_grad(xo, y, dyo, c.ksize, c.strides, c.padding),
      ops::max_pool_grad_grad(xo, y, go, c.ksize, c.strides, c.padding),
      ops::avg_pool(xo, c.ksize, c.strides, c.padding),
      ops::avg_pool_grad(xo, dyo, c.ksize, c.strides, c.padding),
  };
  Session s(graph);
  std::vector<Tensor> want = s.run(fetches);
  ASSERT_EQ(want[0].shape(), ys);

  const int64_t n_in = c.x.num_elements(), n_out = ys.num_elements();
  const T* px = x.data<T>();
  std::vector<T> max_out(static_cast<size_t>(n_out)), grad_grad(static_cast<size_t>(n_out)),
      avg_out(static_cast<size_t>(n_out));
  std::vector<int32_t> argmax(static_cast<size_t>(n_out));
  for (int64_t i = 0; i < n_out; ++i) {
    const size_t k = static_cast<size_t>(i);
    max_out[k] = kernels::max_pool_value(g, px, i);
    argmax[k] = static_cast<int32_t>(kernels::max_pool_argmax(g, px, i));
    ASSERT_GE(argmax[k], 0) << "empty window at output " << i;
    grad_grad[k] = kernels::max_pool_grad_grad_value(g, px, gin.data<T>(), i);
    avg_out[k] = kernels::avg_pool_value(g, px, i);
  }
  std::vector<T> max_grad(static_cast<size_t>(n_in)), avg_grad(static_cast<size_t>(n_in));
  for (int64_t i = 0; i < n_in; ++i) {
    max_grad[static_cast<size_t>(i)] =
        kernels::max_pool_grad_value(g, argmax.data(), dy.data<T>(), i);
    avg_grad[static_cast<size_t>(i)] = kernels::avg_pool_grad_value(g, dy.data<T>(), i);
  }
  // Max pooling selects values: exact. Averages: the same arithmetic, up to rounding of
  // a compiler's contraction choices.
  const double rel = std::is_same<T, float>::value ? 1e-6 : 1e-14;
  expect_close<T>(want[0], max_out, 0, "MaxPool");
  expect_close<T>(want[1], max_grad, rel, "MaxPoolGrad");
  expect_close<T>(want[2], grad_grad, 0, "MaxPoolGradGrad");
  expect_close<T>(want[3], avg_out, rel, "AvgPool");
  expect_close<T>(want[4], avg_grad, rel, "AvgPoolGrad");
}

const std::vector<PoolCase>& cases() {
  static const std::vector<PoolCase> c = {
      {{1, 5, 5, 2}, {3, 3}, {2, 2}, "SAME"},  // symmetric SAME padding
      {{2, 6, 7, 3}, {3, 2}, {2, 3}, "SAME"},  // asymmetric SAME padding (extra row/col after)
      {{1, 7, 6, 2}, {3, 3}, {1, 1}, "SAME"},  // overlapping windows, stride 1
      {{1, 3, 3, 1}, {5, 5}, {1, 1}, "SAME"},  // window larger than the input
      {{1, 5, 5, 1}, {2, 2}, {3, 3}, "SAME"},  // stride > window: uncovered inputs
      {{2, 9, 8, 4}, {4, 3}, {3, 2}, "SAME"},
      {{2, 4, 4, 3}, {2, 2}, {2, 2}, "VALID"},  // exact tiling
      {{1, 4, 5, 1}, {2, 2}, {2, 2}, "VALID"},  // last column uncovered
      {{1, 5, 4, 3}, {2, 2}, {1, 2}, "VALID"},
      {{1, 7, 9, 2}, {3, 4}, {2, 3}, "VALID"},
      {{3, 1, 1, 2}, {1, 1}, {1, 1}, "VALID"},  // 1x1
      {{2, 8, 8, 5}, {2, 2}, {2, 2}, "SAME"},   // MNIST-like
      {{1, 11, 13, 1}, {3, 3}, {2, 2}, "VALID"},
  };
  return c;
}

TEST(PoolIndex, MatchesCpuKernelsF64) {
  uint64_t seed = 1;
  for (const PoolCase& c : cases()) {
    check_case<double>(c, false, seed++);
    check_case<double>(c, true, seed++);
  }
}

TEST(PoolIndex, MatchesCpuKernelsF32) {
  uint64_t seed = 100;
  for (const PoolCase& c : cases()) {
    check_case<float>(c, false, seed++);
    check_case<float>(c, true, seed++);
  }
}

// The windows covering an input position are exactly those whose range contains it.
TEST(PoolIndex, CoveringMatchesBruteForce) {
  for (int64_t k = 1; k <= 5; ++k)
    for (int64_t s = 1; s <= 4; ++s)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t n_out = 1; n_out <= 6; ++n_out)
          for (int64_t i = 0; i < 12; ++i) {
            int64_t o0, o1;
            kernels::pool_covering_1d(i, k, s, p, n_out, &o0, &o1);
            for (int64_t o = 0; o < n_out; ++o) {
              const bool covers = o * s - p <= i && i < o * s - p + k;
              EXPECT_EQ(covers, o >= o0 && o < o1)
                  << "i " << i << " k " << k << " s " << s << " p " << p << " o " << o;
            }
          }
}

}  // namespace
}  // namespace spire

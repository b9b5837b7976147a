// Tests for the direct convolution kernels (kernels/cpu/direct_conv.h): every instruction-set
// variant this CPU has, f32 and f64, against a naive double-precision loop, over paddings
// (SAME, VALID, TF's asymmetric SAME, more than the kernel needs), kernel sizes, rows and
// filter-row runs of every tile size, and a thread pool (the forward result must not depend
// on it). Then the Conv2D ops, whose kernels route these shapes to the direct path (the input
// gradient through the rotated filter), against the same loops.
#include "kernels/cpu/direct_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "spire.h"

namespace spire::cpu {
namespace {

using detail::GemmIsa;

std::vector<GemmIsa> direct_isas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512})
    if (detail::gemm_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

template <class T>
std::vector<T> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(count));
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// x[b, iy, ix, ci], zero outside the image.
template <class T>
double input_at(const DirectConvShape& s, const std::vector<T>& x, int64_t b, int64_t iy,
                int64_t ix, int64_t ci) {
  if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) return 0;
  return static_cast<double>(x[static_cast<size_t>(((b * s.h + iy) * s.w + ix) * s.c + ci)]);
}

template <class T>
std::vector<double> reference_forward(const DirectConvShape& s, const std::vector<T>& x,
                                      const std::vector<T>& w) {
  std::vector<double> y(static_cast<size_t>(s.n * s.oh * s.ow * s.o), 0.0);
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t oy = 0; oy < s.oh; ++oy)
      for (int64_t ox = 0; ox < s.ow; ++ox)
        for (int64_t ky = 0; ky < s.kh; ++ky)
          for (int64_t kx = 0; kx < s.kw; ++kx)
            for (int64_t ci = 0; ci < s.c; ++ci) {
              const double xv = input_at(s, x, b, oy + ky - s.pt, ox + kx - s.pl, ci);
              if (xv == 0) continue;
              for (int64_t o = 0; o < s.o; ++o)
                y[static_cast<size_t>(((b * s.oh + oy) * s.ow + ox) * s.o + o)] +=
                    xv * static_cast<double>(
                             w[static_cast<size_t>(((ky * s.kw + kx) * s.c + ci) * s.o + o)]);
            }
  return y;
}

template <class T>
std::vector<double> reference_filter_grad(const DirectConvShape& s, const std::vector<T>& x,
                                          const std::vector<T>& dy) {
  std::vector<double> dw(static_cast<size_t>(s.kh * s.kw * s.c * s.o), 0.0);
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t oy = 0; oy < s.oh; ++oy)
      for (int64_t ox = 0; ox < s.ow; ++ox)
        for (int64_t ky = 0; ky < s.kh; ++ky)
          for (int64_t kx = 0; kx < s.kw; ++kx)
            for (int64_t ci = 0; ci < s.c; ++ci) {
              const double xv = input_at(s, x, b, oy + ky - s.pt, ox + kx - s.pl, ci);
              for (int64_t o = 0; o < s.o; ++o)
                dw[static_cast<size_t>(((ky * s.kw + kx) * s.c + ci) * s.o + o)] +=
                    xv * static_cast<double>(
                             dy[static_cast<size_t>(((b * s.oh + oy) * s.ow + ox) * s.o + o)]);
            }
  return dw;
}

template <class T>
void expect_near_all(const std::vector<T>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= tol) && bad++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0u) << what;
}

/// {n, h, w, c, kh, kw, o (in vectors), oh, ow, pt, pl}
struct Case {
  int64_t n, h, w, c, kh, kw, o_vectors, oh, ow, pt, pl;
};
const Case kCases[] = {
    {2, 9, 7, 8, 3, 3, 1, 9, 7, 1, 1},        // SAME 3x3, rows shorter than the big tiles
    {1, 5, 33, 16, 3, 3, 2, 5, 33, 1, 1},     // a row of 33: three or more tiles
    {3, 8, 8, 20, 3, 3, 3, 6, 6, 0, 0},       // VALID; 3 vectors: a 2-vector and a 1-vector block
    {2, 6, 10, 9, 5, 5, 1, 6, 10, 2, 2},      // 5x5 SAME, 9 channels (runs of 45)
    {1, 4, 4, 8, 2, 2, 1, 4, 4, 0, 0},        // TF's asymmetric SAME of an even kernel
    {2, 7, 5, 12, 1, 3, 2, 7, 5, 0, 1},       // 1x3
    {1, 1, 1, 8, 3, 3, 1, 1, 1, 1, 1},        // one pixel
    {2, 3, 40, 8, 3, 3, 4, 1, 38, 0, 0},      // one output row, 4 vectors
    {1, 5, 5, 8, 3, 3, 1, 7, 7, 2, 2},        // more padding than SAME (the input gradient's)
    {4, 16, 16, 16, 3, 3, 2, 16, 16, 1, 1},   // big enough for the pool to split rows
    {1, 40, 64, 64, 3, 3, 1, 40, 64, 1, 1},   // several bands of rows per image
    {1, 6, 300, 112, 3, 3, 1, 6, 300, 1, 1},  // a strip row so wide that bands are one row
    {2, 5, 5, 8, 3, 3, 1, 3, 3, -1, -1},      // negative padding (the output crops the input)
    {1, 5, 6, 8, 3, 3, 1, 9, 10, 4, 4},       // padding beyond the input on every side
    {3, 9, 9, 1, 3, 3, 4, 9, 9, 1, 1},        // one channel (MNIST's first layer), 4 vectors
    {2, 8, 7, 3, 5, 5, 2, 8, 7, 2, 2},        // three channels (an RGB image), 5x5
};

DirectConvShape shape_of(const Case& k, int lanes) {
  return {k.n, k.h, k.w, k.c, k.kh, k.kw, k.o_vectors * lanes, k.oh, k.ow, k.pt, k.pl};
}

/// Every tile width and height the kernels have, with a 2-vector and a 1-vector block of
/// outputs: rows of 1..30 pixels (ceil(ow / MR) near-equal tiles) on the channel-major strip
/// (c = 2) and rows of 1..16 pixels on each NHWC strip (c = 16, 32, 64, whose pixel stride is
/// a compile-time constant); filter-row runs of kw * c = 1..21 (tap, channel) pairs.
std::vector<Case> tile_cases() {
  std::vector<Case> cases;
  for (int64_t ow = 1; ow <= 30; ++ow) cases.push_back({1, 3, ow, 2, 3, 3, 3, 3, ow, 1, 1});
  for (int64_t c : {16, 32, 64})
    for (int64_t ow = 1; ow <= 16; ++ow) cases.push_back({1, 3, ow, c, 3, 3, 3, 3, ow, 1, 1});
  for (int64_t run = 1; run <= 21; ++run) {
    const int64_t kw = run % 3 == 0 ? 3 : 1;
    cases.push_back({1, 3, 5, run / kw, 3, kw, 3, 3, 5, 1, (kw - 1) / 2});
  }
  return cases;
}

template <class T>
void check_variant(GemmIsa isa, ThreadPool* pool, const Case* begin, const Case* end) {
  const int lanes = detail::direct_conv_lanes<T>(isa);
  ASSERT_GT(lanes, 0);
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (const Case* it = begin; it != end; ++it) {
    const Case& k = *it;
    const DirectConvShape s = shape_of(k, lanes);
    const std::string what = "isa " + std::to_string(static_cast<int>(isa)) + " n" +
                             std::to_string(s.n) + " " + std::to_string(s.h) + "x" +
                             std::to_string(s.w) + "x" + std::to_string(s.c) + " k" +
                             std::to_string(s.kh) + "x" + std::to_string(s.kw) + " o" +
                             std::to_string(s.o) + (pool ? " pool" : "");
    const auto x = random_values<T>(s.n * s.h * s.w * s.c, 1);
    const auto w = random_values<T>(s.kh * s.kw * s.c * s.o, 2);
    const auto dy = random_values<T>(s.n * s.oh * s.ow * s.o, 3);
    // Poisoned outputs: every element must be written.
    std::vector<T> y(static_cast<size_t>(s.n * s.oh * s.ow * s.o), T(NAN));
    detail::direct_conv2d_with_isa(isa, s, x.data(), w.data(), y.data(), pool);
    expect_near_all(y, reference_forward(s, x, w), eps * static_cast<double>(s.kh * s.kw * s.c),
                    what + " forward");
    if (pool) {
      std::vector<T> serial(y.size(), T(NAN));
      detail::direct_conv2d_with_isa(isa, s, x.data(), w.data(), serial.data(), nullptr);
      EXPECT_EQ(std::memcmp(serial.data(), y.data(), y.size() * sizeof(T)), 0)
          << what << ": depends on threads";
    }
    std::vector<T> dw(static_cast<size_t>(s.kh * s.kw * s.c * s.o), T(NAN));
    detail::direct_conv2d_filter_grad_with_isa(isa, s, x.data(), dy.data(), dw.data(), pool);
    expect_near_all(dw, reference_filter_grad(s, x, dy),
                    eps * static_cast<double>(s.n * s.oh * s.ow), what + " filter gradient");
  }
}

TEST(DirectConv, EveryVariantMatchesTheNaiveLoops) {
  const auto isas = direct_isas();
  if (isas.empty())
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: the direct kernels never run";
  ThreadPool pool(3);
  for (GemmIsa isa : isas)
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      check_variant<float>(isa, p, std::begin(kCases), std::end(kCases));
      check_variant<double>(isa, p, std::begin(kCases), std::end(kCases));
    }
}

TEST(DirectConv, EveryTileSizeMatchesTheNaiveLoops) {
  const auto isas = direct_isas();
  if (isas.empty())
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: the direct kernels never run";
  const std::vector<Case> cases = tile_cases();
  for (GemmIsa isa : isas) {
    check_variant<float>(isa, nullptr, cases.data(), cases.data() + cases.size());
    check_variant<double>(isa, nullptr, cases.data(), cases.data() + cases.size());
  }
}

TEST(DirectConv, AppliesOnlyWhereItShould) {
  const int lanes = detail::direct_conv_lanes<float>(detail::gemm_best_isa());
  if (lanes == 0) {
    EXPECT_FALSE(direct_conv_applies<float>({1, 8, 8, 16, 3, 3, 16, 8, 8, 1, 1}));
    return;
  }
  EXPECT_TRUE(direct_conv_applies<float>({1, 8, 8, 16, 3, 3, lanes, 8, 8, 1, 1}));
  EXPECT_TRUE(direct_conv_applies<float>({1, 8, 8, 1, 3, 3, lanes, 8, 8, 1, 1}));  // one channel
  EXPECT_FALSE(direct_conv_applies<float>({1, 8, 8, 16, 3, 3, lanes + 1, 8, 8, 1, 1}));  // ragged o
  EXPECT_FALSE(
      direct_conv_applies<float>({1, 8, 8, 256, 3, 3, lanes, 8, 8, 1, 1}));  // deep: im2col
}

// The ops: Conv2D, and both gradients through autograd, on shapes the kernels send to the
// direct path, against the naive loops (f64, so the im2col path's rounding cannot hide a
// wrong padding or rotation).
TEST(DirectConv, ConvOpsAndGradientsMatchTheNaiveLoops) {
  const int64_t lanes = detail::direct_conv_lanes<double>(detail::gemm_best_isa());
  if (lanes == 0)
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: the direct kernels never run";
  const int64_t c8 = std::max<int64_t>(8, lanes);  // channels the direct path takes (>= 8)
  struct OpCase {
    int64_t n, h, w, c, kh, kw, o;
    const char* padding;
  };
  // Each case runs on the direct path and again with it off (im2col + GEMM, the path these
  // shapes took before), against the same loops.
  struct Restore {
    ~Restore() { detail::set_direct_conv_enabled(true); }
  } restore;
  for (bool direct : {true, false})
    for (const OpCase& k :
         {OpCase{2, 7, 6, c8, 3, 3, c8, "SAME"}, OpCase{1, 6, 9, 2 * c8, 3, 3, c8, "VALID"},
          OpCase{2, 5, 5, c8, 2, 4, 2 * c8, "SAME"}, OpCase{1, 8, 5, c8, 5, 3, c8, "SAME"},
          OpCase{3, 6, 7, 1, 3, 3, 2 * c8, "SAME"}}) {
      detail::set_direct_conv_enabled(true);
      const int64_t oh = std::string(k.padding) == "SAME" ? k.h : k.h - k.kh + 1;
      const int64_t ow = std::string(k.padding) == "SAME" ? k.w : k.w - k.kw + 1;
      const int64_t pt = std::string(k.padding) == "SAME" ? (k.kh - 1) / 2 : 0;
      const int64_t pl = std::string(k.padding) == "SAME" ? (k.kw - 1) / 2 : 0;
      const DirectConvShape s{k.n, k.h, k.w, k.c, k.kh, k.kw, k.o, oh, ow, pt, pl};
      ASSERT_TRUE(direct_conv_applies<double>(s));
      const DirectConvShape grad_shape{k.n, oh,  ow,  k.o,           k.kh,         k.kw,
                                       k.c, k.h, k.w, k.kh - 1 - pt, k.kw - 1 - pl};
      // The input gradient's filters are the forward's channels: one channel is not a vector.
      ASSERT_EQ(direct_conv_applies<double>(grad_shape), k.c % lanes == 0);
      detail::set_direct_conv_enabled(direct);
      const auto xv = random_values<double>(k.n * k.h * k.w * k.c, 4);
      const auto wv = random_values<double>(k.kh * k.kw * k.c * k.o, 5);
      const auto dyv = random_values<double>(k.n * oh * ow * k.o, 6);

      Graph g;
      DefaultGraphGuard guard(g);
      Output x = ops::placeholder(DType::F64, {k.n, k.h, k.w, k.c}, "x");
      Output w = ops::placeholder(DType::F64, {k.kh, k.kw, k.c, k.o}, "w");
      Output dy = ops::placeholder(DType::F64, {k.n, oh, ow, k.o}, "dy");
      Output y = ops::conv2d(x, w, {1, 1}, k.padding);
      std::vector<Output> grads = gradients({y}, {x, w}, {dy});
      SessionOptions options;
      options.num_threads = 2;
      Session sess(g, options);
      auto tensor = [](const std::vector<double>& v, Shape shape) {
        Tensor t(DType::F64, shape);
        std::copy(v.begin(), v.end(), t.data<double>());
        return t;
      };
      auto out = sess.run({y, grads[0], grads[1]}, {{x, tensor(xv, {k.n, k.h, k.w, k.c})},
                                                    {w, tensor(wv, {k.kh, k.kw, k.c, k.o})},
                                                    {dy, tensor(dyv, {k.n, oh, ow, k.o})}});
      auto values = [](const Tensor& t) {
        return std::vector<double>(t.data<double>(), t.data<double>() + t.num_elements());
      };
      const std::string what = std::string(direct ? "direct " : "im2col ") + k.padding + " " +
                               std::to_string(k.kh) + "x" + std::to_string(k.kw);
      expect_near_all(values(out[0]), reference_forward(s, xv, wv), 1e-12, what + " Conv2D");
      // dx[b, iy, ix, c] = sum over outputs reading it: the naive adjoint of the forward loop.
      std::vector<double> dx(static_cast<size_t>(k.n * k.h * k.w * k.c), 0.0);
      for (int64_t b = 0; b < k.n; ++b)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                const int64_t iy = oy + ky - pt, ix = ox + kx - pl;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                for (int64_t ci = 0; ci < k.c; ++ci)
                  for (int64_t o = 0; o < k.o; ++o)
                    dx[static_cast<size_t>(((b * k.h + iy) * k.w + ix) * k.c + ci)] +=
                        dyv[static_cast<size_t>(((b * oh + oy) * ow + ox) * k.o + o)] *
                        wv[static_cast<size_t>(((ky * k.kw + kx) * k.c + ci) * k.o + o)];
              }
      expect_near_all(values(out[1]), dx, 1e-12, what + " Conv2DBackpropInput");
      expect_near_all(values(out[2]), reference_filter_grad(s, xv, dyv), 1e-12,
                      what + " Conv2DBackpropFilter");
    }
}

}  // namespace
}  // namespace spire::cpu

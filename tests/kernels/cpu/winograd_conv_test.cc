// Winograd F(2x2, 3x3) (kernels/cpu/winograd_conv.h) against a plain loop in long double:
// every padding (VALID, SAME, the input gradient's full padding, asymmetric), odd output
// sizes (clipped tiles), channel counts off the vector width, several tile blocks; f64 to
// 1e-12, f32 to 1e-5 of the magnitude; and the same bits at any thread count.
#include "kernels/cpu/winograd_conv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace spire::cpu {
namespace {

template <typename T>
std::vector<long double> reference(const DirectConvShape& s, const std::vector<T>& x, const std::vector<T>& w) {
  std::vector<long double> y(static_cast<size_t>(s.n * s.oh * s.ow * s.o), 0.0L);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t oy = 0; oy < s.oh; ++oy)
      for (int64_t ox = 0; ox < s.ow; ++ox)
        for (int64_t o = 0; o < s.o; ++o) {
          long double acc = 0;
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy - s.pt + ky, ix = ox - s.pl + kx;
              if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
              for (int64_t c = 0; c < s.c; ++c)
                acc += static_cast<long double>(x[static_cast<size_t>(((n * s.h + iy) * s.w + ix) * s.c + c)]) *
                       w[static_cast<size_t>(((ky * 3 + kx) * s.c + c) * s.o + o)];
            }
          y[static_cast<size_t>(((n * s.oh + oy) * s.ow + ox) * s.o + o)] = acc;
        }
  return y;
}

// {n, h, w, c, kh, kw, o, oh, ow, pt, pl}
const DirectConvShape kShapes[] = {
    {2, 7, 9, 8, 3, 3, 8, 7, 9, 1, 1},       // SAME, odd sizes
    {1, 6, 5, 12, 3, 3, 16, 4, 3, 0, 0},     // VALID
    {2, 5, 4, 9, 3, 3, 11, 7, 6, 2, 2},      // full padding (a VALID conv's input gradient)
    {1, 8, 8, 8, 3, 3, 8, 8, 8, 0, 1},       // asymmetric
    {3, 14, 14, 32, 3, 3, 32, 14, 14, 1, 1}, // MNIST's conv1: several tile blocks
};

template <typename T>
void check_against_reference(double tolerance) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const DirectConvShape& s : kShapes) {
    ASSERT_TRUE(winograd_applies(s));
    std::vector<T> x(static_cast<size_t>(s.n * s.h * s.w * s.c)), w(static_cast<size_t>(9 * s.c * s.o));
    for (T& v : x) v = static_cast<T>(u(rng));
    for (T& v : w) v = static_cast<T>(u(rng));
    std::vector<T> y(static_cast<size_t>(s.n * s.oh * s.ow * s.o), T(-7));
    winograd_conv2d(s, x.data(), w.data(), y.data(), nullptr);
    const std::vector<long double> want = reference(s, x, w);
    const double scale = std::sqrt(9.0 * static_cast<double>(s.c));  // typical |y|
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(static_cast<double>(y[i]), static_cast<double>(want[i]), tolerance * scale)
          << "shape c=" << s.c << " o=" << s.o << " oh=" << s.oh << " ow=" << s.ow << " at " << i;
  }
}

TEST(WinogradConv, MatchesThePlainConvolutionF64) { check_against_reference<double>(1e-12); }
TEST(WinogradConv, MatchesThePlainConvolutionF32) { check_against_reference<float>(1e-5); }

TEST(WinogradConv, TheThreadCountDoesNotChangeABit) {
  const DirectConvShape s = kShapes[4];
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<size_t>(s.n * s.h * s.w * s.c)), w(static_cast<size_t>(9 * s.c * s.o));
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  std::vector<float> one(static_cast<size_t>(s.n * s.oh * s.ow * s.o)), three(one.size());
  winograd_conv2d(s, x.data(), w.data(), one.data(), nullptr);
  ThreadPool pool(3);
  winograd_conv2d(s, x.data(), w.data(), three.data(), &pool);
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
}

TEST(WinogradConv, AppliesTo3x3WithEnoughChannelsOnly) {
  EXPECT_FALSE(winograd_applies({1, 8, 8, 1, 3, 3, 32, 8, 8, 1, 1}));  // one input channel
  EXPECT_FALSE(winograd_applies({1, 8, 8, 8, 5, 5, 8, 8, 8, 2, 2}));   // 5x5
  EXPECT_FALSE(winograd_applies({1, 8, 8, 8, 3, 3, 4, 8, 8, 1, 1}));   // four outputs
  EXPECT_TRUE(winograd_applies({1, 8, 8, 8, 3, 3, 8, 8, 8, 1, 1}));
}

}  // namespace
}  // namespace spire::cpu

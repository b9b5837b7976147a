// f16 / bf16 storage: the conversions of kernels/functors.h (round to
// nearest even, subnormals, overflow, NaN) checked exhaustively against an
// independent reference, and the Cast op between every dtype and f16/bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/functors.h"
#include "spire.h"

namespace spire::testing {
namespace {

using functors::bf16_bits_to_float;
using functors::float_to_bf16_bits;
using functors::float_to_half_bits;
using functors::half_bits_to_float;

// Reference f16 decoding from the definition: (-1)^s 2^(e-15) (1 + m/1024),
// subnormals 2^-14 (m/1024).
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m / 1024.0, -14);
  else v = std::ldexp(1 + m / 1024.0, e - 15);
  return s ? -v : v;
}

TEST(Half, EveryF16ValueDecodesExactlyAndRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const double want = half_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(f)))) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "bits " << h;
    ASSERT_EQ(float_to_half_bits(f), h) << "bits " << h;
  }
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  // Every f16 interval: the midpoint goes to the even neighbour, a hair
  // either side to the nearer one. Positive finite values below the largest.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = half_value(static_cast<uint16_t>(h)), hi = half_value(static_cast<uint16_t>(h + 1));
    const double mid = (lo + hi) / 2;  // exact in f32: f16 has 11 bits
    const uint16_t even = (h % 2 == 0) ? static_cast<uint16_t>(h) : static_cast<uint16_t>(h + 1);
    ASSERT_EQ(float_to_half_bits(static_cast<float>(mid)), even) << "midpoint above bits " << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(static_cast<float>(mid), 0.0f)), h) << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(static_cast<float>(mid), 1e9f)), h + 1) << h;
    ASSERT_EQ(float_to_half_bits(static_cast<float>(-mid)), even | 0x8000) << h;
  }
  // Overflow: 65504 is the largest; from 65520 (the midpoint to 2^16) up, infinity.
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-std::numeric_limits<float>::infinity()), 0xfc00);
  // Underflow: half the smallest subnormal (2^-25) ties to zero, above it to 2^-24.
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 1);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(std::nanf("")))));
}

TEST(Half, BF16KeepsTheTopBitsRoundedToNearestEven) {
  for (uint32_t h = 0; h < 65536; h += 7) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16_bits(f), h) << h;
  }
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: to even (1); a hair above: up.
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  // 1 + 3 * 2^-8 is the midpoint between 0x3f81 and 0x3f82: to even (0x3f82).
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
}

TEST(Half, CastOpBetweenEveryDtypeAndHalfStorage) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {6}, "x");
  Tensor in = Tensor::from_vector<float>({6}, {1.0f, -2.5f, 65504.0f, 1e-7f, 0.1f, 3.0e5f});
  Output h = ops::cast(x, DType::F16);
  Output b = ops::cast(x, DType::BF16);
  Output h32 = ops::cast(h, DType::F32), b32 = ops::cast(b, DType::F32);
  Output h64 = ops::cast(h, DType::F64), hi = ops::cast(h, DType::I32);
  Output hb = ops::cast(ops::cast(h, DType::BF16), DType::F32);
  Output from_i = ops::cast(ops::cast(ops::constant(Tensor::from_vector<int64_t>({3}, {-3, 2049, 70000})), DType::F16),
                            DType::F64);
  Session s(g);
  auto out = s.run({h, h32, b32, h64, hi, hb, from_i}, {{x, in}});
  EXPECT_EQ(out[0].dtype(), DType::F16);
  EXPECT_EQ(out[0].nbytes(), 12u);
  const float* p = out[1].data<float>();
  for (int i = 0; i < 6; ++i) {
    const float f = in.data<float>()[i];
    EXPECT_EQ(p[i], half_bits_to_float(float_to_half_bits(f))) << i;
    EXPECT_EQ(out[2].data<float>()[i], bf16_bits_to_float(float_to_bf16_bits(f))) << i;
    EXPECT_EQ(out[3].data<double>()[i], static_cast<double>(p[i])) << i;
    EXPECT_EQ(out[5].data<float>()[i], bf16_bits_to_float(float_to_bf16_bits(p[i]))) << i;
  }
  EXPECT_EQ(p[1], -2.5f);
  EXPECT_EQ(p[2], 65504.0f);
  EXPECT_TRUE(std::isinf(p[5]));              // 3e5 overflows f16
  EXPECT_NEAR(out[2].data<float>()[5], 3.0e5f, 3.0e5f / 128);  // bf16 keeps f32's range
  EXPECT_EQ(out[4].data<int32_t>()[1], -2);   // -2.5 -> -2 (truncation, as static_cast)
  EXPECT_EQ(out[6].data<double>()[0], -3.0);
  EXPECT_EQ(out[6].data<double>()[1], 2048.0);  // 2049 ties to even in f16
  EXPECT_TRUE(std::isinf(out[6].data<double>()[2]));
}

}  // namespace
}  // namespace spire::testing

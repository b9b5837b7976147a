// Branch-free f32 exp and erf that compilers vectorize: the host side of the f32 Gelu and
// GeluGrad functors (kernels/functors.h) uses them, so the CPU's elementwise loops, compiled
// per instruction set (kernels/cpu/elementwise.cc), run them 8 or 16 lanes at a time instead
// of calling glibc's scalar erff/expf per element. CUDA keeps its own erff/expf.
//   exp_f32: Cephes' expf (round-to-nearest range reduction by ln 2 in two parts, a degree-6
//            polynomial, the exponent built in the bits): within 1 ulp for x in [-87.3, 88]
//            (measured 0.7); 0 below (true results there are subnormal), exp(88) above
//            (+inf included: meant for arguments <= 0, as Gelu's). NaN gives NaN.
//   erf_f32: for |x| >= 0.5 Abramowitz & Stegun 7.1.26, erf(x) = 1 - t (a1 + t (a2 + ...))
//            e^{-x^2} with t = 1 / (1 + p|x|): absolute error below 1.5e-7 plus f32 rounding
//            (PyTorch's vectorized CPU erf, and so its exact GELU on CPU, uses the same
//            formula everywhere); below 0.5 erf's Maclaurin series to x^13, which keeps the
//            relative precision the formula loses to cancellation near 0. Gelu and
//            GeluGrad take the formula alone (erf_as_f32): 1 + erf(x) needs no more.
// Every polynomial step is an explicit fused multiply-add (fma_f32), rounded once: fewer
// instructions than a multiply and an add, and the same bits in every loop copy (AVX-512,
// AVX2, a scalar tail), whatever the file's FMA-contraction setting.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace spire::vmath {

/// a * b + c rounded once: the polynomials below use it explicitly, so every instruction set
/// (and a scalar loop tail) computes the same bits, with FMA instructions where the loop's
/// target has them (kernels/cpu/vector_loops.h's AVX2 and AVX-512 copies, CUDA) and libm's
/// exact fmaf elsewhere.
SPIRE_HD inline float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

/// |x| (a bit operation: NaN stays NaN).
SPIRE_HD inline float fabs_f32(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return __builtin_fabsf(x);
#endif
}

/// |mag| with sign's sign bit (a bit operation).
SPIRE_HD inline float copysign_f32(float mag, float sign) {
#if defined(__CUDA_ARCH__)
  return copysignf(mag, sign);
#else
  return __builtin_copysignf(mag, sign);
#endif
}

/// exp(x) for x in [-87.33654, 88] (NaN gives NaN): exp_f32 without its range checks, for
/// callers whose argument is known to lie there.
SPIRE_HD inline float exp_core_f32(float x) {
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (exact for |x / ln 2| < 2^22): t holds
  // 1.5 * 2^23 + n, so n also sits in t's low mantissa bits (no float-to-int conversion,
  // which a NaN would make undefined).
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = fma_f32(n, -0.693359375f, x);
  r = fma_f32(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma_f32(p, r, 1.3981999507e-3f);
  p = fma_f32(p, r, 8.3334519073e-3f);
  p = fma_f32(p, r, 4.1665795894e-2f);
  p = fma_f32(p, r, 1.6666665459e-1f);
  p = fma_f32(p, r, 5.0000001201e-1f);
  p = fma_f32(p, r * r, r) + 1.0f;
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  const uint32_t bits = (tb + 127u) << 23;  // (n + 127) << 23: the low 9 bits of tb + 127
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

SPIRE_HD inline float exp_f32(float x) {
  const float lo = -87.33654f, hi = 88.0f;
  const float xc = x < lo ? lo : (x > hi ? hi : x);
  const float y = exp_core_f32(xc);
  return x < lo ? 0.0f : y;
}

/// Above this |x|, erf(x) is +-1 in f32 (erfc(9.3) is about 1e-39); clamped here, -x^2 >=
/// -86.49 stays inside exp_core_f32's range. erf's callers clamp |x| before exp(-x^2).
constexpr float kErfClampF32 = 9.3f;

/// erf(x) by Abramowitz & Stegun 7.1.26 alone, from ax = |x| and e = exp(-a^2), a =
/// min(ax, kErfClampF32), which the caller computed: within 1.5e-7 (plus rounding) of erf
/// everywhere but without erf's relative precision near 0, which 1 + erf(x) (the normal
/// cdf of Gelu and GeluGrad) does not need.
SPIRE_HD inline float erf_as_f32(float x, float ax, float e) {
  const float t = 1.0f / fma_f32(0.3275911f, ax, 1.0f);
  float p = 1.061405429f;
  p = fma_f32(p, t, -1.453152027f);
  p = fma_f32(p, t, 1.421413741f);
  p = fma_f32(p, t, -0.284496736f);
  p = fma_f32(p, t, 0.254829592f);
  return copysign_f32(fma_f32(-p * t, e, 1.0f), x);
}

/// erf(x) from ax and e as erf_as_f32 takes them, with erf's relative precision near 0.
SPIRE_HD inline float erf_from_exp_f32(float x, float ax, float e) {
  const float r = erf_as_f32(x, ax, e);
  // Near 0, 1 - (a value near 1) loses erf's relative precision: the Maclaurin series
  // 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360) instead.
  const float z = x * x;
  float q = 1.0f / 9360.0f;
  q = fma_f32(q, z, -1.0f / 1320.0f);
  q = fma_f32(q, z, 1.0f / 216.0f);
  q = fma_f32(q, z, -1.0f / 42.0f);
  q = fma_f32(q, z, 1.0f / 10.0f);
  q = fma_f32(q, z, -1.0f / 3.0f);
  q = fma_f32(q, z, 1.0f);
  const float series = 1.12837916709551257f * x * q;
  return ax < 0.5f ? series : r;
}

/// min(ax, kErfClampF32) with a NaN kept (the comparison is false for it).
SPIRE_HD inline float erf_clamp_f32(float ax) { return ax > kErfClampF32 ? kErfClampF32 : ax; }

SPIRE_HD inline float erf_f32(float x) {
  const float ax = fabs_f32(x);
  const float a = erf_clamp_f32(ax);
  return erf_from_exp_f32(x, ax, exp_core_f32(-a * a));
}

}  // namespace spire::vmath

// Elementwise math as __host__ __device__ functors, shared by the CPU
// kernels (kernels/cpu/elementwise.cc) and the CUDA kernels
// (kernels/cuda/elementwise.cu): each op's math is written once, here.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/host_device.h"
#include "kernels/vector_math.h"

namespace spire::functors {

// ---- binary arithmetic -----------------------------------------------------
struct Add {
  template <typename T> SPIRE_HD T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  template <typename T> SPIRE_HD T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  template <typename T> SPIRE_HD T operator()(T a, T b) const { return a * b; }
};
struct Div {
  template <typename T> SPIRE_HD T operator()(T a, T b) const { return a / b; }
};
/// Integer division (truncating) with a defined result where C++ has none:
/// INT_MIN / -1 wraps to INT_MIN (two's complement, as NumPy), and a zero
/// divisor gives 0 (the CPU kernel rejects zero divisors before it runs; a
/// GPU kernel cannot raise, so 0 is what it writes).
struct IntegerDiv {
  template <typename T> SPIRE_HD T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    if (b == T(0)) return T(0);
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));
    return a / b;
  }
};
struct Pow {
  template <typename T> SPIRE_HD T operator()(T a, T b) const { using std::pow; return pow(a, b); }
};
struct Maximum {
  template <typename T> SPIRE_HD T operator()(T a, T b) const {
    return (a != a) ? a : (a > b ? a : b);  // NaN propagates
  }
};
struct Minimum {
  template <typename T> SPIRE_HD T operator()(T a, T b) const {
    return (a != a) ? a : (a < b ? a : b);
  }
};

// ---- comparisons and logical (bool result) ---------------------------------
struct Equal {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a == b; }
};
struct NotEqual {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a != b; }
};
struct Less {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a < b; }
};
struct LessEqual {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a <= b; }
};
struct Greater {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a > b; }
};
struct GreaterEqual {
  template <typename T> SPIRE_HD bool operator()(T a, T b) const { return a >= b; }
};
struct LogicalAnd {
  SPIRE_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct LogicalOr {
  SPIRE_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct LogicalNot {
  SPIRE_HD bool operator()(bool a) const { return !a; }
};

// ---- unary -----------------------------------------------------------------
struct Neg {
  template <typename T> SPIRE_HD T operator()(T a) const { return -a; }
};
struct Exp {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::exp; return exp(a); }
};
struct Log {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::log; return log(a); }
};
struct Sqrt {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::sqrt; return sqrt(a); }
};
struct Rsqrt {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::sqrt; return T(1) / sqrt(a); }
};
struct Abs {
  template <typename T> SPIRE_HD T operator()(T a) const { return a < T(0) ? T(-a) : a; }
};
struct Square {
  template <typename T> SPIRE_HD T operator()(T a) const { return a * a; }
};
struct Sign {
  // NaN stays NaN (a != a only for NaN), as in TensorFlow.
  template <typename T> SPIRE_HD T operator()(T a) const {
    return a > T(0) ? T(1) : (a < T(0) ? T(-1) : (a != a ? a : T(0)));
  }
};
struct Erf {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::erf; return erf(a); }
};
struct Relu {
  // NaN stays NaN, as in TensorFlow (a diverging run must not look healthy);
  // Relu's gradient, g * sign(relu(x)), then keeps NaN too.
  template <typename T> SPIRE_HD T operator()(T a) const { return (a > T(0) || a != a) ? a : T(0); }
};
struct Sigmoid {
  template <typename T> SPIRE_HD T operator()(T a) const {
    using std::exp;
    // Stable for large |a|.
    if (a >= T(0)) return T(1) / (T(1) + exp(-a));
    T e = exp(a);
    return e / (T(1) + e);
  }
};
struct Tanh {
  template <typename T> SPIRE_HD T operator()(T a) const { using std::tanh; return tanh(a); }
};
/// The exact GELU 0.5 x (1 + erf(x / sqrt(2))). f32 on the host uses vmath::erf_as_f32
/// (kernels/vector_math.h: vectorizable, within 3.5e-7 of erf, PyTorch's CPU GELU's formula);
/// f64, and f32 on CUDA, the math library's erf.
struct Gelu {
  template <typename T> SPIRE_HD T operator()(T a) const {
#if !defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<T, float>) {
      const float u = a * 0.70710678118654752440f, au = vmath::fabs_f32(u);
      const float c = vmath::erf_clamp_f32(au);
      return 0.5f * a * (1.0f + vmath::erf_as_f32(u, au, vmath::exp_core_f32(-c * c)));
    } else
#endif
    {
      using std::erf;
      return T(0.5) * a * (T(1) + erf(a * T(0.70710678118654752440)));
    }
  }
};
/// The exact GELU's gradient dy * (Phi(x) + x phi(x)) (GeluGrad: binary, dy first); f32 on
/// the host through kernels/vector_math.h like Gelu, with one exponential shared by Phi's erf
/// and the density phi.
struct GeluGrad {
  template <typename T> SPIRE_HD T operator()(T dy, T x) const {
#if !defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<T, float>) {
      // One exponential for both: e = exp(-u^2) = exp(-x^2 / 2) for u = x / sqrt(2) (u
      // clamped where erf is +-1 and the density 0).
      const float u = x * 0.70710678118654752440f, au = vmath::fabs_f32(u);
      const float a = vmath::erf_clamp_f32(au);
      const float e = vmath::exp_core_f32(-a * a);
      const float cdf = 0.5f * (1.0f + vmath::erf_as_f32(u, au, e));
      const float pdf = au > vmath::kErfClampF32 ? 0.0f : 0.39894228040143267794f * e;
      return dy * (cdf + x * pdf);
    } else
#endif
    {
      using std::erf;
      using std::exp;
      const T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
      const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
      return dy * (cdf + x * pdf);
    }
  }
};
/// GELU's tanh approximation (GPT-2, llm.c; PyTorch's approximate="tanh"):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <typename T> SPIRE_HD T operator()(T a) const {
    using std::tanh;
    const T u = T(0.79788456080286535588) * (a + T(0.044715) * a * a * a);
    return T(0.5) * a * (T(1) + tanh(u));
  }
};
struct Softplus {
  template <typename T> SPIRE_HD T operator()(T a) const {
    using std::exp;
    using std::log1p;
    // log(1 + e^a) = max(a, 0) + log1p(e^-|a|)
    T m = a > T(0) ? a : T(0);
    T na = a > T(0) ? -a : a;
    return m + log1p(exp(na));
  }
};
struct LeakyRelu {
  double alpha;
  template <typename T> SPIRE_HD T operator()(T a) const { return a > T(0) ? a : T(alpha) * a; }
};

// ---- select and cast -------------------------------------------------------
struct Select {
  template <typename T> SPIRE_HD T operator()(bool c, T a, T b) const { return c ? a : b; }
};
/// `a` converted to `To`. A floating value to an integer type rounds toward
/// zero and saturates at the type's limits, NaN giving 0: what CUDA's
/// conversion instructions do, where C++ leaves a value out of range
/// undefined (so the CPU and GPU kernels agree on every input).
template <typename To, typename From>
SPIRE_HD inline To convert(From a) {
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
    if (a != a) return To(0);
    // (The limits as From: max rounds up to 2^k, from which every value is out of range.)
    if (a <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (a >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  }
  return static_cast<To>(a);
}

template <typename To>
struct CastTo {
  template <typename T> SPIRE_HD To operator()(T a) const { return convert<To>(a); }
};

// ---- half-precision storage (f16, bf16) -------------------------------------
// f16 and bf16 tensors are stored as their 16 bits; math converts through
// f32. Conversions round to nearest even; NaN stays NaN (quiet), overflow
// gives infinity, f16 subnormals are exact.

SPIRE_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
SPIRE_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// IEEE binary16 bits of `f`, rounded to nearest even.
SPIRE_HD inline uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t o;
  if (x >= (127u + 16u) << 23) {                  // |f| >= 2^16: infinity or NaN
    o = x > (255u << 23) ? 0x7e00u : 0x7c00u;
  } else if (x < (113u << 23)) {                   // an f16 subnormal or zero
    const float magic = bits_float(((127u - 15u) + (23u - 10u) + 1u) << 23);
    o = float_bits(bits_float(x) + magic) - float_bits(magic);  // the add rounds to nearest even
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu + odd;      // rebias the exponent, round to nearest even
    o = x >> 13;                                   // (an overflow carries into infinity)
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

/// The f32 value of IEEE binary16 bits (exact).
SPIRE_HD inline float half_bits_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // infinity or NaN
  } else if (exp == 0) {      // zero or subnormal: renormalize
    o += 1u << 23;
    o = float_bits(bits_float(o) - bits_float(113u << 23));
  }
  return bits_float(o | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

/// bfloat16 bits of `f` (its top 16 bits), rounded to nearest even.
SPIRE_HD inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// The f32 value of bfloat16 bits (exact).
SPIRE_HD inline float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

/// f16 / bf16 bits -> `To` (through f32); `bf16` picks the format.
template <typename To>
struct FromHalf {
  bool bf16;
  SPIRE_HD To operator()(uint16_t h) const {
    return convert<To>(bf16 ? bf16_bits_to_float(h) : half_bits_to_float(h));
  }
};
/// `From` -> f16 / bf16 bits (through f32).
struct ToHalf {
  bool bf16;
  template <typename From> SPIRE_HD uint16_t operator()(From x) const {
    const float f = static_cast<float>(x);
    return bf16 ? float_to_bf16_bits(f) : float_to_half_bits(f);
  }
};
/// f16 <-> bf16 (through f32).
struct HalfToHalf {
  bool from_bf16, to_bf16;
  SPIRE_HD uint16_t operator()(uint16_t h) const {
    const float f = from_bf16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
    return to_bf16 ? float_to_bf16_bits(f) : float_to_half_bits(f);
  }
};

/// Whether functor F is instantiated for element type T by the kernel
/// registration helpers: arithmetic functors skip bool.
template <typename F, typename T>
inline constexpr bool kSupports = !std::is_same_v<T, bool>;
template <> inline constexpr bool kSupports<Equal, bool> = true;
template <> inline constexpr bool kSupports<NotEqual, bool> = true;
template <> inline constexpr bool kSupports<LogicalAnd, bool> = true;
template <> inline constexpr bool kSupports<LogicalOr, bool> = true;
template <> inline constexpr bool kSupports<LogicalNot, bool> = true;

}  // namespace spire::functors

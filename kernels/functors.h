// Elementwise math as __host__ __device__ functors, shared by the CPU
// kernels (kernels/cpu/elementwise.cc) and the CUDA kernels
// (kernels/cuda/elementwise.cu): each op's math is written once, here.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define SPIRE_HD __host__ __device__
#else
#define SPIRE_HD
#endif

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
struct Gelu {
  template <typename T> SPIRE_HD T operator()(T a) const {
    using std::erf;
    return T(0.5) * a * (T(1) + erf(a * T(0.70710678118654752440)));
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
template <typename To>
struct CastTo {
  template <typename T> SPIRE_HD To operator()(T a) const { return static_cast<To>(a); }
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

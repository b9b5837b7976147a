// Elementwise loops compiled per instruction set for the CPU kernels: the same loop three
// times (AVX-512, AVX2+FMA, baseline) and the one this CPU runs best picked at run time
// (kernels/cpu/gemm.h's detection), so a functor written with plain arithmetic runs 16 or 8
// lanes at a time while the library itself is built without -march flags. The functor's code
// has no target of its own and inlines into each variant; GCC vectorizes what it can (calls
// into the math library stay scalar). Results are those of the scalar arithmetic, up to the
// FMA contractions the AVX variants may use. Used by kernels/cpu/elementwise.cc (the f32
// table ops, bf16 casts) and kernels/cpu/matmul_kernels.cc (bf16 widening and rounding);
// run_vec compiles a whole chunk of a kernel's work the same way (batch norm, layer norm,
// attention, L2Loss).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace spire::cpu {

/// Which operand of binary_vec is one value broadcast over the loop (kNone: both are arrays).
enum class VecScalar { kNone, kA, kB };

namespace vec_detail {
#if defined(__x86_64__) || defined(__i386__)
#define SPIRE_VEC_X86 1
#define SPIRE_VEC_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define SPIRE_VEC_AVX2 __attribute__((target("avx2,fma")))
#else
#define SPIRE_VEC_X86 0
#endif

#define SPIRE_VEC_LOOPS(SUFFIX, TARGET)                                                      \
  template <class In, class Out, class F>                                                    \
  TARGET void unary_##SUFFIX(const In* x, Out* y, int64_t n, F f) {                          \
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);                                          \
  }                                                                                          \
  template <VecScalar S, class In, class Out, class F>                                       \
  TARGET void binary_##SUFFIX(const In* a, const In* b, Out* c, int64_t n, F f) {            \
    if constexpr (S == VecScalar::kNone) {                                                   \
      for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], b[i]);                                  \
    } else if constexpr (S == VecScalar::kB) {                                               \
      const In bv = b[0];                                                                    \
      for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], bv);                                    \
    } else {                                                                                 \
      const In av = a[0];                                                                    \
      for (int64_t i = 0; i < n; ++i) c[i] = f(av, b[i]);                                    \
    }                                                                                        \
  }
// f() with all that it calls inlined into a copy per instruction set (GCC's and clang's
// flatten; code without a target of its own may inline into a function with a wider one).
#define SPIRE_VEC_FLAT(SUFFIX, TARGET) \
  template <class F>                   \
  TARGET __attribute__((flatten)) void flat_##SUFFIX(const F& f) { f(); }
SPIRE_VEC_LOOPS(baseline, )
SPIRE_VEC_FLAT(baseline, )
#if SPIRE_VEC_X86
SPIRE_VEC_LOOPS(avx2, SPIRE_VEC_AVX2)
SPIRE_VEC_LOOPS(avx512, SPIRE_VEC_AVX512)
SPIRE_VEC_FLAT(avx2, SPIRE_VEC_AVX2)
SPIRE_VEC_FLAT(avx512, SPIRE_VEC_AVX512)
#endif
#undef SPIRE_VEC_LOOPS
#undef SPIRE_VEC_FLAT
}  // namespace vec_detail

/// y[i] = f(x[i]) for i < n, on this CPU's best instruction set.
template <class In, class Out, class F>
void unary_vec(const In* x, Out* y, int64_t n, F f) {
#if SPIRE_VEC_X86
  switch (detail::gemm_best_isa()) {
    case detail::GemmIsa::kAvx512:
      return vec_detail::unary_avx512(x, y, n, f);
    case detail::GemmIsa::kAvx2:
      return vec_detail::unary_avx2(x, y, n, f);
    default:
      break;
  }
#endif
  vec_detail::unary_baseline(x, y, n, f);
}

/// c[i] = f(a[i], b[i]) for i < n (with a[0] or b[0] for every i when S says that operand is
/// a broadcast value), on this CPU's best instruction set.
template <VecScalar S, class In, class Out, class F>
void binary_vec(const In* a, const In* b, Out* c, int64_t n, F f) {
#if SPIRE_VEC_X86
  switch (detail::gemm_best_isa()) {
    case detail::GemmIsa::kAvx512:
      return vec_detail::binary_avx512<S>(a, b, c, n, f);
    case detail::GemmIsa::kAvx2:
      return vec_detail::binary_avx2<S>(a, b, c, n, f);
    default:
      break;
  }
#endif
  vec_detail::binary_baseline<S>(a, b, c, n, f);
}

/// Runs f() compiled for this CPU's best instruction set: f (a loop over plain arithmetic,
/// such as a kernel's work on one chunk) is inlined whole into each variant, so its loops
/// vectorize 16 or 8 lanes wide. What f calls must be inlinable (no std::function, no
/// library calls in its hot loop). A file that uses it is compiled with -ffp-contract=off
/// (CMakeLists.txt), so no variant contracts a * b + c into an FMA and all round alike.
template <class F>
void run_vec(const F& f) {
#if SPIRE_VEC_X86
  switch (detail::gemm_best_isa()) {
    case detail::GemmIsa::kAvx512:
      return vec_detail::flat_avx512(f);
    case detail::GemmIsa::kAvx2:
      return vec_detail::flat_avx2(f);
    default:
      break;
  }
#endif
  vec_detail::flat_baseline(f);
}

}  // namespace spire::cpu

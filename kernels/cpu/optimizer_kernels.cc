// CPU kernels of the fused optimizer updates (FusedApply*, see
// core/ops/optimizer_ops.h): for each variable in turn, one parallel_for
// over its elements applies the op's update functor
// (kernels/optimizer_functors.h) to the variable and its slots (locked for
// that variable's update only), in place or into new buffers per the
// copy-on-write rule of FusedApplyBinding::acquire. A gated node whose
// apply_if is 0 returns before locking anything: every value stays as it is.
// The element loop is compiled per instruction set like kernels/cpu/vector_loops.h's (this
// file, too, builds without FMA contraction: a variable's update must not depend on where
// the threads split it).
#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/gemm.h"
#include "kernels/optimizer_functors.h"

namespace spire::cpu {
namespace {

// Elements [begin, end): each read from in[s], updated by f, written to out[s] (in[s] may
// equal out[s]: one iteration reads and writes only its own element, hence no dependence
// between iterations, which GCC is told; clang, used only for the sanitizer builds, warns
// where it cannot honour such a hint, so it gets none).
#if defined(__GNUC__) && !defined(__clang__)
#define SPIRE_NO_LOOP_DEPENDENCE _Pragma("GCC ivdep")
#else
#define SPIRE_NO_LOOP_DEPENDENCE
#endif
#define SPIRE_APPLY_LOOP(SUFFIX, TARGET)                                                    \
  template <int K, typename T, typename F>                                                  \
  TARGET void apply_##SUFFIX(const T* const* in, T* const* out, const T* g, int64_t begin,  \
                             int64_t end, const F& f) {                                     \
    SPIRE_NO_LOOP_DEPENDENCE for (int64_t e = begin; e < end; ++e) {                        \
      T st[K];                                                                              \
      for (int s = 0; s < K; ++s) st[s] = in[s][e];                                         \
      f(st, g[e]);                                                                          \
      for (int s = 0; s < K; ++s) out[s][e] = st[s];                                        \
    }                                                                                       \
  }
SPIRE_APPLY_LOOP(baseline, )
#if defined(__x86_64__) || defined(__i386__)
SPIRE_APPLY_LOOP(avx2, __attribute__((target("avx2,fma"))))
SPIRE_APPLY_LOOP(avx512, __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma"))))
#endif
#undef SPIRE_APPLY_LOOP

template <int K, typename T, typename F>
void apply_range(const T* const* in, T* const* out, const T* g, int64_t begin, int64_t end,
                 const F& f) {
#if defined(__x86_64__) || defined(__i386__)
  switch (detail::gemm_best_isa()) {
    case detail::GemmIsa::kAvx512:
      return apply_avx512<K>(in, out, g, begin, end, f);
    case detail::GemmIsa::kAvx2:
      return apply_avx2<K>(in, out, g, begin, end, f);
    default:
      break;
  }
#endif
  apply_baseline<K>(in, out, g, begin, end, f);
}

template <typename T, typename F>
void fused_apply(KernelContext& ctx, F f) {
  constexpr int kStates = F::kSlots + 1;
  const bool gated = ctx.attr<bool>("gated");
  kernels::FusedApplyBinding b =
      kernels::bind_fused_apply(ctx, F::kSlots, F::kScalars + (gated ? 1 : 0));
  if (gated && ctx.input(b.layout.gate()).data<T>()[0] == T(0)) return;
  T scalars[F::kScalars];
  for (int k = 0; k < F::kScalars; ++k) scalars[k] = ctx.input(b.layout.scalar(k)).data<T>()[0];
  f.prepare(scalars);
  for (int i = 0; i < b.layout.n; ++i) {
    b.acquire(ctx, i, i + 1);  // this variable and its slots, locked until commit
    const T* g = ctx.input(b.layout.grad(i)).data<T>();
    const T* in[kStates];
    T* out[kStates];
    for (int s = 0; s < kStates; ++s) {
      in[s] = b.slot(s, i).data<T>();
      out[s] = b.target(s, i).data<T>();
    }
    // Each element is read, then written, by one thread (in[s] may equal out[s]).
    ctx.parallel_for(b.sizes[static_cast<size_t>(i)], kElementwiseGrain,
                     [&](int64_t begin, int64_t end) {
                       apply_range<kStates>(in, out, g, begin, end, f);
                     });
    b.commit();
  }
}

struct Registrar {
  template <typename Make>
  void operator()(const char* op, Make make) const {
    KernelRegistry::global().add(op, DeviceType::CPU, DType::F32, [make](KernelContext& ctx) {
      fused_apply<float>(ctx, make(ctx, float{}));
    });
    KernelRegistry::global().add(op, DeviceType::CPU, DType::F64, [make](KernelContext& ctx) {
      fused_apply<double>(ctx, make(ctx, double{}));
    });
  }
};

}  // namespace

SPIRE_STATIC_INIT(cpu_optimizer_kernels) { kernels::visit_fused_apply_ops(Registrar{}); }

}  // namespace spire::cpu

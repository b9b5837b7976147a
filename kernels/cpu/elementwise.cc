// CPU kernels for elementwise math, comparisons, logical ops, select, cast
// and the broadcast helpers SumToLike/BroadcastLike. The math of each op is
// the functor in kernels/functors.h, shared with the CUDA kernels. Large
// tensors are split over the session's thread pool (disjoint output ranges,
// so results do not depend on the thread count). Shape checks and the
// table registrar are shared with the CUDA kernels: kernels/elementwise_attrs.h.
// The contiguous f32 loops are compiled per instruction set (AVX-512, AVX2+FMA, baseline)
// and picked at run time like the GEMM's, so functors written with plain arithmetic (and
// kernels/vector_math.h) run 16 or 8 lanes at a time; the library itself needs no -march.
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/elementwise_attrs.h"
#include "kernels/elementwise_table.h"
#include "kernels/functors.h"

namespace spire::cpu {
namespace {

constexpr DType kFloat[] = {DType::F32, DType::F64};

using kernels::broadcast_or_fail;

template <typename T, typename F>
void binary_kernel(KernelContext& ctx, F f) {
  using R = decltype(f(T{}, T{}));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  Shape out = broadcast_or_fail(ctx, x.shape(), y.shape());
  Tensor& z = ctx.forward_input_or_allocate_output({0, 1}, 0, out);
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  R* pz = z.data<R>();
  std::array<std::vector<int64_t>, 2> st{broadcast_strides(x.shape(), out),
                                         broadcast_strides(y.shape(), out)};
  parallel_for_each_broadcast_row<2>(ctx, out, st, [&](int64_t o, const auto& off, const auto& inner, int64_t n) {
    const T* a = px + off[0];
    const T* b = py + off[1];
    R* c = pz + o;
    if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>) {
      if (inner[0] == 1 && inner[1] == 1) return binary_vec<VecScalar::kNone>(a, b, c, n, f);
      if (inner[0] == 1) return binary_vec<VecScalar::kB>(a, b, c, n, f);
      if (inner[1] == 1) return binary_vec<VecScalar::kA>(a, b, c, n, f);
    }
    if (inner[0] == 1 && inner[1] == 1) {
      for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], b[i]);
    } else if (inner[0] == 1) {
      const T bv = b[0];
      for (int64_t i = 0; i < n; ++i) c[i] = f(a[i], bv);
    } else if (inner[1] == 1) {
      const T av = a[0];
      for (int64_t i = 0; i < n; ++i) c[i] = f(av, b[i]);
    } else {
      const R v = f(a[0], b[0]);
      for (int64_t i = 0; i < n; ++i) c[i] = v;
    }
  });
}

template <typename T, typename F>
void unary_kernel(KernelContext& ctx, F f) {
  using R = decltype(f(T{}));
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.forward_input_or_allocate_output({0}, 0, x.shape());
  const T* px = x.data<T>();
  R* py = y.data<R>();
  ctx.parallel_for(x.num_elements(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>)
      unary_vec(px + b, py + b, e - b, f);
    else
      for (int64_t i = b; i < e; ++i) py[i] = f(px[i]);
  });
}

// The table's kernels for CPU (see kernels::TableRegistrar).
struct CpuLaunch {
  template <typename T, typename F>
  static void binary(KernelContext& ctx, F f) { binary_kernel<T>(ctx, f); }
  template <typename T, typename F>
  static void unary(KernelContext& ctx, F f) { unary_kernel<T>(ctx, f); }
};

template <typename T>
void integer_div_kernel(KernelContext& ctx) {
  const Tensor& y = ctx.input(1);
  const T* py = y.data<T>();
  for (int64_t i = 0; i < y.num_elements(); ++i)
    if (py[i] == 0) ctx.fail("integer division by zero");
  binary_kernel<T>(ctx, functors::IntegerDiv{});
}

template <typename T>
void select_kernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  Shape out = kernels::select_shape(ctx);
  Tensor& z = ctx.forward_input_or_allocate_output({1, 2}, 0, out);
  const bool* pc = c.data<bool>();
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* pz = z.data<T>();
  functors::Select f;
  std::array<std::vector<int64_t>, 3> st{broadcast_strides(c.shape(), out),
                                         broadcast_strides(x.shape(), out),
                                         broadcast_strides(y.shape(), out)};
  parallel_for_each_broadcast_row<3>(ctx, out, st, [&](int64_t o, const auto& off, const auto& inner, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      pz[o + i] = f(pc[off[0] + i * inner[0]], px[off[1] + i * inner[1]], py[off[2] + i * inner[2]]);
  });
}

bool is_half(DType dt) { return dt == DType::F16 || dt == DType::BF16; }

// Casts from or to f16 / bf16 (16-bit storage; through f32).
void cast_half_kernel(KernelContext& ctx, const Tensor& x, Tensor& y) {
  const uint16_t* hx = static_cast<const uint16_t*>(x.raw_data());
  uint16_t* hy = static_cast<uint16_t*>(y.raw_data());
  const int64_t n = x.num_elements();
  if (is_half(x.dtype()) && is_half(y.dtype())) {
    const functors::HalfToHalf f{x.dtype() == DType::BF16, y.dtype() == DType::BF16};
    ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hy[i] = f(hx[i]);
    });
  } else if (x.dtype() == DType::BF16 && y.dtype() == DType::F32) {
    float* py = y.data<float>();
    ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      unary_vec(hx + b, py + b, e - b, [](uint16_t h) { return functors::bf16_bits_to_float(h); });
    });
  } else if (x.dtype() == DType::F32 && y.dtype() == DType::BF16) {
    const float* px = x.data<float>();
    ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      unary_vec(px + b, hy + b, e - b, [](float f) { return functors::float_to_bf16_bits(f); });
    });
  } else if (is_half(x.dtype())) {
    visit_dtype(y.dtype(), "Cast", [&](auto to) {
      using To = decltype(to);
      const functors::FromHalf<To> f{x.dtype() == DType::BF16};
      To* py = y.data<To>();
      ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) py[i] = f(hx[i]);
      });
    });
  } else {
    visit_dtype(x.dtype(), "Cast", [&](auto from) {
      using From = decltype(from);
      const functors::ToHalf f{y.dtype() == DType::BF16};
      const From* px = x.data<From>();
      ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hy[i] = f(px[i]);
      });
    });
  }
}

void cast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  if (is_half(x.dtype()) || is_half(y.dtype())) return cast_half_kernel(ctx, x, y);
  visit_dtype(x.dtype(), "Cast", [&](auto from) {
    using From = decltype(from);
    visit_dtype(y.dtype(), "Cast", [&](auto to) {
      using To = decltype(to);
      functors::CastTo<To> f;
      const From* px = x.data<From>();
      To* py = y.data<To>();
      ctx.parallel_for(x.num_elements(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) py[i] = f(px[i]);
      });
    });
  });
}

template <typename T>
void add_n_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  kernels::check_same_shapes(ctx);
  // Only input 0 may become the output: the others are read after it is written.
  Tensor& z = ctx.forward_input_or_allocate_output({0}, 0, x0.shape());
  T* pz = z.data<T>();
  const int64_t n = z.num_elements();
  const T* p0 = x0.data<T>();
  ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (pz != p0) std::memcpy(pz + b, p0 + b, static_cast<size_t>(e - b) * sizeof(T));
    for (int k = 1; k < ctx.num_inputs(); ++k) {
      const T* p = ctx.input(k).data<T>();
      for (int64_t i = b; i < e; ++i) pz[i] += p[i];
    }
  });
}

// SumToLike: out has like's shape; accumulate x into it.
template <typename T>
void sum_to_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  Tensor* out = kernels::sum_to_like_output(ctx);
  if (!out) return;
  Tensor& z = *out;
  T* pz = z.data<T>();
  const int64_t size = z.num_elements();
  std::fill(pz, pz + size, T(0));
  const T* px = x.data<T>();
  std::array<std::vector<int64_t>, 1> st{broadcast_strides(target, x.shape())};
  auto accumulate = [&](T* out) {
    return [px, out](int64_t o, const auto& off, const auto& inner, int64_t n) {
      if (inner[0] == 0) {
        T acc = T(0);
        for (int64_t i = 0; i < n; ++i) acc += px[o + i];
        out[off[0]] += acc;
      } else {
        for (int64_t i = 0; i < n; ++i) out[off[0] + i] += px[o + i];
      }
    };
  };
  // Large inputs summed to a small target (e.g. bias gradients): each thread sums a share of
  // the rows into a private partial, and the partials are added in share order.
  const int64_t total = x.num_elements(), rank = x.rank();
  const int64_t n_inner = rank > 0 ? x.dim(static_cast<int>(rank - 1)) : 1;
  const int64_t rows = n_inner > 0 ? total / n_inner : 0;
  const int64_t parts = ctx.thread_pool() && rank > 0 && rows > 0
                            ? ctx.thread_pool()->num_chunks(rows, (kElementwiseGrain + n_inner - 1) / n_inner)
                            : 1;
  if (parts <= 1 || size * parts * 8 > total) {
    run_vec([&] { for_each_broadcast_row<1>(x.shape(), st, accumulate(pz)); });
    return;
  }
  std::vector<T> partials(static_cast<size_t>((parts - 1) * size), T(0));
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    run_vec([&] {
      for (int64_t p = p0; p < p1; ++p)
        for_each_broadcast_row_range<1>(x.shape(), st, ThreadPool::chunk_begin(rows, parts, p),
                                        ThreadPool::chunk_begin(rows, parts, p + 1),
                                        accumulate(p == 0 ? pz : partials.data() + (p - 1) * size));
    });
  });
  for (int64_t p = 1; p < parts; ++p)
    for (int64_t i = 0; i < size; ++i) pz[i] += partials[static_cast<size_t>((p - 1) * size + i)];
}

// BroadcastLike: out has like's shape; copy x broadcast into it.
template <typename T>
void broadcast_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  Tensor* out = kernels::broadcast_output(ctx, target);
  if (!out) return;
  Tensor& z = *out;
  T* pz = z.data<T>();
  const T* px = x.data<T>();
  std::array<std::vector<int64_t>, 1> st{broadcast_strides(x.shape(), target)};
  parallel_for_each_broadcast_row<1>(ctx, target, st, [&](int64_t o, const auto& off, const auto& inner, int64_t n) {
    for (int64_t i = 0; i < n; ++i) pz[o + i] = px[off[0] + i * inner[0]];
  });
}

template <template <typename> class K>
void register_templated(const char* op, std::initializer_list<DType> dtypes) {
  for (DType dt : dtypes)
    KernelRegistry::global().add(op, DeviceType::CPU, dt, [dt](KernelContext& ctx) {
      visit_dtype(dt, ctx.node().op_type().c_str(), [&](auto zero) {
        using T = decltype(zero);
        if constexpr (!std::is_same_v<T, bool>) K<T>::run(ctx);
      });
    });
}
template <typename T> struct SelectK { static void run(KernelContext& c) { select_kernel<T>(c); } };
template <typename T> struct AddNK { static void run(KernelContext& c) { add_n_kernel<T>(c); } };
template <typename T> struct SumToLikeK { static void run(KernelContext& c) { sum_to_like_kernel<T>(c); } };
template <typename T> struct BroadcastLikeK { static void run(KernelContext& c) { broadcast_like_kernel<T>(c); } };

}  // namespace

SPIRE_STATIC_INIT(cpu_elementwise_kernels) {
  kernels::visit_elementwise_table(kernels::TableRegistrar<CpuLaunch>{DeviceType::CPU});
  constexpr auto F32 = DType::F32, F64 = DType::F64, I32 = DType::I32, I64 = DType::I64,
                 B = DType::Bool;
  KernelRegistry::global().add("Div", DeviceType::CPU, I32, integer_div_kernel<int32_t>);
  KernelRegistry::global().add("Div", DeviceType::CPU, I64, integer_div_kernel<int64_t>);
  for (DType dt : kFloat) KernelRegistry::global().add("LeakyRelu", DeviceType::CPU, dt, kernels::leaky_relu_kernel<CpuLaunch>);
  for (DType dt : kFloat) KernelRegistry::global().add("Gelu", DeviceType::CPU, dt, kernels::gelu_kernel<CpuLaunch>);

  register_templated<SelectK>("Select", {F32, F64, I32, I64});
  register_templated<AddNK>("AddN", {F32, F64, I32, I64});
  register_templated<SumToLikeK>("SumToLike", {F32, F64, I32, I64});
  register_templated<BroadcastLikeK>("BroadcastLike", {F32, F64, I32, I64});
  for (DType dt : {F32, F64, I32, I64, B, DType::F16, DType::BF16})
    KernelRegistry::global().add("Cast", DeviceType::CPU, dt, cast_kernel);
}

}  // namespace spire::cpu

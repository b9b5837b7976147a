// CUDA kernels for the elementwise ops: every entry of the shared table
// (kernels/elementwise_table.h), integer Div, LeakyRelu, Gelu (exact or tanh), Cast, Select, AddN,
// BroadcastTo and BroadcastLike, for the same dtypes as the CPU kernels
// (kernels/cpu/elementwise.cc, BroadcastTo in kernels/cpu/array_kernels.cc).
// The math is the shared functors of kernels/functors.h; the index math is
// kernels/broadcast_index.h (tested on the host by
// tests/kernels/elementwise_index_test.cc).
//
// One launcher serves every op with inputs broadcast to an output:
//  - flat path, when every input has the output's layout or one element
//    (same-shape operands, scalar broadcast): a grid-stride loop over
//    16-byte vectors (AlignedVector) when every non-scalar pointer is
//    aligned, then a scalar grid-stride tail for the last n % width
//    elements (all elements when a pointer is not aligned);
//  - strided path otherwise: per-input offsets from the output index with
//    coalesced dims and strides (rank <= 8 after coalescing), 32-bit index
//    math when the output has fewer than 2^32 elements.
// All launches go on the device context's stream, grids from blocks_for.
// Shape checks and the table registrar are shared with the CPU kernels
// (kernels/elementwise_attrs.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/kernel_registry.h"
#include "kernels/broadcast_index.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/array_attrs.h"
#include "kernels/elementwise_attrs.h"
#include "kernels/elementwise_table.h"
#include "kernels/functors.h"

namespace spire::cuda {
namespace {

using kernels::broadcast_or_fail;
using kernels::BroadcastIndex;
using kernels::FlatRead;

// ---- device building blocks --------------------------------------------------

/// W elements of T loaded or stored as one aligned access (16 bytes for the
/// widest operand of a kernel).
template <typename T, int W>
struct alignas(sizeof(T) * W) AlignedVector {
  T val[W];
};

/// An input of the flat path: element i is ptr[i], or ptr[0] when scalar.
template <typename T>
struct FlatIn {
  const T* ptr;
  bool scalar;
};

template <int W, typename T>
__device__ __forceinline__ AlignedVector<T, W> load_vector(const FlatIn<T>& in, int64_t v) {
  AlignedVector<T, W> r;
  if (in.scalar) {
    const T s = in.ptr[0];
#pragma unroll
    for (int j = 0; j < W; ++j) r.val[j] = s;
  } else {
    r = reinterpret_cast<const AlignedVector<T, W>*>(in.ptr)[v];
  }
  return r;
}

template <int W, typename R, typename F, typename... V>
__device__ __forceinline__ void apply_vector(const F& f, AlignedVector<R, W>& out, const V&... in) {
#pragma unroll
  for (int j = 0; j < W; ++j) out.val[j] = f(in.val[j]...);
}

/// out[i] = f(in...[i]) for i < n: vectors [0, nvec) of W elements, then
/// the scalar tail [nvec * W, n).
/// `out` may be one of the inputs (KernelContext::forward_input_or_allocate_output): each
/// thread reads its elements before writing them, and no pointer is __restrict__.
template <int W, typename R, typename F, typename... T>
__global__ void flat_kernel(int64_t n, int64_t nvec, F f, R* out, FlatIn<T>... in) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = start; v < nvec; v += stride) {
    AlignedVector<R, W> o;
    apply_vector<W>(f, o, load_vector<W>(in, v)...);
    reinterpret_cast<AlignedVector<R, W>*>(out)[v] = o;
  }
  for (int64_t i = nvec * W + start; i < n; i += stride) out[i] = f(in.ptr[in.scalar ? 0 : i]...);
}

template <typename R, typename F, typename I, size_t... K, typename... T>
__device__ __forceinline__ R apply_at(const F& f, const I* off, std::index_sequence<K...>,
                                      const T*... in) {
  return f(in[off[K]]...);
}

/// out[i] = f(in...[offsets of i]) with the strided broadcast offsets.
template <typename I, typename R, typename F, typename... T>
__global__ void strided_kernel(BroadcastIndex<sizeof...(T), I> bi, int64_t n, F f,
                               R* out, const T*... in) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    I off[sizeof...(T)];
    kernels::broadcast_offsets(bi, static_cast<I>(i), off);
    out[i] = apply_at<R>(f, off, std::index_sequence_for<T...>{}, in...);
  }
}

// ---- the launcher ------------------------------------------------------------------

/// A typed input of an elementwise launch.
template <typename T>
struct Operand {
  const T* ptr;
  const Shape& shape;
};
template <typename T>
Operand<T> operand(const Tensor& t) {
  return {t.data<T>(), t.shape()};
}
/// The 16-bit storage of an f16 / bf16 tensor.
Operand<uint16_t> half_operand(const Tensor& t) {
  return {static_cast<const uint16_t*>(t.raw_data()), t.shape()};
}

template <typename I, typename R, typename F, typename... T>
void launch_strided(KernelContext& ctx, CudaContext& cc, const Shape& out_shape, int64_t n, R* out,
                    const F& f, const Operand<T>&... in) {
  constexpr int N = sizeof...(T);
  BroadcastIndex<N, I> bi;
  if (!kernels::make_broadcast_index<N, I>(out_shape, std::array<Shape, N>{in.shape...}, &bi))
    ctx.fail("the CUDA kernel supports at most ", kernels::kMaxBroadcastRank,
             " dimensions after merging; output shape ", out_shape.to_string());
  strided_kernel<I, R, F, T...><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(bi, n, f, out,
                                                                                  in.ptr...);
  SPIRE_CUDA_LAUNCH_CHECK();
}

/// The flat path of launch_elementwise: every input has n elements or one.
template <typename R, typename F, typename... T>
void launch_flat(CudaContext& cc, int64_t n, R* out, const F& f, const Operand<T>&... in) {
  constexpr int W = kernels::vector_width(std::max({sizeof(R), sizeof(T)...}));
  auto is_scalar = [n](const Shape& s) {
    return kernels::flat_read(s.num_elements(), n) == FlatRead::kScalar;
  };
  const bool aligned =
      kernels::vector_aligned(out, sizeof(R), W) &&
      ((is_scalar(in.shape) || kernels::vector_aligned(in.ptr, sizeof(T), W)) && ...);
  const int64_t nvec = kernels::vector_body_count(n, W, aligned);
  flat_kernel<W, R, F, T...><<<blocks_for(cc, nvec > 0 ? nvec : n), kThreads, 0, cc.stream()>>>(
      n, nvec, f, out, FlatIn<T>{in.ptr, is_scalar(in.shape)}...);
  SPIRE_CUDA_LAUNCH_CHECK();
}

/// out[i] = f(in[i]) for a unary op whose output has the input's shape
/// (always the flat path).
template <typename R, typename F, typename T>
void launch_same_shape(KernelContext& ctx, R* out, const F& f, const Operand<T>& in) {
  const int64_t n = in.shape.num_elements();
  if (n <= 0) return;
  launch_flat(context(ctx), n, out, f, in);
}

/// out[i] = f(inputs broadcast to out_shape at i) on the kernel's stream.
/// `out` has out_shape's element count; every input broadcasts to out_shape.
template <typename R, typename F, typename... T>
void launch_elementwise(KernelContext& ctx, const Shape& out_shape, R* out, const F& f,
                        const Operand<T>&... in) {
  const int64_t n = out_shape.num_elements();
  if (n <= 0) return;
  CudaContext& cc = context(ctx);
  const bool flat =
      ((kernels::flat_read(in.shape.num_elements(), n) != FlatRead::kStrided) && ...);
  if (flat) {
    launch_flat(cc, n, out, f, in...);
    return;
  }
  if (n <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
    launch_strided<uint32_t>(ctx, cc, out_shape, n, out, f, in...);
  else
    launch_strided<uint64_t>(ctx, cc, out_shape, n, out, f, in...);
}

// ---- the shared table -----------------------------------------------------------

template <typename T, typename F>
void binary_op(KernelContext& ctx, const F& f) {
  using R = decltype(f(T{}, T{}));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const Shape out = broadcast_or_fail(ctx, x.shape(), y.shape());
  // In place when an input dies here: each thread reads its elements before writing them.
  Tensor& z = ctx.forward_input_or_allocate_output({0, 1}, 0, out);
  launch_elementwise(ctx, out, z.data<R>(), f, operand<T>(x), operand<T>(y));
}

template <typename T, typename F>
void unary_op(KernelContext& ctx, const F& f) {
  using R = decltype(f(T{}));
  const Tensor& x = ctx.input(0);
  Tensor& z = ctx.forward_input_or_allocate_output({0}, 0, x.shape());
  launch_same_shape(ctx, z.data<R>(), f, operand<T>(x));
}

// The table's kernels for CUDA (see kernels::TableRegistrar).
struct CudaLaunch {
  template <typename T, typename F>
  static void binary(KernelContext& ctx, const F& f) { binary_op<T>(ctx, f); }
  template <typename T, typename F>
  static void unary(KernelContext& ctx, const F& f) { unary_op<T>(ctx, f); }
};

// ---- ops registered per device -----------------------------------------------------

/// Integer division (functors::IntegerDiv). The CPU kernel rejects a zero
/// divisor; a GPU kernel cannot raise a data-dependent error, so (as
/// TensorFlow's GPU kernels leave it unspecified) this writes 0 for every
/// element whose divisor is 0.
template <typename T>
void integer_div_kernel(KernelContext& ctx) {
  binary_op<T>(ctx, functors::IntegerDiv{});
}

template <typename T>
void select_kernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const Shape out = kernels::select_shape(ctx);
  Tensor& z = ctx.forward_input_or_allocate_output({1, 2}, 0, out);
  launch_elementwise(ctx, out, z.data<T>(), functors::Select{}, operand<bool>(c), operand<T>(x),
                     operand<T>(y));
}

bool is_half(DType dt) { return dt == DType::F16 || dt == DType::BF16; }

// Casts from or to f16 / bf16 (16-bit storage, through f32; the
// conversions of kernels/functors.h, as on the CPU).
void cast_half_kernel(KernelContext& ctx, const Tensor& x, Tensor& y) {
  uint16_t* hy = static_cast<uint16_t*>(y.raw_data());
  if (is_half(x.dtype()) && is_half(y.dtype())) {
    launch_same_shape(ctx, hy, functors::HalfToHalf{x.dtype() == DType::BF16, y.dtype() == DType::BF16},
                      half_operand(x));
  } else if (is_half(x.dtype())) {
    visit_dtype(y.dtype(), "Cast", [&](auto to) {
      using To = decltype(to);
      launch_same_shape(ctx, y.data<To>(), functors::FromHalf<To>{x.dtype() == DType::BF16}, half_operand(x));
    });
  } else {
    visit_dtype(x.dtype(), "Cast", [&](auto from) {
      using From = decltype(from);
      launch_same_shape(ctx, hy, functors::ToHalf{y.dtype() == DType::BF16}, operand<From>(x));
    });
  }
}

/// Cast between any two of f32, f64, i32, i64, bool, f16 and bf16
/// (static_cast, as on the CPU; f16/bf16 through f32, rounding to nearest
/// even). Float-to-integer casts of NaN or out-of-range values are
/// undefined in C++; on the GPU they saturate (NaN gives 0).
void cast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  if (is_half(x.dtype()) || is_half(y.dtype())) return cast_half_kernel(ctx, x, y);
  visit_dtype(x.dtype(), "Cast", [&](auto from) {
    using From = decltype(from);
    visit_dtype(y.dtype(), "Cast", [&](auto to) {
      using To = decltype(to);
      launch_same_shape(ctx, y.data<To>(), functors::CastTo<To>{}, operand<From>(x));
    });
  });
}

// AddN: up to kAddNMaxInputs inputs per launch, summed in input order (as
// the CPU kernel: out = x0 + x1 + ..., left to right, so f32 results are
// bit-identical); further launches add the next inputs to the output.
constexpr int kAddNMaxInputs = 8;

template <typename T>
struct AddNArgs {
  const T* in[kAddNMaxInputs];
  int count;        // inputs used, 1..kAddNMaxInputs
  bool accumulate;  // add to the current output instead of starting from in[0]
};

template <int W, typename T>
__device__ __forceinline__ AlignedVector<T, W> load_aligned(const T* p, int64_t v) {
  return reinterpret_cast<const AlignedVector<T, W>*>(p)[v];
}

template <int W, typename T>
__global__ void add_n_kernel(int64_t n, int64_t nvec, AddNArgs<T> args, T* __restrict__ out) {
  const functors::Add add;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int first = args.accumulate ? 0 : 1;
  for (int64_t v = start; v < nvec; v += stride) {
    AlignedVector<T, W> acc = load_aligned<W>(args.accumulate ? out : args.in[0], v);
#pragma unroll
    for (int k = 0; k < kAddNMaxInputs; ++k) {
      if (k < first || k >= args.count) continue;
      const AlignedVector<T, W> x = load_aligned<W>(args.in[k], v);
#pragma unroll
      for (int j = 0; j < W; ++j) acc.val[j] = add(acc.val[j], x.val[j]);
    }
    reinterpret_cast<AlignedVector<T, W>*>(out)[v] = acc;
  }
  for (int64_t i = nvec * W + start; i < n; i += stride) {
    T acc = args.accumulate ? out[i] : args.in[0][i];
#pragma unroll
    for (int k = 0; k < kAddNMaxInputs; ++k) {
      if (k < first || k >= args.count) continue;
      acc = add(acc, args.in[k][i]);
    }
    out[i] = acc;
  }
}

template <typename T>
void add_n_op(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  kernels::check_same_shapes(ctx);
  Tensor& z = ctx.allocate_output(0, x0.shape());
  const int64_t n = z.num_elements();
  if (n == 0) return;
  CudaContext& cc = context(ctx);
  constexpr int W = kernels::vector_width(sizeof(T));
  T* out = z.data<T>();
  bool aligned = kernels::vector_aligned(out, sizeof(T), W);
  for (int i = 0; i < ctx.num_inputs(); ++i)
    aligned = aligned && kernels::vector_aligned(ctx.input(i).data<T>(), sizeof(T), W);
  const int64_t nvec = kernels::vector_body_count(n, W, aligned);
  for (int begin = 0; begin < ctx.num_inputs(); begin += kAddNMaxInputs) {
    AddNArgs<T> args{};
    args.count = std::min(kAddNMaxInputs, ctx.num_inputs() - begin);
    args.accumulate = begin > 0;
    for (int k = 0; k < args.count; ++k) args.in[k] = ctx.input(begin + k).data<T>();
    add_n_kernel<W, T><<<blocks_for(cc, nvec > 0 ? nvec : n), kThreads, 0, cc.stream()>>>(
        n, nvec, args, out);
    SPIRE_CUDA_LAUNCH_CHECK();
  }
}

// BroadcastTo / BroadcastLike: checks x against target (forwarding x when it
// has that shape), else a copy through the broadcast launcher, by element
// size (the values are only moved).
struct CopyValue {
  template <typename T>
  SPIRE_HD T operator()(T a) const { return a; }
};

void broadcast_copy(KernelContext& ctx, const Tensor& x, const Shape& target) {
  Tensor* out = kernels::broadcast_output(ctx, target);
  if (!out) return;  // x forwarded: it has the target shape
  Tensor& y = *out;
  auto run = [&](auto elem) {
    using E = decltype(elem);
    launch_elementwise(ctx, target, static_cast<E*>(y.raw_data()), CopyValue{},
                       Operand<E>{static_cast<const E*>(x.raw_data()), x.shape()});
  };
  switch (dtype_size(x.dtype())) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
    default: ctx.fail("unsupported dtype ", dtype_name(x.dtype()));
  }
}

void broadcast_to_kernel(KernelContext& ctx) {
  const Shape target = ctx.attr<Shape>("shape");
  broadcast_copy(ctx, ctx.input(0), target);
}

void broadcast_like_kernel(KernelContext& ctx) {
  const Shape& target = ctx.input(1).shape();  // only the shape of `like` is used
  broadcast_copy(ctx, ctx.input(0), target);
}
template <typename T> struct SelectK { static void run(KernelContext& c) { select_kernel<T>(c); } };
template <typename T> struct AddNK { static void run(KernelContext& c) { add_n_op<T>(c); } };

}  // namespace

SPIRE_STATIC_INIT(cuda_elementwise_kernels) {
  kernels::visit_elementwise_table(kernels::TableRegistrar<CudaLaunch>{DeviceType::CUDA});
  auto& r = KernelRegistry::global();
  r.add("Div", DeviceType::CUDA, DType::I32, integer_div_kernel<int32_t>);
  r.add("Div", DeviceType::CUDA, DType::I64, integer_div_kernel<int64_t>);
  for (DType dt : {DType::F32, DType::F64}) r.add("LeakyRelu", DeviceType::CUDA, dt, kernels::leaky_relu_kernel<CudaLaunch>);
  for (DType dt : {DType::F32, DType::F64}) r.add("Gelu", DeviceType::CUDA, dt, kernels::gelu_kernel<CudaLaunch>);
  kernels::register_numeric<SelectK>("Select", DeviceType::CUDA);
  kernels::register_numeric<AddNK>("AddN", DeviceType::CUDA);
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64})
    r.add("BroadcastLike", DeviceType::CUDA, dt, broadcast_like_kernel);
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool}) {
    r.add("Cast", DeviceType::CUDA, dt, cast_kernel);
    r.add("BroadcastTo", DeviceType::CUDA, dt, broadcast_to_kernel);
  }
  for (DType dt : {DType::F16, DType::BF16}) r.add("Cast", DeviceType::CUDA, dt, cast_kernel);
}

}  // namespace spire::cuda

// CUDA kernels for Softmax, LogSoftmax, SparseSoftmaxCrossEntropyWithLogits and InTopK
// (ops in core/ops/nn_ops.cc), f32 and f64, with the semantics of the CPU
// kernels (kernels/cpu/softmax_kernels.cc).
//
// The input is seen as [outer, len, inner] around the softmax axis. Each row
// keeps an online softmax state (kernels/reduce_index.h): a running maximum
// m and a running sum s of exp(x - m), rescaled when m grows, so the
// denominator takes one pass over the row; a second pass writes the outputs.
//   - last axis (inner == 1): one warp per row for rows up to 1024 elements
//     (states merged with a __shfl_xor_sync butterfly, so every lane holds
//     the row's state), else one 256-thread block per row (warp butterflies,
//     then a shared-memory step across warps);
//   - other axes: one thread per (outer, inner) position walking the axis
//     with stride inner (neighbouring threads read neighbouring addresses).
// SparseSoftmaxCrossEntropyWithLogits takes one pass per row: the loss is
// log(s) - (x[label] - m). A label outside [0, classes) cannot raise an
// error from the GPU: as TensorFlow's GPU kernel, that row's loss is NaN
// (the CPU kernel raises an error). InTopK runs one thread per row over the
// row test the CPU kernel uses (kernels/top_k.h). The axis and input checks
// are shared with the CPU kernels (kernels/reduce_attrs.h).
#include <cstdint>
#include <type_traits>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/reduce_attrs.h"
#include "kernels/reduce_index.h"
#include "kernels/top_k.h"

namespace spire::cuda {
namespace {

using kernels::SoftmaxState;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowThreads = 256;
// Rows up to this length take one warp per row; longer ones a block.
constexpr int64_t kWarpRowMax = 1024;

// Merges the states of all lanes of a warp; every lane gets the result.
template <typename T>
__device__ SoftmaxState<T> warp_allreduce(SoftmaxState<T> st) {
  for (int d = 16; d > 0; d >>= 1) {
    SoftmaxState<T> o;
    o.m = __shfl_xor_sync(kFullMask, st.m, d);
    o.s = __shfl_xor_sync(kFullMask, st.s, d);
    st = kernels::softmax_merge(st, o);
  }
  return st;
}

// Merges the states of a whole block (every thread calls it); every thread
// gets the result. smem holds 33 states and may be reused after the call.
template <typename T>
__device__ SoftmaxState<T> block_allreduce(SoftmaxState<T> st, SoftmaxState<T>* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  st = warp_allreduce(st);
  if (lane == 0) smem[warp] = st;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = static_cast<int>(blockDim.x >> 5);
    st = lane < nwarps ? smem[lane] : kernels::softmax_identity<T>();
    st = warp_allreduce(st);
    if (lane == 0) smem[32] = st;
  }
  __syncthreads();
  st = smem[32];
  __syncthreads();
  return st;
}

// The softmax state of row xs[0, len) merged across the calling warp (every
// lane gets it).
template <typename T>
__device__ SoftmaxState<T> warp_row_state(const T* xs, int64_t len, int lane) {
  SoftmaxState<T> st = kernels::softmax_identity<T>();
  for (int64_t j = lane; j < len; j += 32) kernels::softmax_add(st, xs[j]);
  return warp_allreduce(st);
}

// The softmax state of row xs[0, len) merged across the calling block (every
// thread gets it); smem as for block_allreduce.
template <typename T>
__device__ SoftmaxState<T> block_row_state(const T* xs, int64_t len, SoftmaxState<T>* smem) {
  SoftmaxState<T> st = kernels::softmax_identity<T>();
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) kernels::softmax_add(st, xs[j]);
  return block_allreduce(st, smem);
}

// Rows grid-strided over warps: the calling warp's first row, and the step
// to its next one.
__device__ inline int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
__device__ inline int64_t warp_row_step() {
  return static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
}

// Blocks for the one-block-per-row kernels: one per row, at most 32 per SM
// (the blocks loop over the rows).
int row_blocks(CudaContext& cc, int64_t rows) {
  return static_cast<int>(
      std::min<int64_t>(rows, static_cast<int64_t>(std::max(cc.sm_count(), 1)) * 32));
}

// Writes one row (stride 1) or one strided column of outputs from its
// finished state.
template <typename T, bool kLog>
__device__ void write_outputs(const T* xs, T* ys, int64_t begin, int64_t end, int64_t step,
                              int64_t stride, SoftmaxState<T> st) {
  using std::log;
  st = kernels::softmax_finish(st);
  if constexpr (kLog) {
    const T log_sum = log(st.s);
    for (int64_t j = begin; j < end; j += step)
      ys[j * stride] = kernels::log_softmax_value(xs[j * stride], st.m, log_sum);
  } else {
    const T inv = T(1) / st.s;
    for (int64_t j = begin; j < end; j += step)
      ys[j * stride] = kernels::softmax_value(xs[j * stride], st.m, inv);
  }
}

template <typename T, bool kLog>
__global__ void softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                    int64_t len) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_step()) {
    const T* xs = x + row * len;
    const SoftmaxState<T> st = warp_row_state(xs, len, lane);
    write_outputs<T, kLog>(xs, y + row * len, lane, len, 32, 1, st);
  }
}

template <typename T, bool kLog>
__global__ void __launch_bounds__(kRowThreads)
    softmax_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t len) {
  __shared__ SoftmaxState<T> smem[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xs = x + row * len;
    const SoftmaxState<T> st = block_row_state(xs, len, smem);
    write_outputs<T, kLog>(xs, y + row * len, threadIdx.x, len, blockDim.x, 1, st);
  }
}

// Softmax along a non-last axis: thread t handles outer index t / inner and
// inner index t % inner.
template <typename T, bool kLog>
__global__ void softmax_column_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                                      int64_t len, int64_t inner) {
  SPIRE_GRID_STRIDE_LOOP(t, outer * inner) {
    const int64_t q = t / inner, i = t % inner;
    const int64_t base = q * len * inner + i;
    const T* xs = x + base;
    SoftmaxState<T> st = kernels::softmax_identity<T>();
    for (int64_t j = 0; j < len; ++j) kernels::softmax_add(st, xs[j * inner]);
    write_outputs<T, kLog>(xs, y + base, 0, len, 1, inner, st);
  }
}

template <typename T, bool kLog>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& s = x.shape();
  const kernels::ReduceBlock b = kernels::softmax_axis_block(ctx, s);
  const int64_t outer = b.outer, len = b.len, inner = b.inner;
  Tensor& y = ctx.allocate_output(0, s);
  if (y.num_elements() == 0) return;
  auto& cc = context(ctx);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  if (inner == 1 && len <= kWarpRowMax) {
    softmax_warp_kernel<T, kLog><<<blocks_for(cc, outer * 32, kRowThreads), kRowThreads, 0,
                                   cc.stream()>>>(px, py, outer, len);
  } else if (inner == 1) {
    softmax_block_kernel<T, kLog><<<row_blocks(cc, outer), kRowThreads, 0, cc.stream()>>>(px, py, outer, len);
  } else {
    softmax_column_kernel<T, kLog><<<blocks_for(cc, outer * inner), kThreads, 0, cc.stream()>>>(
        px, py, outer, len, inner);
  }
  SPIRE_CUDA_LAUNCH_CHECK();
}

// ---- sparse softmax cross-entropy ------------------------------------------

template <typename T, typename L>
__global__ void xent_warp_kernel(const T* __restrict__ logits, const L* __restrict__ labels,
                                 T* __restrict__ loss, int64_t rows, int64_t classes) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_step()) {
    const T* xs = logits + row * classes;
    const SoftmaxState<T> st = warp_row_state(xs, classes, lane);
    if (lane == 0)
      loss[row] = kernels::sparse_xent_loss(kernels::softmax_finish(st), xs,
                                            static_cast<int64_t>(labels[row]), classes);
  }
}

template <typename T, typename L>
__global__ void __launch_bounds__(kRowThreads)
    xent_block_kernel(const T* __restrict__ logits, const L* __restrict__ labels,
                      T* __restrict__ loss, int64_t rows, int64_t classes) {
  __shared__ SoftmaxState<T> smem[33];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xs = logits + row * classes;
    const SoftmaxState<T> st = block_row_state(xs, classes, smem);
    if (threadIdx.x == 0)
      loss[row] = kernels::sparse_xent_loss(kernels::softmax_finish(st), xs,
                                            static_cast<int64_t>(labels[row]), classes);
  }
}

template <typename T, typename L>
void sparse_xent(KernelContext& ctx, const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  Tensor& loss = ctx.allocate_output(0, Shape{n});
  if (n == 0) return;
  auto& cc = context(ctx);
  const T* px = logits.data<T>();
  const L* pl = labels.data<L>();
  T* out = loss.data<T>();
  if (classes <= kWarpRowMax) {
    xent_warp_kernel<T, L><<<blocks_for(cc, n * 32, kRowThreads), kRowThreads, 0, cc.stream()>>>(
        px, pl, out, n, classes);
  } else {
    xent_block_kernel<T, L><<<row_blocks(cc, n), kRowThreads, 0, cc.stream()>>>(px, pl, out, n, classes);
  }
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T>
void sparse_xent_kernel(KernelContext& ctx) {
  kernels::with_sparse_xent_labels(ctx, [&](auto label) {
    sparse_xent<T, decltype(label)>(ctx, ctx.input(0), ctx.input(1));
  });
}

// ---- in_top_k ----------------------------------------------------------------

template <typename T, typename L>
__global__ void in_top_k_kernel(const T* __restrict__ predictions, const L* __restrict__ targets,
                                bool* __restrict__ out, int64_t rows, int64_t classes, int64_t k) {
  for (int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; row < rows;
       row += int64_t{gridDim.x} * blockDim.x)
    out[row] = kernels::in_top_k_row(predictions + row * classes, classes,
                                     static_cast<int64_t>(targets[row]), k);
}

template <typename T>
void in_top_k(KernelContext& ctx) {
  kernels::with_sparse_xent_labels(ctx, [&](auto target) {
    using L = decltype(target);
    const Tensor& predictions = ctx.input(0);
    const int64_t n = predictions.dim(0), classes = predictions.dim(1);
    Tensor& out = ctx.allocate_output(0, Shape{n});
    if (n == 0) return;
    auto& cc = context(ctx);
    in_top_k_kernel<T, L><<<blocks_for(cc, n, kRowThreads), kRowThreads, 0, cc.stream()>>>(
        predictions.data<T>(), ctx.input(1).data<L>(), out.data<bool>(), n, classes,
        ctx.attr<int64_t>("k"));
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

SPIRE_STATIC_INIT(cuda_softmax_kernels) {
  auto& reg = KernelRegistry::global();
  reg.add("Softmax", DeviceType::CUDA, DType::F32, softmax_kernel<float, false>);
  reg.add("Softmax", DeviceType::CUDA, DType::F64, softmax_kernel<double, false>);
  reg.add("LogSoftmax", DeviceType::CUDA, DType::F32, softmax_kernel<float, true>);
  reg.add("LogSoftmax", DeviceType::CUDA, DType::F64, softmax_kernel<double, true>);
  reg.add("SparseSoftmaxCrossEntropyWithLogits", DeviceType::CUDA, DType::F32,
          sparse_xent_kernel<float>);
  reg.add("SparseSoftmaxCrossEntropyWithLogits", DeviceType::CUDA, DType::F64,
          sparse_xent_kernel<double>);
  reg.add("InTopK", DeviceType::CUDA, DType::F32, in_top_k<float>);
  reg.add("InTopK", DeviceType::CUDA, DType::F64, in_top_k<double>);
}

}  // namespace spire::cuda

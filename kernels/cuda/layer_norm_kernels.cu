// CUDA kernels for LayerNorm and LayerNormGrad (ops in core/ops/norm_ops.cc),
// f32 and f64, with the semantics of the CPU kernels
// (kernels/cpu/layer_norm_kernels.cc) and the same per-element math
// (kernels/layer_norm.h). x is seen as [rows, C] (kernels/layer_norm_attrs.h).
//   - LayerNorm: one warp per row (rows grid-strided over warps). The lanes
//     sum the row (stride 32), a __shfl_xor_sync butterfly gives every lane
//     the sum; the same again for the centered squares (two passes, as
//     llm.c's CPU code); lane 0 stores mean and rstd; the lanes write y.
//   - LayerNormGrad, dx: one warp per row, the two row sums (dnorm and
//     dnorm * norm) reduced by butterflies, then dx written.
//   - LayerNormGrad, dgamma and dbeta: deterministic column sums without
//     atomics. The rows are cut into the blocks of
//     kernels::layer_norm_grad_block_rows (a function of the row count, as on
//     the CPU); one thread per (column, block) sums its block's rows in order
//     into scratch partials (neighbouring threads read neighbouring columns),
//     then one thread per column adds the blocks' partials in block order.
// Row sums accumulate in T (f32 for f32, as llm.c's CUDA kernels): the warp
// butterfly is a pairwise sum, so f32 stays within the parity tolerance of
// the CPU's double accumulation.
#include <algorithm>
#include <cstdint>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_attrs.h"

namespace spire::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowThreads = 256;

template <typename T>
__device__ T warp_sum(T v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

// Rows grid-strided over warps: the calling warp's first row, and the step.
__device__ inline int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
__device__ inline int64_t warp_row_step() {
  return static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                              const T* __restrict__ beta, T* __restrict__ y, T* __restrict__ mean,
                              T* __restrict__ rstd, int64_t rows, int64_t c, double eps) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_step()) {
    const T* xs = x + row * c;
    T sum = 0;
    for (int64_t j = lane; j < c; j += 32) sum += xs[j];
    const T m = warp_sum(sum) / static_cast<T>(c);
    T sq = 0;
    for (int64_t j = lane; j < c; j += 32) {
      const T v = xs[j] - m;
      sq += v * v;
    }
    const T rs = kernels::layer_norm_rstd(warp_sum(sq), c, eps);
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = rs;
    }
    T* ys = y + row * c;
    for (int64_t j = lane; j < c; j += 32)
      ys[j] = kernels::layer_norm_value(xs[j], m, rs, gamma[j], beta ? beta[j] : T(0));
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                         const T* __restrict__ gamma, const T* __restrict__ mean,
                         const T* __restrict__ rstd, T* __restrict__ dx, int64_t rows, int64_t c) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_step()) {
    const T* xs = x + row * c;
    const T* dys = dy + row * c;
    const T m = mean[row], rs = rstd[row];
    kernels::LayerNormGradSums<T> s;
    for (int64_t j = lane; j < c; j += 32) s.add(xs[j], dys[j], gamma[j], m, rs);
    const T mean_dnorm = warp_sum(s.dnorm) / static_cast<T>(c);
    const T mean_dnorm_norm = warp_sum(s.dnorm_norm) / static_cast<T>(c);
    T* dxs = dx + row * c;
    for (int64_t j = lane; j < c; j += 32)
      dxs[j] = kernels::layer_norm_dx(xs[j], dys[j], gamma[j], m, rs, mean_dnorm, mean_dnorm_norm);
  }
}

// partial[(blk * 2 + 0) * c + j] = sum over the block's rows of norm * dy,
// partial[(blk * 2 + 1) * c + j] = sum of dy; blockIdx.y is the block.
template <typename T>
__global__ void layer_norm_column_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                  const T* __restrict__ mean,
                                                  const T* __restrict__ rstd, T* __restrict__ partial,
                                                  int64_t rows, int64_t c, int64_t block_rows) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t blk = blockIdx.y;
  const int64_t end = min(rows, (blk + 1) * block_rows);
  T sg = 0, sb = 0;
  for (int64_t r = blk * block_rows; r < end; ++r) {
    const T d = dy[r * c + j];
    sg += kernels::layer_norm_norm(x[r * c + j], mean[r], rstd[r]) * d;
    sb += d;
  }
  partial[(blk * 2) * c + j] = sg;
  partial[(blk * 2 + 1) * c + j] = sb;
}

template <typename T>
__global__ void layer_norm_column_finish_kernel(const T* __restrict__ partial,
                                                T* __restrict__ dgamma, T* __restrict__ dbeta,
                                                int64_t blocks, int64_t c) {
  SPIRE_GRID_STRIDE_LOOP(j, c) {
    T sg = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sg += partial[(blk * 2) * c + j];
      sb += partial[(blk * 2 + 1) * c + j];
    }
    dgamma[j] = sg;
    dbeta[j] = sb;
  }
}

template <typename T>
void layer_norm(KernelContext& ctx) {
  const kernels::LayerNormDims d = kernels::layer_norm_dims(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  Tensor& mean = ctx.allocate_output(1, d.stats_shape);
  Tensor& rstd = ctx.allocate_output(2, d.stats_shape);
  if (d.rows == 0) return;
  auto& cc = context(ctx);
  const T* beta = ctx.num_inputs() > 2 ? ctx.input(2).data<T>() : nullptr;
  layer_norm_forward_kernel<T><<<blocks_for(cc, d.rows * 32, kRowThreads), kRowThreads, 0,
                                 cc.stream()>>>(x.data<T>(), ctx.input(1).data<T>(), beta,
                                                y.data<T>(), mean.data<T>(), rstd.data<T>(),
                                                d.rows, d.c, ctx.attr<double>("epsilon"));
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T>
void layer_norm_grad(KernelContext& ctx) {
  const kernels::LayerNormDims d = kernels::layer_norm_grad_dims(ctx);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0, x.shape());
  Tensor& dgamma = ctx.allocate_output(1, Shape{d.c});
  Tensor& dbeta = ctx.allocate_output(2, Shape{d.c});
  auto& cc = context(ctx);
  const T* pdy = ctx.input(0).data<T>();
  const T* px = x.data<T>();
  const T* pm = ctx.input(3).data<T>();
  const T* pr = ctx.input(4).data<T>();
  if (d.rows == 0) {  // sums over no rows
    SPIRE_CUDA_CHECK(cudaMemsetAsync(dgamma.data<T>(), 0, sizeof(T) * d.c, cc.stream()));
    SPIRE_CUDA_CHECK(cudaMemsetAsync(dbeta.data<T>(), 0, sizeof(T) * d.c, cc.stream()));
    return;
  }
  layer_norm_dx_kernel<T><<<blocks_for(cc, d.rows * 32, kRowThreads), kRowThreads, 0,
                            cc.stream()>>>(pdy, px, ctx.input(2).data<T>(), pm, pr,
                                           dx.data<T>(), d.rows, d.c);
  SPIRE_CUDA_LAUNCH_CHECK();
  const int64_t block_rows = kernels::layer_norm_grad_block_rows(d.rows);
  const int64_t blocks = (d.rows + block_rows - 1) / block_rows;
  Scratch partial(cc, sizeof(T) * static_cast<size_t>(blocks * 2 * d.c));
  const dim3 grid(static_cast<unsigned>((d.c + kThreads - 1) / kThreads),
                  static_cast<unsigned>(blocks));
  layer_norm_column_partials_kernel<T><<<grid, kThreads, 0, cc.stream()>>>(
      pdy, px, pm, pr, partial.as<T>(), d.rows, d.c, block_rows);
  SPIRE_CUDA_LAUNCH_CHECK();
  layer_norm_column_finish_kernel<T><<<blocks_for(cc, d.c), kThreads, 0, cc.stream()>>>(
      partial.as<T>(), dgamma.data<T>(), dbeta.data<T>(), blocks, d.c);
  SPIRE_CUDA_LAUNCH_CHECK();
}

}  // namespace

SPIRE_STATIC_INIT(cuda_layer_norm_kernels) {
  auto& reg = KernelRegistry::global();
  reg.add("LayerNorm", DeviceType::CUDA, DType::F32, layer_norm<float>);
  reg.add("LayerNorm", DeviceType::CUDA, DType::F64, layer_norm<double>);
  reg.add("LayerNormGrad", DeviceType::CUDA, DType::F32, layer_norm_grad<float>);
  reg.add("LayerNormGrad", DeviceType::CUDA, DType::F64, layer_norm_grad<double>);
}

}  // namespace spire::cuda

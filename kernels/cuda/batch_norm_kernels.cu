// CUDA kernels of FusedBatchNorm and FusedBatchNormGrad (core/ops/batch_norm_ops.h),
// f32 and f64, with the arithmetic of the CPU kernels (kernels/batch_norm_math.h).
//
// The input is seen as [outer, C, inner] (kernels/batch_norm_attrs.h). Per-channel
// sums (in double) take two kernels and no atomics, so results are
// deterministic on a given device:
//   - partials: a 2-D grid of (32 x 8)-thread blocks; blockIdx.x picks 32
//     channels (one per lane: with channels last, a warp reads 32
//     contiguous channels of a row), blockIdx.y a share of the outer rows;
//     each thread strides over its rows (and every inner position), then
//     the 8 threads of a channel are added in shared memory in a fixed
//     order into partial[blockIdx.y][k][c];
//   - finish: one thread per channel adds its partials in order and writes
//     the per-channel statistics or coefficients.
// The forward runs partials/finish twice (mean, then squared deviations)
// and one elementwise kernel for y; the backward once (S(dy) and
// S(dy * (x - mean)) together) and one elementwise kernel for dx.
#include <algorithm>
#include <cstdint>

#include "core/kernel_registry.h"
#include "kernels/batch_norm_attrs.h"
#include "kernels/batch_norm_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"

namespace spire::cuda {
namespace {

using kernels::BatchNormView;

constexpr int kLanes = 32;  // channels per block
constexpr int kRows = 8;    // row threads per channel

// The terms summed per channel (as the CPU kernel's): K values per element.
template <typename T>
struct SumX {
  static constexpr int K = 1;
  const T* x;
  __device__ void add(int64_t, int64_t e, double* acc) const { acc[0] += static_cast<double>(x[e]); }
};

template <typename T>
struct SumSquaredDeviation {
  static constexpr int K = 1;
  const T* x;
  const double* mean;
  __device__ void add(int64_t c, int64_t e, double* acc) const {
    const double d = static_cast<double>(x[e]) - mean[c];
    acc[0] += d * d;
  }
};

template <typename T>
struct SumDyAndDyX {
  static constexpr int K = 2;
  const T* dy;
  const T* x;
  const T* mean;
  __device__ void add(int64_t c, int64_t e, double* acc) const {
    const double g = static_cast<double>(dy[e]);
    acc[0] += g;
    acc[1] += g * (static_cast<double>(x[e]) - static_cast<double>(mean[c]));
  }
};

// partial[(blockIdx.y * K + k) * C + c] = the block's share of term k's sum.
template <typename Term>
__global__ void channel_partials_kernel(Term term, BatchNormView v, double* partial) {
  constexpr int K = Term::K;
  __shared__ double smem[K][kRows][kLanes];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x;
  double acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0;
  if (c < v.channels) {
    const int64_t step = static_cast<int64_t>(gridDim.y) * kRows;
    for (int64_t o = static_cast<int64_t>(blockIdx.y) * kRows + threadIdx.y; o < v.outer; o += step) {
      const int64_t base = (o * v.channels + c) * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) term.add(c, base + i, acc);
    }
  }
  for (int k = 0; k < K; ++k) smem[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < v.channels) {
    for (int k = 0; k < K; ++k) {
      double s = 0;
      for (int r = 0; r < kRows; ++r) s += smem[k][r][threadIdx.x];
      partial[(static_cast<int64_t>(blockIdx.y) * K + k) * v.channels + c] = s;
    }
  }
}

// Sums the partials of each channel in order: sums[k * C + c].
__global__ void channel_finish_kernel(const double* partial, int blocks, int K, int64_t C, double* sums) {
  SPIRE_GRID_STRIDE_LOOP(c, C) {
    for (int k = 0; k < K; ++k) {
      double s = 0;
      for (int b = 0; b < blocks; ++b) s += partial[(static_cast<int64_t>(b) * K + k) * C + c];
      sums[k * C + c] = s;
    }
  }
}

// sums[k * C + c] for the view, via the two kernels above.
template <typename Term>
void channel_sums(CudaContext& cc, const Term& term, const BatchNormView& v, double* sums) {
  const int64_t channel_blocks = (v.channels + kLanes - 1) / kLanes;
  const int64_t want = std::max<int64_t>(1, (v.outer + kRows * 16 - 1) / (kRows * 16));
  const int64_t fill = std::max<int64_t>(1, std::max(cc.sm_count(), 1) * 4 / channel_blocks);
  const int row_blocks = static_cast<int>(std::min<int64_t>({want, fill, 65535}));
  Scratch partial(cc, sizeof(double) * static_cast<size_t>(row_blocks * Term::K * v.channels));
  channel_partials_kernel<<<dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(row_blocks)),
                            dim3(kLanes, kRows), 0, cc.stream()>>>(term, v, partial.as<double>());
  SPIRE_CUDA_LAUNCH_CHECK();
  channel_finish_kernel<<<blocks_for(cc, v.channels), kThreads, 0, cc.stream()>>>(
      partial.as<double>(), row_blocks, Term::K, v.channels, sums);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// mean[c] = sums[c] / n in place (double), and the T copy.
template <typename T>
__global__ void mean_kernel(double* sums, int64_t C, double n, T* mean_out) {
  SPIRE_GRID_STRIDE_LOOP(c, C) {
    sums[c] /= n;
    mean_out[c] = static_cast<T>(sums[c]);
  }
}

// var = sq / n; scale = gamma / sqrt(var + eps).
template <typename T>
__global__ void forward_coef_kernel(const double* sq, const T* gamma, int64_t C, double n, double eps,
                                    T* var_out, T* scale) {
  SPIRE_GRID_STRIDE_LOOP(c, C) {
    const double var = sq[c] / n;
    var_out[c] = static_cast<T>(var);
    scale[c] = static_cast<T>(kernels::batch_norm_scale(var, static_cast<double>(gamma[c]), eps));
  }
}

template <typename T>
__global__ void forward_apply_kernel(const T* x, const T* mean, const T* scale, const T* beta,
                                     BatchNormView v, int64_t n, T* y) {
  SPIRE_GRID_STRIDE_LOOP(e, n) {
    const int64_t c = (e / v.inner) % v.channels;
    y[e] = kernels::batch_norm_y(x[e], mean[c], scale[c], beta[c]);
  }
}

// coef[c] = {a, b, c} of kernels::BatchNormBackwardCoef (as T); dgamma, dbeta.
template <typename T>
__global__ void backward_coef_kernel(const double* sums, const T* gamma, const T* mean, const T* var,
                                     int64_t C, double n, double eps, T* coef, T* dgamma, T* dbeta) {
  SPIRE_GRID_STRIDE_LOOP(c, C) {
    const double sdy = sums[c], sdyx = sums[C + c];
    const double vr = static_cast<double>(var[c]);
    const auto k = kernels::BatchNormBackwardCoef::make(static_cast<double>(mean[c]), vr,
                                                        static_cast<double>(gamma[c]), sdy, sdyx, n, eps);
    coef[3 * c] = static_cast<T>(k.a);
    coef[3 * c + 1] = static_cast<T>(k.b);
    coef[3 * c + 2] = static_cast<T>(k.c);
    dgamma[c] = static_cast<T>(kernels::BatchNormBackwardCoef::dgamma(vr, sdyx, eps));
    dbeta[c] = static_cast<T>(sdy);
  }
}

template <typename T>
__global__ void backward_apply_kernel(const T* dy, const T* x, const T* coef, const T* mean,
                                      BatchNormView v, int64_t n, T* dx) {
  SPIRE_GRID_STRIDE_LOOP(e, n) {
    const int64_t c = (e / v.inner) % v.channels;
    dx[e] = kernels::batch_norm_dx(dy[e], x[e], coef[3 * c], coef[3 * c + 1], coef[3 * c + 2], mean[c]);
  }
}

template <typename T>
void fused_batch_norm(KernelContext& ctx) {
  const BatchNormView v = kernels::batch_norm_view(ctx, 0, 1, 2);
  auto& cc = context(ctx);
  const Tensor& x = ctx.input(0);
  const int64_t C = v.channels, total = x.num_elements();
  if (v.per_channel() == 0) ctx.fail("x of shape ", x.shape().to_string(), " has no elements per channel");
  const double n = static_cast<double>(v.per_channel()), eps = ctx.attr<double>("epsilon");
  Tensor& y = ctx.allocate_output(0, x.shape());
  T* mean = ctx.allocate_output(1, Shape{C}).data<T>();
  T* var = ctx.allocate_output(2, Shape{C}).data<T>();
  if (C == 0) return;
  Scratch stats(cc, sizeof(double) * static_cast<size_t>(2 * C));
  Scratch scale(cc, sizeof(T) * static_cast<size_t>(C));
  double* mean_d = stats.as<double>();
  double* sq = mean_d + C;
  const T* px = x.data<T>();
  channel_sums(cc, SumX<T>{px}, v, mean_d);
  mean_kernel<<<blocks_for(cc, C), kThreads, 0, cc.stream()>>>(mean_d, C, n, mean);
  SPIRE_CUDA_LAUNCH_CHECK();
  channel_sums(cc, SumSquaredDeviation<T>{px, mean_d}, v, sq);
  forward_coef_kernel<<<blocks_for(cc, C), kThreads, 0, cc.stream()>>>(
      sq, ctx.input(1).data<T>(), C, n, eps, var, scale.as<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
  forward_apply_kernel<<<blocks_for(cc, total), kThreads, 0, cc.stream()>>>(
      px, mean, scale.as<T>(), ctx.input(2).data<T>(), v, total, y.data<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T>
void fused_batch_norm_grad(KernelContext& ctx) {
  const BatchNormView v = kernels::batch_norm_view(ctx, 1, 2, 3);
  auto& cc = context(ctx);
  const Tensor& x = ctx.input(1);
  const int64_t C = v.channels, total = x.num_elements();
  const double n = static_cast<double>(v.per_channel()), eps = ctx.attr<double>("epsilon");
  Tensor& dx = ctx.allocate_output(0, x.shape());
  T* dgamma = ctx.allocate_output(1, Shape{C}).data<T>();
  T* dbeta = ctx.allocate_output(2, Shape{C}).data<T>();
  if (C == 0) return;
  const T* dy = ctx.input(0).data<T>();
  const T* mean = ctx.input(3).data<T>();
  Scratch sums(cc, sizeof(double) * static_cast<size_t>(2 * C));
  Scratch coef(cc, sizeof(T) * static_cast<size_t>(3 * C));
  channel_sums(cc, SumDyAndDyX<T>{dy, x.data<T>(), mean}, v, sums.as<double>());
  backward_coef_kernel<<<blocks_for(cc, C), kThreads, 0, cc.stream()>>>(
      sums.as<double>(), ctx.input(2).data<T>(), mean, ctx.input(4).data<T>(), C, n, eps,
      coef.as<T>(), dgamma, dbeta);
  SPIRE_CUDA_LAUNCH_CHECK();
  if (total == 0) return;
  backward_apply_kernel<<<blocks_for(cc, total), kThreads, 0, cc.stream()>>>(
      dy, x.data<T>(), coef.as<T>(), mean, v, total, dx.data<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
}

}  // namespace

SPIRE_REGISTER_KERNEL("FusedBatchNorm", DeviceType::CUDA, fused_batch_norm<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedBatchNorm", DeviceType::CUDA, fused_batch_norm<double>, DType::F64);
SPIRE_REGISTER_KERNEL("FusedBatchNormGrad", DeviceType::CUDA, fused_batch_norm_grad<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedBatchNormGrad", DeviceType::CUDA, fused_batch_norm_grad<double>, DType::F64);

}  // namespace spire::cuda

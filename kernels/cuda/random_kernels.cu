// CUDA kernels for the random ops: RandomUniform, RandomNormal,
// TruncatedNormal and Dropout, in f32 and f64. They mirror the CPU kernels
// (kernels/cpu/random_kernels.cc): the same key (derive_key of the graph
// seed, op seed and node id), the same per-run stream offset from
// SessionState::advance_rng (both from kernels/random_setup.h, as the
// attr checks), and element i drawn from Philox counter
// offset + i with the shared functions of kernels/random.h. So a graph run
// on the CPU and on a GPU draws the same numbers: uniforms and dropout
// masks bit for bit, normals up to the rounding of the device's double
// log/sin/cos. One grid-stride loop per op, one element per iteration.
#include <cstdint>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/random.h"
#include "kernels/random_setup.h"

namespace spire::cuda {
namespace {

template <typename T>
__global__ void uniform_kernel(int64_t n, uint64_t key, uint64_t offset, T lo, T hi,
                               T* __restrict__ out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    out[i] = random::uniform_range<T>(random::philox_bits(key, offset + static_cast<uint64_t>(i)),
                                      lo, hi);
  }
}

template <typename T, bool kTruncated>
__global__ void normal_kernel(int64_t n, uint64_t key, uint64_t offset, double mean,
                              double stddev, T* __restrict__ out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    const uint64_t idx = offset + static_cast<uint64_t>(i);
    const double z = kTruncated ? random::truncated_standard_normal<T>(key, idx)
                                : random::standard_normal<T>(key, idx);
    // mean + stddev * z, rounded like the CPU's (no fused multiply-add).
    out[i] = static_cast<T>(__dadd_rn(mean, __dmul_rn(stddev, z)));
  }
}

template <typename T>
__global__ void dropout_kernel(int64_t n, uint64_t key, uint64_t offset, double rate, T scale,
                               const T* __restrict__ x, T* __restrict__ y, T* __restrict__ mask) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    const T m = random::dropout_keep(key, offset + static_cast<uint64_t>(i), rate) ? scale : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

template <typename T>
void random_uniform_op(KernelContext& ctx) {
  const random::UniformRange<T> range = random::uniform_range_attrs<T>(ctx);
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  if (n == 0) return;
  CudaContext& cc = context(ctx);
  uniform_kernel<T><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
      n, draw.key, draw.offset, range.lo, range.hi, out.data<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T, bool kTruncated>
void random_normal_op(KernelContext& ctx) {
  const double mean = ctx.attr<double>("mean");
  const double stddev = ctx.attr<double>("stddev");
  Tensor& out = ctx.allocate_output(0, ctx.node().output_shape(0));
  const int64_t n = out.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  if (n == 0) return;
  CudaContext& cc = context(ctx);
  normal_kernel<T, kTruncated><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
      n, draw.key, draw.offset, mean, stddev, out.data<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T>
void dropout_op(KernelContext& ctx) {
  const double rate = random::dropout_rate_attr(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  Tensor& mask = ctx.allocate_output(1, x.shape());
  const int64_t n = x.num_elements();
  const random::DrawSetup draw = random::draw_setup(ctx, n);
  if (n == 0) return;
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  CudaContext& cc = context(ctx);
  dropout_kernel<T><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
      n, draw.key, draw.offset, rate, scale, x.data<T>(), y.data<T>(), mask.data<T>());
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T>
random::RandomKernels kernels_for() {
  return {random_uniform_op<T>, random_normal_op<T, false>, random_normal_op<T, true>,
          dropout_op<T>};
}

}  // namespace

SPIRE_STATIC_INIT(cuda_random_kernels) {
  random::register_random_kernels(DeviceType::CUDA, kernels_for<float>(), kernels_for<double>());
}

}  // namespace spire::cuda

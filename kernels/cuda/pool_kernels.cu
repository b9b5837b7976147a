// CUDA kernels for the NHWC pooling ops registered in core/ops/nn_ops.cc, f32 and f64 (the
// dtypes of the CPU kernels): MaxPool, MaxPoolGrad, MaxPoolGradGrad, AvgPool and AvgPoolGrad.
// The per-element window math lives in kernels/pool_index.h (shared with the host test
// tests/kernels/pool_index_test.cc); each kernel here is a grid-stride loop over its output
// with one thread per element, so consecutive threads handle consecutive channels of a pixel
// and their loads are coalesced (NHWC).
//  - MaxPool, MaxPoolGradGrad, AvgPool: one thread per output element scans its window.
//  - MaxPoolGrad: a first kernel stores each window's first maximum (its spatial index, as
//    int32) in a scratch buffer; a second one has each input element gather dy from the
//    windows that cover it and pick it (no atomics, deterministic).
//    FusedMaxPoolGrad (made by the fusion pass, core/fusion.h) writes dx the same way, then
//    runs its epilogue program over it (kernels/cuda/fused_program.h).
//  - AvgPoolGrad: each input element gathers dy / count from the windows covering it.
#include <climits>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cuda/fused_program.h"
#include "kernels/cuda/launch.h"
#include "kernels/pool_geometry.h"
#include "kernels/pool_index.h"

namespace spire::cuda {
namespace {

using kernels::PoolGeometry;

using kernels::expect_pool_shape;
using kernels::pool_geometry;
using kernels::pool_in_shape;
using kernels::pool_out_shape;

template <typename T>
__global__ void max_pool_kernel(PoolGeometry g, int64_t n, const T* x, T* y) {
  SPIRE_GRID_STRIDE_LOOP(i, n) y[i] = kernels::max_pool_value(g, x, i);
}

template <typename T>
__global__ void max_pool_argmax_kernel(PoolGeometry g, int64_t n, const T* x, int32_t* arg) {
  SPIRE_GRID_STRIDE_LOOP(i, n) arg[i] = static_cast<int32_t>(kernels::max_pool_argmax(g, x, i));
}

template <typename T>
__global__ void max_pool_grad_kernel(PoolGeometry g, int64_t n, const int32_t* arg, const T* dy,
                                     T* dx) {
  SPIRE_GRID_STRIDE_LOOP(i, n) dx[i] = kernels::max_pool_grad_value(g, arg, dy, i);
}

template <typename T>
__global__ void max_pool_grad_grad_kernel(PoolGeometry g, int64_t n, const T* x, const T* gin,
                                          T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) out[i] = kernels::max_pool_grad_grad_value(g, x, gin, i);
}

template <typename T>
__global__ void avg_pool_kernel(PoolGeometry g, int64_t n, const T* x, T* y) {
  SPIRE_GRID_STRIDE_LOOP(i, n) y[i] = kernels::avg_pool_value(g, x, i);
}

template <typename T>
__global__ void avg_pool_grad_kernel(PoolGeometry g, int64_t n, const T* dy, T* dx) {
  SPIRE_GRID_STRIDE_LOOP(i, n) dx[i] = kernels::avg_pool_grad_value(g, dy, i);
}

// Runs kernel k(g, n, args...) over the n elements of `out` on ctx's device, one thread per
// element (nothing to do for an empty output).
template <typename Kernel, typename... Args>
void launch_over(KernelContext& ctx, const Tensor& out, Kernel k, const PoolGeometry& g,
                 Args... args) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  k<<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(g, n, args...);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// MaxPool / AvgPool: each output element from its window by kernel k.
template <typename T>
void pool_forward(KernelContext& ctx, void (*k)(PoolGeometry, int64_t, const T*, T*)) {
  const Tensor& x = ctx.input(0);
  PoolGeometry g = pool_geometry(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, pool_out_shape(g));
  launch_over(ctx, y, k, g, x.data<T>(), y.data<T>());
}

template <typename T>
void max_pool(KernelContext& ctx) {
  pool_forward<T>(ctx, max_pool_kernel<T>);
}

template <typename T>
void avg_pool(KernelContext& ctx) {
  pool_forward<T>(ctx, avg_pool_kernel<T>);
}

// dx of MaxPoolGrad (geometry g, x's shape) into `dx`.
template <typename T>
void max_pool_grad_into(KernelContext& ctx, const PoolGeometry& g, int64_t n_in, T* dx) {
  const Tensor& x = ctx.input(0);
  const int64_t n_out = ctx.input(2).num_elements();
  if (n_in == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (n_out == 0) {  // no window covers anything (only possible for an empty output)
    SPIRE_CUDA_CHECK(cudaMemsetAsync(dx, 0, n_in * sizeof(T), cc.stream()));
    return;
  }
  if (g.h * g.w > INT32_MAX) ctx.fail("image of ", g.h, "x", g.w, " pixels is too large");
  Scratch arg(cc, static_cast<size_t>(n_out) * sizeof(int32_t));
  max_pool_argmax_kernel<T><<<blocks_for(cc, n_out), kThreads, 0, cc.stream()>>>(
      g, n_out, x.data<T>(), arg.as<int32_t>());
  SPIRE_CUDA_LAUNCH_CHECK();
  max_pool_grad_kernel<T><<<blocks_for(cc, n_in), kThreads, 0, cc.stream()>>>(
      g, n_in, arg.as<int32_t>(), ctx.input(2).data<T>(), dx);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// MaxPoolGrad's shape checks; its geometry.
PoolGeometry max_pool_grad_geometry(KernelContext& ctx) {
  PoolGeometry g = pool_geometry(ctx, ctx.input(0).shape());
  expect_pool_shape(ctx, "y", ctx.input(1), pool_out_shape(g));
  expect_pool_shape(ctx, "dy", ctx.input(2), pool_out_shape(g));
  return g;
}

template <typename T>
void max_pool_grad(KernelContext& ctx) {
  const PoolGeometry g = max_pool_grad_geometry(ctx);
  Tensor& dx = ctx.allocate_output(0, ctx.input(0).shape());
  max_pool_grad_into<T>(ctx, g, dx.num_elements(), dx.data<T>());
}

// FusedMaxPoolGrad: dx, then the node's epilogue program over it (a ReLU's gradient mask).
template <typename T>
void fused_max_pool_grad(KernelContext& ctx) {
  const PoolGeometry g = kernels::in_product(ctx, [&] { return max_pool_grad_geometry(ctx); });
  const Shape& product = ctx.input(0).shape();
  CudaEpilogue<T> epilogue(ctx, product, 3);
  max_pool_grad_into<T>(ctx, g, product.num_elements(), epilogue.product());
  epilogue.finish(ctx);
}

template <typename T>
void max_pool_grad_grad(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeometry g = pool_geometry(ctx, x.shape());
  expect_pool_shape(ctx, "y", ctx.input(1), pool_out_shape(g));
  expect_pool_shape(ctx, "g", ctx.input(2), x.shape());
  Tensor& out = ctx.allocate_output(0, pool_out_shape(g));
  launch_over(ctx, out, max_pool_grad_grad_kernel<T>, g, x.data<T>(), ctx.input(2).data<T>(),
              out.data<T>());
}

template <typename T>
void avg_pool_grad(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  PoolGeometry g = pool_geometry(ctx, like.shape());
  expect_pool_shape(ctx, "dy", ctx.input(1), pool_out_shape(g));
  Tensor& dx = ctx.allocate_output(0, pool_in_shape(g));
  launch_over(ctx, dx, avg_pool_grad_kernel<T>, g, ctx.input(1).data<T>(), dx.data<T>());
}

template <typename T>
void register_pool_kernels(DType dt) {
  auto& r = KernelRegistry::global();
  r.add("MaxPool", DeviceType::CUDA, dt, max_pool<T>);
  r.add("MaxPoolGrad", DeviceType::CUDA, dt, max_pool_grad<T>);
  r.add("FusedMaxPoolGrad", DeviceType::CUDA, dt, fused_max_pool_grad<T>);
  register_epilogue(DeviceType::CUDA, "MaxPoolGrad", dt, "FusedMaxPoolGrad");
  r.add("MaxPoolGradGrad", DeviceType::CUDA, dt, max_pool_grad_grad<T>);
  r.add("AvgPool", DeviceType::CUDA, dt, avg_pool<T>);
  r.add("AvgPoolGrad", DeviceType::CUDA, dt, avg_pool_grad<T>);
}

}  // namespace

SPIRE_STATIC_INIT(cuda_pool_kernels) {
  register_pool_kernels<float>(DType::F32);
  register_pool_kernels<double>(DType::F64);
}

}  // namespace spire::cuda

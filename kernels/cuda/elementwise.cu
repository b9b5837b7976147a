// CUDA kernels for the elementwise ops: the same functors as the CPU
// kernels (kernels/functors.h), launched over the broadcast output with
// per-input strides. Registered for DeviceType::CUDA.
#include <array>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/elementwise_table.h"
#include "kernels/functors.h"

namespace spire::cuda {
namespace {

constexpr int kMaxDims = 8;

// Output dims and per-input strides (0 along broadcast dims), by value.
template <int N>
struct BroadcastInfo {
  int rank;
  int64_t dims[kMaxDims];
  int64_t strides[N][kMaxDims];
};

template <int N>
BroadcastInfo<N> make_info(KernelContext& ctx, const Shape& out, const std::array<Shape, N>& ins) {
  if (out.rank() > kMaxDims) ctx.fail("CUDA elementwise kernels support rank <= ", kMaxDims);
  BroadcastInfo<N> info{};
  info.rank = out.rank();
  for (int d = 0; d < out.rank(); ++d) info.dims[d] = out[d];
  for (int k = 0; k < N; ++k) {
    int64_t acc = 1;
    for (int d = out.rank() - 1; d >= 0; --d) {
      int i = ins[k].rank() - out.rank() + d;
      int64_t dim = i >= 0 ? ins[k][i] : 1;
      info.strides[k][d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  return info;
}

template <int N>
__device__ void offsets(const BroadcastInfo<N>& info, int64_t idx, int64_t* off) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = info.rank - 1; d >= 0; --d) {
    int64_t i = idx % info.dims[d];
    idx /= info.dims[d];
    for (int k = 0; k < N; ++k) off[k] += i * info.strides[k][d];
  }
}

template <typename T, typename R, typename F>
__global__ void binary_kernel(BroadcastInfo<2> info, int64_t n, const T* a, const T* b, R* c, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(info, i, off);
    c[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename T, typename R, typename F>
__global__ void unary_kernel(int64_t n, const T* a, R* c, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c[i] = f(a[i]);
}

inline int grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

template <typename T, typename F>
void launch_binary(KernelContext& ctx, F f) {
  using R = decltype(f(T{}, T{}));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  Shape out;
  if (!broadcast_shapes(x.shape(), y.shape(), &out))
    ctx.fail("shapes ", x.shape().to_string(), " and ", y.shape().to_string(),
             " cannot be broadcast together");
  Tensor& z = ctx.allocate_output(0, out);
  int64_t n = z.num_elements();
  if (n == 0) return;
  auto info = make_info<2>(ctx, out, {x.shape(), y.shape()});
  binary_kernel<T, R, F><<<grid_for(n), 256>>>(info, n, x.data<T>(), y.data<T>(), z.data<R>(), f);
  SPIRE_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename F>
void launch_unary(KernelContext& ctx, F f) {
  using R = decltype(f(T{}));
  const Tensor& x = ctx.input(0);
  Tensor& z = ctx.allocate_output(0, x.shape());
  int64_t n = z.num_elements();
  if (n == 0) return;
  unary_kernel<T, R, F><<<grid_for(n), 256>>>(n, x.data<T>(), z.data<R>(), f);
  SPIRE_CUDA_CHECK(cudaGetLastError());
}

// Registers the shared elementwise table (kernels/elementwise_table.h) for CUDA.
struct Registrar {
  template <typename F>
  void binary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    for (DType dt : dtypes)
      KernelRegistry::global().add(op, DeviceType::CUDA, dt, [f, dt](KernelContext& ctx) {
        visit_dtype(dt, ctx.node().op_type().c_str(), [&](auto zero) {
          using T = decltype(zero);
          if constexpr (std::is_invocable_v<F, T, T> && functors::kSupports<F, T>) launch_binary<T>(ctx, f);
        });
      });
  }
  template <typename F>
  void unary(const char* op, F f, std::initializer_list<DType> dtypes) const {
    for (DType dt : dtypes)
      KernelRegistry::global().add(op, DeviceType::CUDA, dt, [f, dt](KernelContext& ctx) {
        visit_dtype(dt, ctx.node().op_type().c_str(), [&](auto zero) {
          using T = decltype(zero);
          if constexpr (std::is_invocable_v<F, T> && functors::kSupports<F, T>) launch_unary<T>(ctx, f);
        });
      });
  }
};

}  // namespace

SPIRE_STATIC_INIT(cuda_elementwise_kernels) {
  kernels::visit_elementwise_table(Registrar{});
}

}  // namespace spire::cuda

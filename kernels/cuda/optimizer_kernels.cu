// CUDA kernels of the fused optimizer updates (FusedApply*, see
// core/ops/optimizer_ops.h) as a multi-tensor apply: the host binds the
// node's variables, slots and gradients (kernels/optimizer_functors.h,
// copy-on-write like the CPU kernel; locked a group of kMultiTensorMax
// variables at a time), splits them into launches of at most
// kMultiTensorMax tensors whose pointers, sizes and chunk table travel in a
// by-value kernel parameter (< 4 KiB), and each block of a launch updates
// one chunk of kMultiTensorChunk elements of one tensor with the op's
// update functor. A model of hundreds of variables takes a few launches.
// The scalar inputs (learning rate, beta powers) stay in device memory:
// every thread reads them and computes the per-step values itself. A gated
// node runs the Gated functor: its apply_if stays on the device too, and
// where it is 0 the kernel writes the old values (no host synchronization).
#include "core/kernel_registry.h"
#include "kernels/cuda/launch.h"
#include "kernels/optimizer_functors.h"

namespace spire::cuda {
namespace {

template <typename T, int kStates, int kScalars, typename F>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_apply_kernel(kernels::MultiTensorArgs<T, kStates, kScalars> args, F f) {
  T scalars[kScalars];
#pragma unroll
  for (int k = 0; k < kScalars; ++k) scalars[k] = *args.scalars[k];
  f.prepare(scalars);
  kernels::multi_tensor_block(args, f, kernels::kMultiTensorChunk, static_cast<int>(blockIdx.x),
                              static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

template <typename T, typename F>
void fused_apply(KernelContext& ctx, F f) {
  constexpr int kStates = F::kSlots + 1;
  constexpr int kScalars = F::kScalars;
  using Args = kernels::MultiTensorArgs<T, kStates, kScalars>;
  static_assert(sizeof(Args) <= 4000, "the multi-tensor kernel parameter must stay under 4 KiB");
  static_assert(kernels::kMultiTensorChunk % kernels::kVectorWidth<T> == 0,
                "chunks must start on vector boundaries");
  kernels::FusedApplyBinding b = kernels::bind_fused_apply(ctx, F::kSlots, kScalars);
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  // Groups of at most kMultiTensorMax variables: each group is locked while
  // its launches are queued, then committed.
  for (int begin = 0; begin < b.layout.n; begin += kernels::kMultiTensorMax) {
    const int end = std::min(b.layout.n, begin + kernels::kMultiTensorMax);
    b.acquire(ctx, begin, end);
    const std::vector<int64_t> sizes(b.sizes.begin() + begin, b.sizes.begin() + end);
    const kernels::MultiTensorPlan plan = kernels::plan_multi_tensor(sizes);
    for (size_t l = 0; l < plan.launches.size(); ++l) {
      const kernels::MultiTensorLaunch& launch = plan.launches[l];
      Args args = kernels::multi_tensor_args<T, kStates, kScalars>(b, ctx, launch,
                                                                   plan.first_chunk[l], begin);
      multi_tensor_apply_kernel<T, kStates, kScalars, F>
          <<<launch.blocks(), kThreads, 0, cc.stream()>>>(args, f);
      SPIRE_CUDA_LAUNCH_CHECK();
    }
    b.commit();
  }
}

struct Registrar {
  template <typename Make>
  void operator()(const char* op, Make make) const {
    KernelRegistry::global().add(op, DeviceType::CUDA, DType::F32, [make](KernelContext& ctx) {
      run<float>(ctx, make(ctx, float{}));
    });
    KernelRegistry::global().add(op, DeviceType::CUDA, DType::F64, [make](KernelContext& ctx) {
      run<double>(ctx, make(ctx, double{}));
    });
  }
  template <typename T, typename F>
  static void run(KernelContext& ctx, F f) {
    if (ctx.attr<bool>("gated"))
      fused_apply<T>(ctx, functors::Gated<T, F>{f});
    else
      fused_apply<T>(ctx, f);
  }
};

}  // namespace

SPIRE_STATIC_INIT(cuda_optimizer_kernels) { kernels::visit_fused_apply_ops(Registrar{}); }

}  // namespace spire::cuda

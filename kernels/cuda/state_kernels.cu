// CUDA kernels for sources, state and control ops: Const (uploaded once per
// session into SessionState::constant_cache), ZerosLike, OnesLike and the
// AssignAdd/AssignSub update (copy-on-write as on the CPU: in place only
// when the variable's buffer has no other owner). Placeholder, Variable,
// Assign, Identity, StopGradient, NoOp and Copy (to this GPU from the CPU or
// another GPU, ordered on the streams; see Tensor::to) are the
// device-independent kernels of kernels/state_common.h.
#include "core/kernel_registry.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"
#include "kernels/state_common.h"

namespace spire::cuda {
namespace {

constexpr int kMaxDims = 8;

void const_kernel(KernelContext& ctx) {
  ctx.set_output(0, ctx.state().constant_cache(&ctx.node(), [&] {
    return ctx.attr<Tensor>("value").to(ctx.device());
  }));
}

// Strides of `d` broadcast against the variable's shape (0 on broadcast dims).
struct UpdateInfo {
  int rank;
  int64_t dims[kMaxDims];
  int64_t strides[kMaxDims];
};

template <typename T, bool kAdd>
__global__ void update_kernel(UpdateInfo info, int64_t n, const T* d, T* v) {
  SPIRE_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i, off = 0;
    for (int k = info.rank - 1; k >= 0; --k) {
      off += (rest % info.dims[k]) * info.strides[k];
      rest /= info.dims[k];
    }
    if (kAdd) v[i] = functors::Add{}(v[i], d[off]);
    else v[i] = functors::Sub{}(v[i], d[off]);
  }
}

template <typename T, bool kAdd>
void assign_update(KernelContext& ctx) {
  VariableResource::Update update = kernels::checked_update(ctx);
  Tensor& slot = update.value();
  const Tensor& d = ctx.input(1);
  if (slot.rank() > kMaxDims) ctx.fail("CUDA AssignAdd/AssignSub support rank <= ", kMaxDims);
  UpdateInfo info{};
  info.rank = slot.rank();
  int64_t acc = 1;
  for (int k = slot.rank() - 1; k >= 0; --k) {
    info.dims[k] = slot.dim(k);
    int j = d.rank() - slot.rank() + k;
    int64_t dim = j >= 0 ? d.dim(j) : 1;
    info.strides[k] = dim == 1 ? 0 : acc;
    acc *= dim;
  }
  // Copy-on-write: in place only when no one but the slot and this input holds the buffer.
  Tensor target = may_update_in_place(slot, ctx.input(0)) ? slot : slot.clone();
  int64_t n = target.num_elements();
  if (n > 0) {
    auto& cc = context(ctx);
    update_kernel<T, kAdd><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        info, n, d.data<T>(), target.data<T>());
    SPIRE_CUDA_LAUNCH_CHECK();
  }
  slot = target;
  ctx.set_output(0, slot);
}

template <bool kAdd>
void assign_update_kernel(KernelContext& ctx) {
  kernels::visit_update_dtype(ctx, [&](auto zero) { assign_update<decltype(zero), kAdd>(ctx); });
}

template <typename T>
__global__ void fill_kernel(int64_t n, T value, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) out[i] = value;
}

template <int kValue>
void fill_like_kernel(KernelContext& ctx) {
  Tensor& out = ctx.allocate_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
  int64_t n = out.num_elements();
  if (n == 0) return;
  auto& cc = context(ctx);
  if (kValue == 0) {
    SPIRE_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), cc.stream()));
    return;
  }
  visit_dtype(out.dtype(), ctx.node().op_type().c_str(), [&](auto zero) {
    using T = decltype(zero);
    fill_kernel<T><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(n, static_cast<T>(kValue),
                                                                    out.data<T>());
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

SPIRE_STATIC_INIT(cuda_state_kernels) {
  kernels::register_common_state_kernels(DeviceType::CUDA);
  auto& r = KernelRegistry::global();
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool}) {
    r.add("Const", DeviceType::CUDA, dt, const_kernel);
    r.add("ZerosLike", DeviceType::CUDA, dt, fill_like_kernel<0>);
    r.add("OnesLike", DeviceType::CUDA, dt, fill_like_kernel<1>);
  }
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    r.add("AssignAdd", DeviceType::CUDA, dt, assign_update_kernel<true>);
    r.add("AssignSub", DeviceType::CUDA, dt, assign_update_kernel<false>);
  }
}

}  // namespace spire::cuda

// CPU kernels for sources, state and control ops: Const, ZerosLike, OnesLike and the
// AssignAdd/AssignSub update (copy-on-write: a variable's buffer is updated in place only
// when no other tensor shares it). Placeholder, Variable, Assign, Identity, StopGradient,
// NoOp and Copy (to the CPU) are the device-independent kernels of kernels/state_common.h.
#include <algorithm>

#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/state_common.h"

namespace spire::cpu {
namespace {

// On cpu:0 the output shares the graph's constant (fetches copy it, and updates
// copy-on-write); on another CPU device it is copied there once per session.
void const_kernel(KernelContext& ctx) {
  if (ctx.device() == Device::cpu()) {
    ctx.set_output(0, ctx.attr<Tensor>("value"));
    return;
  }
  ctx.set_output(0, ctx.state().constant_cache(&ctx.node(), [&] {
    return ctx.attr<Tensor>("value").to(ctx.device());
  }));
}

template <typename T, bool kAdd>
void assign_update(KernelContext& ctx) {
  VariableResource::Update update = kernels::checked_update(ctx);
  Tensor& slot = update.value();
  const Tensor& d = ctx.input(1);
  // Copy-on-write: in place only when no one but the slot and this input holds the buffer.
  Tensor target = may_update_in_place(slot, ctx.input(0)) ? slot : slot.clone();
  T* pt = target.data<T>();
  const T* pd = d.data<T>();
  std::array<std::vector<int64_t>, 1> st{broadcast_strides(d.shape(), slot.shape())};
  for_each_broadcast_row<1>(slot.shape(), st, [&](int64_t o, const auto& off, const auto& inner, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kAdd) pt[o + i] += pd[off[0] + i * inner[0]];
      else pt[o + i] -= pd[off[0] + i * inner[0]];
    }
  });
  slot = target;
  ctx.set_output(0, slot);
}

template <bool kAdd>
void assign_update_kernel(KernelContext& ctx) {
  kernels::visit_update_dtype(ctx, [&](auto zero) { assign_update<decltype(zero), kAdd>(ctx); });
}

template <int kValue>
void fill_like_kernel(KernelContext& ctx) {
  Tensor& t = ctx.allocate_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
  visit_dtype(t.dtype(), ctx.node().op_type().c_str(), [&](auto zero) {
    using T = decltype(zero);
    std::fill_n(t.data<T>(), t.num_elements(), static_cast<T>(kValue));
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("Const", DeviceType::CPU, const_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("AssignAdd", DeviceType::CPU, assign_update_kernel<true>, DType::F32, DType::F64, DType::I32, DType::I64);
SPIRE_REGISTER_KERNEL("AssignSub", DeviceType::CPU, assign_update_kernel<false>, DType::F32, DType::F64, DType::I32, DType::I64);
SPIRE_REGISTER_KERNEL("ZerosLike", DeviceType::CPU, fill_like_kernel<0>, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("OnesLike", DeviceType::CPU, fill_like_kernel<1>, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);

SPIRE_STATIC_INIT(cpu_state_kernels) { kernels::register_common_state_kernels(DeviceType::CPU); }

}  // namespace spire::cpu

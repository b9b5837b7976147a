// CPU kernels for sources, state and control ops: Const, Placeholder,
// Variable, Assign/AssignAdd/AssignSub (copy-on-write: a variable's buffer
// is updated in place only when no other tensor shares it), Identity,
// StopGradient, ZerosLike, OnesLike, NoOp and Copy (to the CPU).
#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"

namespace spire::cpu {
namespace {


void const_kernel(KernelContext& ctx) {
  Tensor v = ctx.attr<Tensor>("value");
  ctx.set_output(0, v.to(ctx.device()));
}

void placeholder_kernel(KernelContext& ctx) {
  ctx.fail("placeholder '", ctx.node().name(), "' must be fed");
}

void variable_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.state().variable(&ctx.node())); }

Tensor& var_slot(KernelContext& ctx) {
  const Node* var = ctx.node().input(0).node;
  if (var->op_type() != "Variable") ctx.fail("input 0 must be a variable, got ", var->describe());
  return ctx.state().variable(var);
}

void assign_kernel(KernelContext& ctx) {
  Tensor& slot = var_slot(ctx);
  const Tensor& value = ctx.input(1);
  const Shape& vs = ctx.node().input(0).shape();
  if (value.shape() != vs)
    ctx.fail("cannot assign ", value.type_string(), " to variable '",
             ctx.node().input(0).node->name(), "' of shape ", vs.to_string());
  slot = value;  // shares the buffer; updates copy when it is shared
  ctx.set_output(0, slot);
}

template <typename T, bool kAdd>
void assign_update(KernelContext& ctx) {
  Tensor& slot = var_slot(ctx);
  if (!slot.defined())
    ctx.fail("variable '", ctx.node().input(0).node->name(), "' is uninitialized");
  const Tensor& d = ctx.input(1);
  Shape check;
  if (!broadcast_shapes(slot.shape(), d.shape(), &check) || check != slot.shape())
    ctx.fail("cannot update variable of shape ", slot.shape().to_string(), " with ",
             d.type_string());
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
  visit_dtype(ctx.input(1).dtype(), ctx.node().op_type().c_str(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bool>) ctx.fail("bool variables cannot be incremented");
    else assign_update<T, kAdd>(ctx);
  });
}

void identity_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); }

// Copy to the CPU (from a GPU this waits for the device's queued work).
void copy_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0).to(ctx.device())); }

template <int kValue>
void fill_like_kernel(KernelContext& ctx) {
  ctx.set_output(0, Tensor::full(ctx.input(0).dtype(), ctx.input(0).shape(), kValue));
}

void no_op_kernel(KernelContext&) {}

}  // namespace

SPIRE_REGISTER_KERNEL("Const", DeviceType::CPU, const_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("Copy", DeviceType::CPU, copy_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("Placeholder", DeviceType::CPU, placeholder_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("Variable", DeviceType::CPU, variable_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("Assign", DeviceType::CPU, assign_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("AssignAdd", DeviceType::CPU, assign_update_kernel<true>, DType::F32, DType::F64, DType::I32, DType::I64);
SPIRE_REGISTER_KERNEL("AssignSub", DeviceType::CPU, assign_update_kernel<false>, DType::F32, DType::F64, DType::I32, DType::I64);
SPIRE_REGISTER_KERNEL("Identity", DeviceType::CPU, identity_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("StopGradient", DeviceType::CPU, identity_kernel, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("ZerosLike", DeviceType::CPU, fill_like_kernel<0>, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("OnesLike", DeviceType::CPU, fill_like_kernel<1>, DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool);
SPIRE_REGISTER_KERNEL("NoOp", DeviceType::CPU, no_op_kernel, DType::F32);

}  // namespace spire::cpu

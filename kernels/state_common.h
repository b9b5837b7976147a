// The device-independent kernels of the source, state and control ops, shared by the CPU
// (kernels/cpu/state_kernels.cc) and CUDA (kernels/cuda/state_kernels.cu) backends: they
// only move tensor handles around on the host (Placeholder, Variable, Assign, Identity,
// StopGradient, NoOp, Copy) or check shapes before a device-specific update (AssignAdd,
// AssignSub). Each device file registers these for its device with
// register_common_state_kernels and keeps its own Const, ZerosLike/OnesLike and update
// loop. Host code only.
#pragma once

#include <type_traits>

#include "core/kernel_registry.h"

namespace spire::kernels {

/// Registers Placeholder, Variable, Assign, Copy, Identity and StopGradient for the
/// variable dtypes (f32, f64, i32, i64, bool) and NoOp for f32, on `device`.
void register_common_state_kernels(DeviceType device);

/// The resource of the variable that feeds input 0 of ctx's node (fails unless that
/// input is a variable).
VariableResource& var_resource(KernelContext& ctx);

/// Exclusive access to an AssignAdd/AssignSub node's variable, after checking that it is
/// initialized and that input 1 broadcasts to its shape. Hold it while deciding
/// copy-on-write and writing.
VariableResource::Update checked_update(KernelContext& ctx);

/// AssignAdd / AssignSub: calls f(T{}) for input 1's dtype T (the numeric dtypes; bool
/// variables fail).
template <typename F>
void visit_update_dtype(KernelContext& ctx, F&& f) {
  visit_dtype(ctx.input(1).dtype(), ctx.node().op_type().c_str(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bool>) ctx.fail("bool variables cannot be incremented");
    else f(zero);
  });
}

}  // namespace spire::kernels

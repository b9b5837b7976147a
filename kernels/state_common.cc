// The device-independent state kernels (see state_common.h).
#include "kernels/state_common.h"

#include "core/op_registry.h"

namespace spire::kernels {
namespace {

void placeholder_kernel(KernelContext& ctx) {
  ctx.fail("placeholder '", ctx.node().name(), "' must be fed");
}

void variable_kernel(KernelContext& ctx) {
  ctx.set_output(0, ctx.state().variable(&ctx.node()).read());
}

void assign_kernel(KernelContext& ctx) {
  VariableResource& var = var_resource(ctx);
  const Tensor& value = ctx.input(1);
  const Shape& vs = ctx.node().input(0).shape();
  if (value.shape() != vs)
    ctx.fail("cannot assign ", value.type_string(), " to variable '",
             ctx.node().input(0).node->name(), "' of shape ", vs.to_string());
  // Shares the buffer (never the caller's: the executor copies fed values);
  // later updates copy while anyone else holds it.
  var.update().value() = value;
  ctx.set_output(0, value);
}

void identity_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); }

// Copy to this kernel's device (Tensor::to): to the CPU (from a GPU this waits for the
// device's queued work); to a GPU from the CPU through pinned staging, from another GPU
// with an event-ordered peer copy.
void copy_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0).to(ctx.device())); }

void no_op_kernel(KernelContext&) {}

}  // namespace

VariableResource& var_resource(KernelContext& ctx) {
  const Node* var = ctx.node().input(0).node;
  if (!var->op_def().is_variable()) ctx.fail("input 0 must be a variable, got ", var->describe());
  return ctx.state().variable(var);
}

VariableResource::Update checked_update(KernelContext& ctx) {
  VariableResource::Update u = var_resource(ctx).update();
  const Tensor& slot = u.value();
  if (!slot.defined())
    ctx.fail("variable '", ctx.node().input(0).node->name(), "' is uninitialized");
  const Tensor& d = ctx.input(1);
  Shape check;
  if (!broadcast_shapes(slot.shape(), d.shape(), &check) || check != slot.shape())
    ctx.fail("cannot update variable of shape ", slot.shape().to_string(), " with ",
             d.type_string());
  return u;
}

void register_common_state_kernels(DeviceType device) {
  auto& r = KernelRegistry::global();
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool}) {
    r.add("Placeholder", device, dt, placeholder_kernel);
    r.add("Variable", device, dt, variable_kernel);
    r.add("Assign", device, dt, assign_kernel);
    r.add("Copy", device, dt, copy_kernel);
    r.add("Identity", device, dt, identity_kernel);
    r.add("StopGradient", device, dt, identity_kernel);
  }
  r.add("NoOp", device, DType::F32, no_op_kernel);
}

}  // namespace spire::kernels

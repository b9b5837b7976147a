// CUDA kernels for sources, state and control ops: Const (uploaded once per
// session into SessionState::constant_cache), Placeholder, Variable,
// Assign/AssignAdd/AssignSub (copy-on-write as on the CPU: in place only
// when the variable's buffer has no other owner), Identity, StopGradient,
// ZerosLike, OnesLike, NoOp and Copy (to this GPU from the CPU or another
// GPU, ordered on the streams; see Tensor::to).
#include "core/kernel_registry.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"

namespace spire::cuda {
namespace {

constexpr int kMaxDims = 8;

void const_kernel(KernelContext& ctx) {
  Tensor& cached = ctx.state().constant_cache(&ctx.node());
  if (!cached.defined() || cached.device() != ctx.device())
    cached = ctx.attr<Tensor>("value").to(ctx.device());
  ctx.set_output(0, cached);
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
  Tensor& slot = var_slot(ctx);
  if (!slot.defined()) ctx.fail("variable '", ctx.node().input(0).node->name(), "' is uninitialized");
  const Tensor& d = ctx.input(1);
  Shape check;
  if (!broadcast_shapes(slot.shape(), d.shape(), &check) || check != slot.shape())
    ctx.fail("cannot update variable of shape ", slot.shape().to_string(), " with ", d.type_string());
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
  visit_dtype(ctx.input(1).dtype(), ctx.node().op_type().c_str(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bool>) ctx.fail("bool variables cannot be incremented");
    else assign_update<T, kAdd>(ctx);
  });
}

void identity_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); }

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

void no_op_kernel(KernelContext&) {}

// Copy to this GPU: from the CPU through pinned staging, from another GPU
// with an event-ordered peer copy.
void copy_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0).to(ctx.device())); }

}  // namespace

SPIRE_STATIC_INIT(cuda_state_kernels) {
  auto& r = KernelRegistry::global();
  const DType all[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool};
  const DType numeric[] = {DType::F32, DType::F64, DType::I32, DType::I64};
  for (DType dt : all) {
    r.add("Const", DeviceType::CUDA, dt, const_kernel);
    r.add("Placeholder", DeviceType::CUDA, dt, placeholder_kernel);
    r.add("Variable", DeviceType::CUDA, dt, variable_kernel);
    r.add("Assign", DeviceType::CUDA, dt, assign_kernel);
    r.add("Copy", DeviceType::CUDA, dt, copy_kernel);
    r.add("Identity", DeviceType::CUDA, dt, identity_kernel);
    r.add("StopGradient", DeviceType::CUDA, dt, identity_kernel);
    r.add("ZerosLike", DeviceType::CUDA, dt, fill_like_kernel<0>);
    r.add("OnesLike", DeviceType::CUDA, dt, fill_like_kernel<1>);
  }
  r.add("NoOp", DeviceType::CUDA, DType::F32, no_op_kernel);
  for (DType dt : numeric) {
    r.add("AssignAdd", DeviceType::CUDA, dt, assign_update_kernel<true>);
    r.add("AssignSub", DeviceType::CUDA, dt, assign_update_kernel<false>);
  }
}

}  // namespace spire::cuda

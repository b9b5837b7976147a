// The fused optimizer updates (ops FusedApplyGradientDescent, FusedApplyMomentum,
// FusedApplyAdam, FusedApplyAdamW of core/ops/optimizer_ops.h), shared by the
// CPU kernel (kernels/cpu/optimizer_kernels.cc) and the CUDA kernel
// (kernels/cuda/optimizer_kernels.cu):
//  - the per-element update math, one SPIRE_HD functor per optimizer;
//  - the table naming each op's functor (both devices register from it);
//  - the run-time binding of a node's inputs to the session's variable
//    slots with the copy-on-write rule (host code);
//  - the multi-tensor launch plan and block body of the CUDA kernel (which
//    block updates which chunk of which tensor), written as plain host/device
//    functions so tests/core/ops/optimizer_ops_test.cc runs them on the host.
// No CUDA include here: the file compiles with g++ as well.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/kernel_registry.h"
#include "core/op_registry.h"
#include "kernels/functors.h"

namespace spire::functors {

// Every update functor F<T> has
//   kSlots     slot variables per variable (0, 1 or 2),
//   kScalars   scalar inputs (the learning rate, Adam's beta powers),
//   prepare(s) sets the per-step values from the scalar inputs s[0..kScalars),
//   f(st, g)   updates one element: st[0] the variable, st[1..kSlots] its
//              slots, g the gradient (read all, then write all).
// The expressions follow the per-variable graphs of layers/optimizers.cc
// operation by operation (same order, same rounding of the constants), so
// on the CPU the fused update gives the same bits as the unfused one. On
// the GPU nvcc contracts a*b+c into fused multiply-adds, so results agree
// with the CPU within rounding, not bit for bit.

/// Gradient descent: var -= lr * g.
template <typename T>
struct SgdUpdate {
  static constexpr int kSlots = 0;
  static constexpr int kScalars = 1;
  T lr = T(0);
  SPIRE_HD void prepare(const T* s) { lr = s[0]; }
  SPIRE_HD void operator()(T* st, T g) const { st[0] = st[0] - lr * g; }
};

/// Momentum: acc = acc * momentum + g; var -= lr * acc, or with Nesterov
/// var -= lr * (g + acc * momentum).
template <typename T>
struct MomentumUpdate {
  static constexpr int kSlots = 1;
  static constexpr int kScalars = 1;
  T momentum = T(0);
  bool nesterov = false;
  T lr = T(0);
  SPIRE_HD void prepare(const T* s) { lr = s[0]; }
  SPIRE_HD void operator()(T* st, T g) const {
    const T acc = st[1] * momentum + g;
    st[1] = acc;
    st[0] = st[0] - (nesterov ? lr * (g + acc * momentum) : lr * acc);
  }
};

/// TF1 Adam: lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
/// m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
/// var -= lr_t * m / (sqrt(v) + epsilon). Scalars: lr, beta1^t, beta2^t.
template <typename T>
struct AdamUpdate {
  static constexpr int kSlots = 2;
  static constexpr int kScalars = 3;
  T beta1 = T(0), one_minus_beta1 = T(0), beta2 = T(0), one_minus_beta2 = T(0),
    epsilon = T(0);
  T lr_t = T(0);
  SPIRE_HD void prepare(const T* s) {
    using std::sqrt;
    lr_t = s[0] * sqrt(T(1) - s[2]) / (T(1) - s[1]);
  }
  SPIRE_HD void operator()(T* st, T g) const {
    using std::sqrt;
    const T m = st[1] * beta1 + g * one_minus_beta1;
    const T v = st[2] * beta2 + g * g * one_minus_beta2;
    st[1] = m;
    st[2] = v;
    st[0] = st[0] - lr_t * m / (sqrt(v) + epsilon);
  }
};

/// AdamW (torch.optim.AdamW): m and v as Adam; var = var * (1 - lr * wd) -
/// lr / (1 - beta1^t) * (m / (sqrt(v) / sqrt(1 - beta2^t) + epsilon)).
template <typename T>
struct AdamWUpdate {
  static constexpr int kSlots = 2;
  static constexpr int kScalars = 3;
  T beta1 = T(0), one_minus_beta1 = T(0), beta2 = T(0), one_minus_beta2 = T(0),
    epsilon = T(0), weight_decay = T(0);
  T step_size = T(0), sqrt_bc2 = T(0), decay = T(0);
  SPIRE_HD void prepare(const T* s) {
    using std::sqrt;
    step_size = s[0] / (T(1) - s[1]);
    sqrt_bc2 = sqrt(T(1) - s[2]);
    decay = T(1) - s[0] * weight_decay;
  }
  SPIRE_HD void operator()(T* st, T g) const {
    using std::sqrt;
    const T m = st[1] * beta1 + g * one_minus_beta1;
    const T v = st[2] * beta2 + g * g * one_minus_beta2;
    st[1] = m;
    st[2] = v;
    const T denom = sqrt(v) / sqrt_bc2 + epsilon;
    st[0] = st[0] * decay - step_size * (m / denom);
  }
};

/// The gated form of an update functor F (ops with attr gated = true): one
/// more scalar input, apply_if, after F's; where it is 0 every element keeps
/// its old value (the caller still writes the states back, so a
/// copy-on-write target receives the old values). The CUDA kernel uses it;
/// the CPU kernel skips a gated-off node before touching any variable.
template <typename T, typename F>
struct Gated {
  static constexpr int kSlots = F::kSlots;
  static constexpr int kScalars = F::kScalars + 1;
  F inner;
  bool apply = true;
  SPIRE_HD void prepare(const T* s) {
    inner.prepare(s);
    apply = s[F::kScalars] != T(0);
  }
  SPIRE_HD void operator()(T* st, T g) const {
    if (apply) inner(st, g);
  }
};

}  // namespace spire::functors

namespace spire::kernels {

/// Calls v(op name, make) for each fused optimizer op, where make(ctx,
/// T{}) builds the op's update functor in dtype T from the node's attrs.
/// The CPU and CUDA kernel files register from this one table (f32, f64).
template <typename Visitor>
void visit_fused_apply_ops(Visitor&& v) {
  using namespace functors;
  v("FusedApplyGradientDescent", [](const KernelContext&, auto zero) {
    return SgdUpdate<decltype(zero)>{};
  });
  v("FusedApplyMomentum", [](const KernelContext& ctx, auto zero) {
    using T = decltype(zero);
    MomentumUpdate<T> f;
    f.momentum = static_cast<T>(ctx.attr<double>("momentum"));
    f.nesterov = ctx.attr<bool>("use_nesterov");
    return f;
  });
  auto adam_constants = [](const KernelContext& ctx, auto& f) {
    using T = decltype(f.beta1);
    const double b1 = ctx.attr<double>("beta1"), b2 = ctx.attr<double>("beta2");
    // The graph form multiplies by constants made from these doubles.
    f.beta1 = static_cast<T>(b1);
    f.one_minus_beta1 = static_cast<T>(1.0 - b1);
    f.beta2 = static_cast<T>(b2);
    f.one_minus_beta2 = static_cast<T>(1.0 - b2);
    f.epsilon = static_cast<T>(ctx.attr<double>("epsilon"));
  };
  v("FusedApplyAdam", [adam_constants](const KernelContext& ctx, auto zero) {
    AdamUpdate<decltype(zero)> f;
    adam_constants(ctx, f);
    return f;
  });
  v("FusedApplyAdamW", [adam_constants](const KernelContext& ctx, auto zero) {
    using T = decltype(zero);
    AdamWUpdate<T> f;
    adam_constants(ctx, f);
    f.weight_decay = static_cast<T>(ctx.attr<double>("weight_decay"));
    return f;
  });
}

// ---- run-time binding ------------------------------------------------------

/// Input layout of the fused ops for n variables with k slots each:
/// [vars(n), grads(n), slot 1 of each var(n), ..., slot k(n), scalars]; a
/// gated node's scalars end with apply_if (counted in num_scalars).
struct FusedApplyLayout {
  int n = 0;
  int num_slots = 0;
  int num_scalars = 0;
  bool gated = false;
  /// The apply_if input of a gated node.
  int gate() const { return num_inputs() - 1; }
  int var(int i) const { return i; }
  int grad(int i) const { return n + i; }
  /// State s of variable i: s = 0 the variable, s >= 1 its slot s.
  int state(int s, int i) const { return s == 0 ? i : (1 + s) * n + i; }
  int scalar(int k) const { return (2 + num_slots) * n + k; }
  int num_inputs() const { return (2 + num_slots) * n + num_scalars; }
};

/// The run-time tensors of one fused update node. For state s of variable
/// i (index s * n + i), `slots` is the session's value slot and `targets`
/// the tensor receiving the new value: the slot's own tensor when the update
/// may be written in place, else a new buffer on the same device. Variables
/// are updated in groups: acquire(begin, end) locks the states of variables
/// [begin, end) (in address order), checks them and chooses their targets;
/// kernels read the current values from slot(), write target(), then
/// commit() stores them and releases the locks. Each variable's update is
/// atomic (TF's per-variable ApplyAdam); no thread holds more than one
/// group's locks, so concurrent updates never deadlock.
struct FusedApplyBinding {
  FusedApplyLayout layout;
  std::vector<VariableResource*> resources;  // per state index s * n + i
  std::vector<Tensor*> slots;                // valid between acquire and commit
  std::vector<Tensor> targets;
  std::vector<int64_t> sizes;  // elements per variable
  int begin = 0, end = 0;      // the acquired group
  std::vector<std::unique_lock<std::mutex>> locks;
  int num_states() const { return layout.num_slots + 1; }
  Tensor& slot(int s, int i) const { return *slots[static_cast<size_t>(s * layout.n + i)]; }
  Tensor& target(int s, int i) { return targets[static_cast<size_t>(s * layout.n + i)]; }

  /// Locks and checks variables [b, e) (every var/slot initialized, with its
  /// graph shape and dtype, on the kernel's device) and decides their
  /// targets. Errors name the variable.
  void acquire(KernelContext& ctx, int b, int e) {
    begin = b;
    end = e;
    const int states = num_states();
    std::vector<VariableResource*> group;
    for (int i = b; i < e; ++i)
      for (int s = 0; s < states; ++s) group.push_back(resources[static_cast<size_t>(s * layout.n + i)]);
    locks = VariableResource::lock_all(group);
    for (int i = b; i < e; ++i) {
      const Node* var = ctx.node().input(layout.var(i)).node;
      const Shape& shape = ctx.node().input(layout.var(i)).shape();
      for (int s = 0; s < states; ++s) {
        const Node* v = ctx.node().input(layout.state(s, i)).node;
        Tensor& slot = resources[static_cast<size_t>(s * layout.n + i)]->value_locked();
        if (!slot.defined()) ctx.fail("variable '", v->name(), "' is uninitialized");
        if (slot.shape() != shape || slot.dtype() != ctx.input(layout.var(i)).dtype())
          ctx.fail("variable '", v->name(), "' holds ", slot.type_string(), ", expected ",
                   dtype_name(ctx.input(layout.var(i)).dtype()), shape.to_string(), " (as '",
                   var->name(), "')");
        if (slot.device() != ctx.device())
          ctx.fail("variable '", v->name(), "' lives on ", slot.device().to_string(),
                   " but the update runs on ", ctx.device().to_string());
        slots[static_cast<size_t>(s * layout.n + i)] = &slot;
      }
    }
    // Decide every target before anything is written (two states may share a buffer).
    for (int s = 0; s < states; ++s)
      for (int i = b; i < e; ++i) {
        Tensor& slot = this->slot(s, i);
        target(s, i) = may_update_in_place(slot, ctx.input(layout.state(s, i)))
                           ? slot
                           : Tensor(slot.dtype(), slot.shape(), ctx.device());
      }
  }
  /// Stores the new values of the acquired group and releases its locks.
  void commit() {
    for (int s = 0; s < num_states(); ++s)
      for (int i = begin; i < end; ++i) {
        const size_t k = static_cast<size_t>(s * layout.n + i);
        *slots[k] = targets[k];
        slots[k] = nullptr;
        targets[k] = Tensor();
      }
    locks.clear();
  }
};

/// Validates the inputs of a fused update node that need no variable lock
/// (num_scalars counts the apply_if of a gated node)
/// (every var/slot input is a variable; every gradient has its variable's
/// shape; scalars are one element) and finds the variables' resources.
/// Then acquire() groups of variables. Errors name the variable.
inline FusedApplyBinding bind_fused_apply(KernelContext& ctx, int num_slots, int num_scalars) {
  FusedApplyBinding b;
  b.layout.n = static_cast<int>(ctx.attr<int64_t>("n"));
  b.layout.num_slots = num_slots;
  b.layout.num_scalars = num_scalars;
  b.layout.gated = ctx.attr<bool>("gated");
  const FusedApplyLayout& L = b.layout;
  if (L.n < 1 || ctx.num_inputs() != L.num_inputs())
    ctx.fail("expected ", L.num_inputs(), " inputs for n = ", L.n, ", got ", ctx.num_inputs());
  const int states = num_slots + 1;
  b.resources.resize(static_cast<size_t>(states * L.n));
  b.slots.resize(b.resources.size(), nullptr);
  b.targets.resize(b.resources.size());
  b.sizes.resize(static_cast<size_t>(L.n));
  for (int i = 0; i < L.n; ++i) {
    const Node* var = ctx.node().input(L.var(i)).node;
    const Shape& shape = ctx.node().input(L.var(i)).shape();
    for (int s = 0; s < states; ++s) {
      const Node* v = ctx.node().input(L.state(s, i)).node;
      if (!v->op_def().is_variable())
        ctx.fail("input ", L.state(s, i), " must be a variable, got ", v->describe());
      b.resources[static_cast<size_t>(s * L.n + i)] = &ctx.state().variable(v);
    }
    for (int j = 0; j < i; ++j)
      if (ctx.node().input(L.var(j)).node == var)
        ctx.fail("variable '", var->name(), "' is listed twice (inputs ", j, " and ", i, ")");
    const Tensor& g = ctx.input(L.grad(i));
    if (g.shape() != shape || g.dtype() != ctx.input(L.var(i)).dtype())
      ctx.fail("the gradient of variable '", var->name(), "' is ", g.type_string(),
               ", expected ", dtype_name(ctx.input(L.var(i)).dtype()), shape.to_string());
    b.sizes[static_cast<size_t>(i)] = shape.num_elements();
  }
  for (int k = 0; k < num_scalars; ++k) {
    const Tensor& t = ctx.input(L.scalar(k));
    if (t.num_elements() != 1 || t.dtype() != ctx.input(0).dtype())
      ctx.fail("scalar input ", L.scalar(k), " must be one ", dtype_name(ctx.input(0).dtype()),
               " element, got ", t.type_string());
  }
  return b;
}

// ---- multi-tensor apply (the CUDA kernel's work split) ----------------------

/// Most tensors one launch updates (its pointer table is a by-value kernel
/// parameter, kept under 4 KiB).
constexpr int kMultiTensorMax = 48;
/// Elements per chunk; each block of a launch updates one chunk of one tensor.
constexpr int64_t kMultiTensorChunk = 16384;

/// One launch: `count` tensors (indices `tensor[]` into the caller's list,
/// empty tensors left out); its blocks [block_end[j-1], block_end[j]) (with
/// block_end[-1] = 0) work on the consecutive chunks of tensor j.
struct MultiTensorLaunch {
  int count = 0;
  int tensor[kMultiTensorMax] = {};
  int block_end[kMultiTensorMax] = {};
  int blocks() const { return count == 0 ? 0 : block_end[count - 1]; }
};

/// Splits tensors of `sizes` elements into launches of at most `max_tensors`
/// (<= kMultiTensorMax) tensors and `max_blocks` blocks; a tensor with more
/// chunks than max_blocks spans several launches (`first_chunk` says where
/// its part starts). Host code.
struct MultiTensorPlan {
  std::vector<MultiTensorLaunch> launches;
  /// Per launch and tensor position: the tensor's first chunk in this launch.
  std::vector<std::vector<int64_t>> first_chunk;
};

inline MultiTensorPlan plan_multi_tensor(const std::vector<int64_t>& sizes,
                                         int max_tensors = kMultiTensorMax,
                                         int64_t chunk = kMultiTensorChunk,
                                         int max_blocks = 1 << 30) {
  MultiTensorPlan plan;
  max_tensors = std::max(1, std::min(max_tensors, kMultiTensorMax));
  MultiTensorLaunch cur;
  std::vector<int64_t> cur_first;
  auto flush = [&] {
    if (cur.count == 0) return;
    plan.launches.push_back(cur);
    plan.first_chunk.push_back(cur_first);
    cur = MultiTensorLaunch();
    cur_first.clear();
  };
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t chunks = (sizes[t] + chunk - 1) / chunk;
    int64_t done = 0;
    while (done < chunks) {
      if (cur.count == max_tensors || cur.blocks() == max_blocks) flush();
      const int64_t room = max_blocks - cur.blocks();
      const int64_t take = std::min(chunks - done, room);
      cur.tensor[cur.count] = static_cast<int>(t);
      cur.block_end[cur.count] = cur.blocks() + static_cast<int>(take);
      cur_first.push_back(done);
      ++cur.count;
      done += take;
    }
  }
  flush();
  return plan;
}

/// Position j of the launch's tensor that block `block` works on: the first
/// j with block < block_end[j] (a short scan: count <= kMultiTensorMax).
SPIRE_HD inline int multi_tensor_position(const int* block_end, int count, int block) {
  int j = 0;
  while (j + 1 < count && block >= block_end[j]) ++j;
  return j;
}

/// The kernel's by-value argument: per tensor position j its element count
/// and the pointers of its gradient, its current states (variable, slots)
/// and where their new values go (in[s][j] == out[s][j] when in place);
/// first_chunk[j] is the chunk of tensor j that the launch's first block of
/// j updates; scalars point at the scalar inputs (device memory on a GPU).
template <typename T, int kStates, int kScalars>
struct MultiTensorArgs {
  int count = 0;
  int block_end[kMultiTensorMax] = {};
  int64_t size[kMultiTensorMax] = {};
  int64_t first_chunk[kMultiTensorMax] = {};
  bool aligned[kMultiTensorMax] = {};
  const T* grad[kMultiTensorMax] = {};
  const T* in[kStates][kMultiTensorMax] = {};
  T* out[kStates][kMultiTensorMax] = {};
  const T* scalars[kScalars] = {};
};

/// W consecutive elements, loaded and stored as one (16-byte) access.
template <typename T, int W>
struct alignas(sizeof(T) * W) ElementVector {
  T val[W];
};

/// Elements per vector access for dtype T (16 bytes).
template <typename T>
constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));

/// The work of block `block` of a launch, done by thread `thread` of
/// `threads`: the block's chunk [begin, end) of tensor position j, elements
/// begin + thread, begin + thread + threads, ...; when all of j's pointers
/// are 16-byte aligned (`aligned[j]`) and `chunk` is a multiple of
/// kVectorWidth<T>, in vectors of that many elements, then the tail.
template <typename T, int kStates, int kScalars, typename F>
SPIRE_HD inline void multi_tensor_block(const MultiTensorArgs<T, kStates, kScalars>& a,
                                        const F& f, int64_t chunk, int block, int thread,
                                        int threads) {
  const int j = multi_tensor_position(a.block_end, a.count, block);
  const int64_t local = block - (j == 0 ? 0 : a.block_end[j - 1]);
  const int64_t begin = (a.first_chunk[j] + local) * chunk;
  const int64_t end = begin + chunk < a.size[j] ? begin + chunk : a.size[j];
  const T* g = a.grad[j];
  const T* in[kStates];
  T* out[kStates];
  for (int s = 0; s < kStates; ++s) {
    in[s] = a.in[s][j];
    out[s] = a.out[s][j];
  }
  int64_t tail = begin;
  constexpr int W = kVectorWidth<T>;
  if (a.aligned[j] && chunk % W == 0) {  // then begin is a multiple of W too
    using V = ElementVector<T, W>;
    const int64_t nvec = (end - begin) / W;
    for (int64_t k = thread; k < nvec; k += threads) {
      const int64_t e = begin + k * W;
      V gv = *reinterpret_cast<const V*>(g + e);
      V sv[kStates];
      for (int s = 0; s < kStates; ++s) sv[s] = *reinterpret_cast<const V*>(in[s] + e);
      for (int w = 0; w < W; ++w) {
        T st[kStates];
        for (int s = 0; s < kStates; ++s) st[s] = sv[s].val[w];
        f(st, gv.val[w]);
        for (int s = 0; s < kStates; ++s) sv[s].val[w] = st[s];
      }
      for (int s = 0; s < kStates; ++s) *reinterpret_cast<V*>(out[s] + e) = sv[s];
    }
    tail = begin + nvec * W;
  }
  for (int64_t e = tail + thread; e < end; e += threads) {
    T st[kStates];
    for (int s = 0; s < kStates; ++s) st[s] = in[s][e];
    f(st, g[e]);
    for (int s = 0; s < kStates; ++s) out[s][e] = st[s];
  }
}

/// Fills the kernel argument of `launch` from a binding (pointers taken
/// from the slots, targets and gradient inputs; scalars from the inputs).
template <typename T, int kStates, int kScalars>
MultiTensorArgs<T, kStates, kScalars> multi_tensor_args(FusedApplyBinding& b,
                                                        const KernelContext& ctx,
                                                        const MultiTensorLaunch& launch,
                                                        const std::vector<int64_t>& first_chunk,
                                                        int first_tensor = 0) {
  MultiTensorArgs<T, kStates, kScalars> a;
  auto is_aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  a.count = launch.count;
  for (int j = 0; j < launch.count; ++j) {
    const int i = first_tensor + launch.tensor[j];  // launch indices count from the group's first
    a.block_end[j] = launch.block_end[j];
    a.size[j] = b.sizes[static_cast<size_t>(i)];
    a.first_chunk[j] = first_chunk[static_cast<size_t>(j)];
    a.grad[j] = ctx.input(b.layout.grad(i)).template data<T>();
    bool al = is_aligned(a.grad[j]);
    for (int s = 0; s < kStates; ++s) {
      a.in[s][j] = b.slot(s, i).template data<T>();
      a.out[s][j] = b.target(s, i).template data<T>();
      al = al && is_aligned(a.in[s][j]) && is_aligned(a.out[s][j]);
    }
    a.aligned[j] = al;
  }
  for (int k = 0; k < kScalars; ++k) a.scalars[k] = ctx.input(b.layout.scalar(k)).template data<T>();
  return a;
}

}  // namespace spire::kernels

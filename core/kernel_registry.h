// Kernel interface and registry. A kernel is a function of a KernelContext
// (the node, its input tensors, its outputs to fill, and the session state
// for stateful ops), registered per (op name, device type, dtype) from
// kernels/cpu and kernels/cuda. The executor looks kernels up here and never
// includes a kernel header.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <memory>
#include <typeindex>

#include "core/graph.h"
#include "core/run_context.h"
#include "core/step_stats.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/variable_resource.h"

namespace spire {

/// Per-session state that stateful kernels use; implemented by Session.
/// Every member is safe to call from several threads at once.
class SessionState {
 public:
  virtual ~SessionState() = default;
  /// The resource holding a variable node's value (undefined until first
  /// assigned). Read with read(); update under update().
  virtual VariableResource& variable(const Node* var) = 0;
  /// Reserves `count` random numbers in the stream of random node `n` and
  /// returns the stream offset of the first (successive runs draw fresh,
  /// reproducible numbers).
  virtual uint64_t advance_rng(const Node* n, uint64_t count) = 0;
  /// The per-session device copy of Const node `n`'s value: made by `make`
  /// on the first call (under the session's lock, so concurrent runs upload
  /// it once), then returned as is.
  virtual Tensor constant_cache(const Node* n, const std::function<Tensor()>& make) = 0;

  /// The session's resource of type T under `key` (communicators,
  /// collective state): created by `make` on first use when none is set
  /// (null when absent and `make` is empty). One object per (T, key) per
  /// session; concurrent callers get the same object.
  template <typename T>
  std::shared_ptr<T> resource(const std::string& key,
                              const std::function<std::shared_ptr<T>()>& make = {}) {
    std::function<std::shared_ptr<void>()> erased;
    if (make) erased = [&make]() -> std::shared_ptr<void> { return make(); };
    return std::static_pointer_cast<T>(resource_slot(std::type_index(typeid(T)), key, erased, nullptr));
  }
  /// Sets (replaces) the session's resource of type T under `key`.
  template <typename T>
  void set_resource(const std::string& key, std::shared_ptr<T> value) {
    std::shared_ptr<void> erased = std::move(value);
    resource_slot(std::type_index(typeid(T)), key, {}, &erased);
  }

 protected:
  /// The (type, key) slot: returns the current object, creating it with
  /// `make` when empty; with `replace`, stores *replace first.
  virtual std::shared_ptr<void> resource_slot(std::type_index type, const std::string& key,
                                              const std::function<std::shared_ptr<void>()>& make,
                                              const std::shared_ptr<void>* replace) = 0;
};

/// Copy-on-write rule of variable updates (AssignAdd, the fused optimizer
/// ops): a variable's buffer may be overwritten only when nothing but the
/// session's slot and the executor's copy of this very input (held while the
/// kernel runs) refers to it. Any other holder (a fetched value, another
/// variable assigned from it, an executor slot kept for a later reader, an
/// alias among the other inputs) makes the update write a new buffer, so a
/// value once read never changes. Call it only while holding the
/// variable's lock (VariableResource::update or lock_all): then no new
/// holder can appear between this check and the write.
inline bool may_update_in_place(const Tensor& slot, const Tensor& own_input) {
  const long expected = own_input.shares_buffer_with(slot) ? 2 : 1;
  if (slot.buffer_use_count() != expected) return false;
  // use_count() is a relaxed load: order the former holders' reads (which
  // released their references) before the caller's writes.
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

class KernelContext {
 public:
  KernelContext(const Node& node, const Device& device, const Tensor* inputs, Tensor* outputs,
                SessionState* state, void* device_context = nullptr,
                ThreadPool* thread_pool = nullptr)
      : node_(node), device_(device), inputs_(inputs), outputs_(outputs), state_(state),
        device_context_(device_context), thread_pool_(thread_pool) {}

  const Node& node() const { return node_; }
  const Device& device() const { return device_; }
  int num_inputs() const { return node_.num_inputs(); }
  const Tensor& input(int i) const { return inputs_[i]; }
  int num_outputs() const { return node_.num_outputs(); }
  /// Allocates output i on this kernel's device with the node's inferred dtype.
  Tensor& allocate_output(int i, const Shape& shape) {
    return allocate_output(i, node_.output_dtype(i), shape);
  }
  Tensor& allocate_output(int i, DType dtype, const Shape& shape) {
    outputs_[i] = Tensor(dtype, shape, device_);
    return outputs_[i];
  }
  /// Output `out` (dtype, shape) in the buffer of the first input of `candidates` that the
  /// executor lets this kernel overwrite (its value dies at this node and nothing else holds
  /// it) and that has exactly this dtype, shape and device; otherwise a new tensor, as
  /// allocate_output. For kernels that read each element of that input only before writing
  /// the same element of the output (elementwise ops). TensorFlow's
  /// forward_input_or_allocate_output.
  Tensor& forward_input_or_allocate_output(std::initializer_list<int> candidates, int out,
                                           DType dtype, const Shape& shape) {
    return forward_or_allocate(candidates.begin(), candidates.end(), out, dtype, shape);
  }
  Tensor& forward_input_or_allocate_output(std::initializer_list<int> candidates, int out,
                                           const Shape& shape) {
    return forward_or_allocate(candidates.begin(), candidates.end(), out, node_.output_dtype(out), shape);
  }
  Tensor& forward_input_or_allocate_output(const std::vector<int>& candidates, int out,
                                           const Shape& shape) {
    return forward_or_allocate(candidates.data(), candidates.data() + candidates.size(), out,
                               node_.output_dtype(out), shape);
  }
  /// Set by the executor: the inputs (bit i: input i) this kernel may overwrite.
  void set_forwardable_inputs(uint64_t bits) { forwardable_ = bits; }
  /// The inputs whose buffers became outputs in this call (for traces and tests).
  uint64_t forwarded_inputs() const { return forwarded_; }
  /// Sets output i to an existing tensor (e.g. identity, reshape views).
  void set_output(int i, Tensor t) { outputs_[i] = std::move(t); }
  Tensor& output(int i) { return outputs_[i]; }
  template <typename T>
  T attr(const std::string& key) const {
    return node_.attr<T>(key);
  }
  /// Session state (variables, random streams); throws when absent.
  SessionState& state() const;
  /// Backend data for the device (e.g. the CUDA per-device context).
  void* device_context() const { return device_context_; }
  /// Whether f32 GEMMs/convolutions may use TF32 (SessionOptions::allow_tf32).
  bool allow_tf32() const { return allow_tf32_; }
  void set_allow_tf32(bool on) { allow_tf32_ = on; }
  /// Whether kernels with several algorithms time them on each new shape and keep the
  /// fastest (SessionOptions::measure_conv_algorithms).
  bool measure_algorithms() const { return measure_algorithms_ && state_ != nullptr; }
  void set_measure_algorithms(bool on) { measure_algorithms_ = on; }

  /// For a multi-device node (OpDef::multi_device): the participants this
  /// call runs, each reading input p and writing output p (one participant
  /// per call when lanes run in parallel; all of them in one call in
  /// sequential mode). Empty for ordinary nodes.
  const std::vector<int>& participants() const { return *participants_; }
  void set_participants(const std::vector<int>* p) { participants_ = p ? p : &kNoParticipants; }
  /// The run this kernel belongs to (id, cancellation, wait timeout).
  const RunContext& run() const { return *run_; }
  void set_run(const RunContext* run) { run_ = run ? run : &kNoRun; }

  /// Whether this run is traced (Session::run with a StepStats): kernels may then add their
  /// own events (e.g. a collective's wait and transfer phases) with trace_event.
  bool tracing() const { return trace_ != nullptr; }
  /// The trace's clock (ns since the run started); 0 when not tracing.
  int64_t trace_now_ns() const { return trace_ ? trace_->now_ns() : 0; }
  /// Adds an event on this kernel's lane and device (no-op when not tracing).
  void trace_event(std::string name, std::string category, int64_t start_ns, int64_t end_ns,
                   std::vector<std::pair<std::string, std::string>> args = {}) const {
    if (!trace_) return;
    trace_->add({std::move(name), std::move(category), device_.to_string(), trace_lane_,
                 start_ns, end_ns, 1, std::move(args)});
  }
  void set_trace(StepTrace* trace, int lane) {
    trace_ = trace;
    trace_lane_ = lane;
  }

  /// The session's CPU thread pool (null when the kernel runs without one).
  ThreadPool* thread_pool() const { return thread_pool_; }
  /// Threads a parallel_for may use (1 without a pool).
  int num_threads() const { return thread_pool_ ? thread_pool_->num_threads() : 1; }
  /// fn(begin, end) over chunks of [0, n) on the session's pool (see
  /// ThreadPool::parallel_for); runs fn(0, n) inline when there is no pool,
  /// one thread, or n <= grain.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) const {
    if (n <= 0) return;
    if (thread_pool_ == nullptr || thread_pool_->num_threads() == 1 || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    thread_pool_->parallel_for(n, grain, ThreadPool::RangeFn(std::ref(fn)));
  }

  /// Throws spire::Error naming the op, node and input types.
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error("op ", node_.op_type(), " node '", node_.name(), "': ",
                std::forward<Args>(args)..., "; inputs: ", describe_runtime_inputs());
  }
  std::string describe_runtime_inputs() const;

 private:
  const Node& node_;
  Device device_;
  const Tensor* inputs_;
  Tensor* outputs_;
  SessionState* state_;
  void* device_context_;
  ThreadPool* thread_pool_;
  bool allow_tf32_ = false;
  bool measure_algorithms_ = false;
  static inline const std::vector<int> kNoParticipants{};
  static inline const RunContext kNoRun{};
  const std::vector<int>* participants_ = &kNoParticipants;
  const RunContext* run_ = &kNoRun;
  Tensor& forward_or_allocate(const int* first, const int* last, int out, DType dtype,
                              const Shape& shape) {
    for (const int* c = first; c != last; ++c) {
      const int i = *c;
      if (i < 0 || i >= 64 || !(forwardable_ >> i & 1)) continue;
      const Tensor& in = inputs_[i];
      if (in.dtype() != dtype || in.device() != device_ || !(in.shape() == shape)) continue;
      forwardable_ &= ~(uint64_t{1} << i);
      forwarded_ |= uint64_t{1} << i;
      outputs_[out] = in;
      return outputs_[out];
    }
    return allocate_output(out, dtype, shape);
  }

  StepTrace* trace_ = nullptr;
  int trace_lane_ = 0;
  uint64_t forwardable_ = 0;
  uint64_t forwarded_ = 0;
};

using KernelFn = std::function<void(KernelContext&)>;

class KernelRegistry {
 public:
  static KernelRegistry& global();
  /// Throws when the same (op, device, dtype) is registered twice.
  void add(const std::string& op, DeviceType device, DType dtype, KernelFn fn);
  /// Null when no kernel is registered.
  const KernelFn* find(const std::string& op, DeviceType device, DType dtype) const;
  /// All registered (op, device, dtype) keys.
  std::vector<std::tuple<std::string, DeviceType, DType>> keys() const;

 private:
  std::map<std::tuple<std::string, DeviceType, DType>, KernelFn> kernels_;
};

/// The dtype that selects a node's kernel (per its op's KernelDTypeRule).
DType kernel_dtype(const Node& node);

struct KernelRegistrar {
  KernelRegistrar(const std::string& op, DeviceType device, const KernelFn& fn,
                  std::initializer_list<DType> dtypes) {
    for (DType dt : dtypes) KernelRegistry::global().add(op, device, dt, fn);
  }
};

/// Registers `fn` for each listed dtype at load time:
///   SPIRE_REGISTER_KERNEL("Identity", DeviceType::CPU, identity_kernel, DType::F32, DType::F64);
#define SPIRE_REGISTER_KERNEL(op, device, fn, ...)                                   \
  static ::spire::KernelRegistrar SPIRE_CONCAT(spire_kernel_registrar_, __COUNTER__) \
      [[maybe_unused]](op, device, fn, {__VA_ARGS__})

}  // namespace spire

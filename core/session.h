// Session: runs a graph. run(fetches, feeds, targets) executes only the
// subgraph the fetches and targets need, freeing each intermediate after its
// last consumer. The subgraph is planned into one lane per device (see
// core/executor.h): each lane runs its device's steps in a fixed
// topological order on its own host thread, so towers on different devices
// run at the same time. Variables (as locked VariableResources), random
// streams and keyed resources (communicators) keep their state in the
// Session across runs; several threads may call run() at once. SessionRunHooks
// registered on the session add fetches before each run and read them after
// (trainer callbacks build on this).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/graph.h"
#include "core/kernel_registry.h"
#include "core/step_stats.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace spire {

/// Values fed for graph outputs (usually placeholders) in one run.
using FeedDict = std::vector<std::pair<Output, Tensor>>;

/// What a hook adds to a run.
struct SessionRunArgs {
  std::vector<Output> fetches;
  std::vector<Node*> targets;
  FeedDict feeds;
  /// Trace this run (every hook then gets the trace in SessionRunValues::step_stats).
  bool trace = false;
};

/// What a hook gets back: the values of its own fetches.
struct SessionRunValues {
  std::vector<Tensor> results;
  /// The run's trace when a hook asked for one (SessionRunArgs::trace); null otherwise.
  std::shared_ptr<const StepStats> step_stats;
};

class Session;

/// The run a hook is taking part in.
struct SessionRunContext {
  Session& session;
  const std::vector<Output>& fetches;
  const std::vector<Node*>& targets;
  /// A hook may ask the caller (e.g. a trainer) to stop after this run.
  bool stop_requested = false;
};

/// Extends every Session::run: before_run adds fetches/targets/feeds,
/// after_run reads the fetched values.
class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;
  virtual SessionRunArgs before_run(SessionRunContext& ctx) {
    (void)ctx;
    return {};
  }
  virtual void after_run(SessionRunContext& ctx, const SessionRunValues& values) {
    (void)ctx;
    (void)values;
  }
};

/// Inter-op parallelism on CPU devices (SessionOptions::inter_op).
enum class InterOp {
  kOff,       ///< each device runs one node at a time, its kernels on all its threads
  kMeasured,  ///< waves of independent nodes, each run both ways at first, then the faster
  kAlways,    ///< every wave runs its nodes at the same time (for tests)
};

struct SessionOptions {
  /// Check each kernel's output against the node's inferred dtype and shape
  /// (cheap; catches kernel bugs early).
  bool check_outputs = true;
  /// Threads the CPU kernels of this session may use in all, split evenly
  /// among the CPU devices (each at least 1; a device's ThreadPool counts
  /// its lane thread as one). 1 runs every kernel on its lane's thread;
  /// 0 = std::thread::hardware_concurrency().
  int num_threads = 1;
  /// Logical CPU devices cpu:0 .. cpu:N-1 (TensorFlow's device_count
  /// {"CPU": N}). Each has its own lane, thread pool, allocator and memory
  /// statistics, so N CPU devices behave like N GPUs. A node placed on a
  /// CPU device the session lacks is an error.
  int num_cpu_devices = 1;
  /// Kernel threads per CPU device (size num_cpu_devices), overriding the
  /// even split of num_threads when not empty.
  std::vector<int> cpu_device_threads;
  /// Runs every step on the calling thread in one fixed order (a
  /// multi-device node runs all its participants in one call) instead of
  /// one lane per device in parallel. Results are bit-identical to the
  /// parallel mode's.
  bool sequential = false;
  /// Longest a single wait of a run may block (a lane waiting for another
  /// lane's value, a collective waiting for its participants) before the
  /// run fails with a spire::Error naming what it waited for. <= 0: no limit.
  double timeout_seconds = 600;
  /// Let GEMMs and convolutions on GPUs use TF32 tensor cores for f32
  /// (faster, about 10 mantissa bits); off by default, as in PyTorch.
  bool allow_tf32 = false;
  /// Lets elementwise kernels write their output into an input's buffer when that input's
  /// value dies at the node and nothing else holds it (a variable, a constant, a fetch, a
  /// view): fewer allocations and a lower peak. The environment variable
  /// SPIRE_REUSE_INPUT_BUFFERS=0 turns it off for every session (to run a suite without it).
  bool reuse_input_buffers = true;
  /// Elementwise fusion (core/fusion.h): groups of elementwise nodes whose intermediate
  /// values nothing else reads run as one FusedElementwise node each, with results equal
  /// to the unfused graph's: on the CPU in cache-sized blocks, on a CUDA device one thread
  /// per element through the whole group (the same functors). Traces and plan_text
  /// then show the group as one step named after its last node. The environment variable
  /// SPIRE_FUSE_ELEMENTWISE=0 or 1 overrides it for every session.
  bool fuse_elementwise = true;
  /// Epilogue fusion (with fuse_elementwise on): a MatMul, Conv2D or MaxPoolGrad whose only
  /// reader is such a group (or one elementwise node: a bias add, an activation, a residual
  /// add, a ReLU's gradient mask; not an Identity alone, which computes nothing) runs with the group as its epilogue, applied to each block
  /// of its result while it is in cache (FusedMatMul, FusedConv2D, FusedMaxPoolGrad;
  /// TensorFlow's remapper does the same for the first two), with results equal to the
  /// unfused graph's. On a CUDA device the fused node writes the product to its output
  /// and runs the group over it in one kernel. SPIRE_FUSE_EPILOGUES=0 or 1 overrides it for every session.
  bool fuse_epilogues = true;
  /// Convolutions time their algorithms (CPU: direct, im2col + GEMM) on the first call of
  /// each shape and keep the fastest for the session, as cuDNN's benchmark mode (PyTorch's
  /// torch.backends.cudnn.benchmark). Off by default, as there: the choice depends on
  /// timing, so two runs may round differently. Off, a fixed rule chooses. The environment
  /// variable SPIRE_MEASURE_CONV_ALGORITHMS=0 or 1 overrides it for every session.
  bool measure_conv_algorithms = false;
  /// Inter-op parallelism: on a CPU device with several kernel threads, nodes that depend
  /// on each other in no way (a MatMul's two gradients, the gradients of a residual
  /// block's branches) are planned next to each other as waves, and a wave runs its nodes
  /// at the same time, one per thread, instead of one after another on all threads: that
  /// pays where a kernel is too small to split well. Stateful nodes, collectives, copies
  /// and nodes with control inputs never join a wave. With kMeasured, the plan times each
  /// wave both ways in its first 2 x 3 runs and keeps the faster for the session (like
  /// measure_conv_algorithms, so two sessions, and those first runs, may round
  /// differently: a kernel on one thread may sum in another order). Moving a node up may
  /// also move a read of a variable before an update of it that the graph leaves
  /// unordered with the read (either order is the graph's meaning, as in TensorFlow).
  /// The environment variable SPIRE_INTER_OP=0, 1 (kMeasured) or always overrides it for
  /// every session.
  InterOp inter_op = InterOp::kOff;
};

class ExecutionPlan;
class LaneThreads;
struct ExecutorEnv;

class Session : private SessionState {
 public:
  /// Throws spire::Error for bad options (no CPU device, a thread split of
  /// the wrong size).
  explicit Session(Graph& graph, SessionOptions options = {});
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Runs the graph with the registered hooks. Returns the fetched values
  /// (on the CPU) in order. Throws spire::Error for a missing or mismatched
  /// feed, a fetch from another graph, a cycle, a node without kernel, or a
  /// kernel failure (naming the node). With `trace`, the run records every executed node
  /// (device, lane, start, end) and kernels' own events there (see core/step_stats.h).
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds = {},
                          const std::vector<Node*>& targets = {}, StepStats* trace = nullptr);
  /// Runs only `targets` (ops run for their effect).
  void run_targets(const std::vector<Node*>& targets, const FeedDict& feeds = {}) {
    run({}, feeds, targets);
  }
  /// Same as run() but without calling the hooks.
  std::vector<Tensor> run_without_hooks(const std::vector<Output>& fetches,
                                        const FeedDict& feeds = {},
                                        const std::vector<Node*>& targets = {},
                                        StepStats* trace = nullptr);

  /// Hooks are called in registration order. The session does not own them.
  void add_hook(SessionRunHook* hook);
  void remove_hook(SessionRunHook* hook);
  /// True when a hook asked to stop in the last run().
  bool stop_requested() const { return stop_requested_.load(); }

  Graph& graph() const { return graph_; }
  const SessionOptions& options() const { return options_; }
  /// The kernel thread pool of CPU device `cpu_index` (its share of
  /// SessionOptions::num_threads).
  ThreadPool& thread_pool(int cpu_index = 0) const;

  /// A copy of a Variable node's current value (undefined when
  /// uninitialized); writing into it never changes the session.
  Tensor variable_value(const Node* var) const;
  /// Sets a Variable node's value directly (checked against its dtype/shape;
  /// the session keeps its own copy).
  void set_variable_value(const Node* var, const Tensor& value);
  bool is_initialized(const Node* var) const;

  /// The positions of the random streams (see SessionState::advance_rng):
  /// every random node that has drawn in this session (or had its offset
  /// set), with the stream offset its next run draws from, by node id. A
  /// checkpoint keeps them so that a resumed run draws what the
  /// uninterrupted one would have (PyTorch saves its RNG state likewise).
  std::vector<std::pair<const Node*, uint64_t>> rng_offsets() const;
  /// Sets the stream offset random node `n`'s next run draws from (restoring
  /// a checkpoint). Throws spire::Error when `n` is not a node of this
  /// session's graph.
  void set_rng_offset(const Node* n, uint64_t offset);

  /// The lanes of the plan a run with these fetches, feeds and targets
  /// would use: one line per lane, "<device>: <node>, <node>[participant], ..."
  /// (for tests and debugging).
  std::string plan_text(const std::vector<Output>& fetches, const FeedDict& feeds = {},
                        const std::vector<Node*>& targets = {});
  /// The inter-op waves of that plan (SessionOptions::inter_op; written "{a | b}" in
  /// plan_text): per wave its state ("measuring", "parallel" or "serial") and its nodes.
  std::vector<std::pair<std::string, std::vector<std::string>>> inter_op_waves(
      const std::vector<Output>& fetches, const FeedDict& feeds = {},
      const std::vector<Node*>& targets = {});

  /// The memory statistics of `device`'s allocator: bytes in use now and the peak since the
  /// device's allocator started or since reset_peak_memory (a step's peak: reset, run, read).
  /// They count every tensor and kernel scratch buffer on the device, of every session that
  /// uses it (as PyTorch's max_memory_allocated). Throws spire::Error for a device this build
  /// has no backend for.
  MemoryStats memory_stats(const Device& device = Device::cpu()) const;
  /// Restarts `device`'s peak from its bytes in use now.
  void reset_peak_memory(const Device& device = Device::cpu());

  /// Lane worker threads started so far (reused across runs; the caller's
  /// thread runs each run's first lane).
  int lane_thread_count() const;

  /// The session's keyed resources (communicators, collective state; see
  /// SessionState::resource).
  using SessionState::resource;
  using SessionState::set_resource;

 private:
  VariableResource& variable(const Node* var) override;
  uint64_t advance_rng(const Node* n, uint64_t count) override;
  Tensor constant_cache(const Node* n, const std::function<Tensor()>& make) override;
  std::shared_ptr<void> resource_slot(std::type_index type, const std::string& key,
                                      const std::function<std::shared_ptr<void>()>& make,
                                      const std::shared_ptr<void>* replace) override;
  std::shared_ptr<ExecutionPlan> get_plan(const std::vector<Output>& fetches,
                                          const std::vector<Node*>& targets,
                                          const FeedDict& feeds);
  const VariableResource* find_variable(const Node* var) const;
  ExecutorEnv executor_env();

  Graph& graph_;
  SessionOptions options_;
  std::vector<SessionRunHook*> hooks_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> next_run_id_{1};

  mutable std::mutex mu_;  // guards plans_, rng_, constants_, resources_
  std::map<std::string, std::shared_ptr<ExecutionPlan>> plans_;
  uint64_t plans_version_ = 0;
  std::unordered_map<const Node*, uint64_t> rng_;
  std::unordered_map<const Node*, Tensor> constants_;  // device copies of Const values
  std::map<std::pair<std::type_index, std::string>, std::shared_ptr<void>> resources_;

  mutable std::shared_mutex var_mu_;  // guards the map (each resource locks itself)
  std::unordered_map<const Node*, std::unique_ptr<VariableResource>> variables_;

  std::vector<std::unique_ptr<ThreadPool>> cpu_pools_;  // one per CPU device
  std::unique_ptr<LaneThreads> lane_threads_;
};

}  // namespace spire

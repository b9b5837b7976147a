// Session: runs a graph. run(fetches, feeds, targets) executes only the
// subgraph the fetches and targets need, in topological order, freeing each
// intermediate after its last consumer. Variables and random streams keep
// their state in the Session across runs. SessionRunHooks registered on the
// session add fetches before each run and read them after (trainer callbacks
// build on this).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "core/kernel_registry.h"
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
};

/// What a hook gets back: the values of its own fetches.
struct SessionRunValues {
  std::vector<Tensor> results;
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

struct SessionOptions {
  /// Check each kernel's output against the node's inferred dtype and shape
  /// (cheap; catches kernel bugs early).
  bool check_outputs = true;
  /// Threads the CPU kernels of this session may use (the session owns a
  /// ThreadPool of this size; the calling thread counts as one). 1 runs every
  /// kernel on the calling thread; 0 = std::thread::hardware_concurrency().
  int num_threads = 1;
  /// Let GEMMs and convolutions on GPUs use TF32 tensor cores for f32
  /// (faster, about 10 mantissa bits); off by default, as in PyTorch.
  bool allow_tf32 = false;
};

class Session : private SessionState {
 public:
  explicit Session(Graph& graph, SessionOptions options = {});
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Runs the graph with the registered hooks. Returns the fetched values
  /// (on the CPU) in order. Throws spire::Error for a missing or mismatched
  /// feed, a fetch from another graph, a cycle, a node without kernel, or a
  /// kernel failure (naming the node).
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds = {},
                          const std::vector<Node*>& targets = {});
  /// Runs only `targets` (ops run for their effect).
  void run_targets(const std::vector<Node*>& targets, const FeedDict& feeds = {}) {
    run({}, feeds, targets);
  }
  /// Same as run() but without calling the hooks.
  std::vector<Tensor> run_without_hooks(const std::vector<Output>& fetches,
                                        const FeedDict& feeds = {},
                                        const std::vector<Node*>& targets = {});

  /// Hooks are called in registration order. The session does not own them.
  void add_hook(SessionRunHook* hook);
  void remove_hook(SessionRunHook* hook);
  /// True when a hook asked to stop in the last run().
  bool stop_requested() const { return stop_requested_; }

  Graph& graph() const { return graph_; }
  /// The CPU thread pool the kernels use (SessionOptions::num_threads).
  ThreadPool& thread_pool() const { return *thread_pool_; }

  /// The current value of a Variable node (undefined when uninitialized).
  Tensor variable_value(const Node* var) const;
  /// Sets a Variable node's value directly (checked against its dtype/shape).
  void set_variable_value(const Node* var, const Tensor& value);
  bool is_initialized(const Node* var) const;

 private:
  struct Plan;
  Tensor& variable(const Node* var) override;
  uint64_t advance_rng(const Node* n, uint64_t count) override;
  Tensor constant_cache(const Node* n, const std::function<Tensor()>& make) override;
  std::shared_ptr<Plan> get_plan(const std::vector<Output>& fetches,
                                 const std::vector<Node*>& targets, const FeedDict& feeds);
  std::shared_ptr<Plan> compile(const std::vector<Output>& fetches,
                                const std::vector<Node*>& targets, const FeedDict& feeds);
  std::vector<Tensor> execute(const Plan& plan, const std::vector<Output>& fetches,
                              const FeedDict& feeds);

  Graph& graph_;
  SessionOptions options_;
  std::vector<SessionRunHook*> hooks_;
  bool stop_requested_ = false;

  mutable std::mutex mu_;  // guards plans_, variables_, rng_
  std::map<std::string, std::shared_ptr<Plan>> plans_;
  uint64_t plans_version_ = 0;
  std::unordered_map<const Node*, Tensor> variables_;
  std::unordered_map<const Node*, uint64_t> rng_;
  std::unordered_map<const Node*, Tensor> constants_;  // device copies of Const values
  std::unique_ptr<ThreadPool> thread_pool_;
};

}  // namespace spire

// The Session's executor (internal to core). ExecutionPlan::compile turns
// the subgraph a run needs into steps and lanes:
//
// - Steps follow one topological order of the subgraph (a depth-first
//   search from the fetches and targets, each node's control inputs before
//   its data inputs, so a chain of ordered nodes, e.g. gradient buckets,
//   comes in the chain's order). A node is one step on its device;
//   a multi-device node (OpDef::multi_device, e.g. AllReduce) is one step
//   per participant, each on its participant's device.
// - Lanes: one per device, holding that device's steps in the global order.
//   Each lane runs on its own host thread (the caller runs the first; the
//   others run on the session's LaneThreads), so steps of different devices
//   run at the same time while the order within a device stays fixed.
// - Cross-lane edges (a value or control dependency produced in another
//   lane) wait for the producer's completion flag; a producer on a GPU also
//   records a CUDA event that the consumer's stream waits for (or the host,
//   for a CPU consumer): never a device-wide synchronize. Because every lane
//   follows the same global order, waits can never form a cycle, and the
//   participants of a collective always meet.
// - Values live in slots. A slot read only in its producer's lane is freed
//   after its last reader there; a slot read by several lanes is counted
//   down by its readers and freed by the last.
// - Errors: the first failing step records its error (naming node and op)
//   and cancels the run; every other lane's waits (also inside collectives)
//   then stop, all lanes return, and run() throws that one error.
// - Passes before the steps are made: elementwise fusion (core/fusion.h,
//   SessionOptions::fuse_elementwise) replaces groups of elementwise nodes by
//   one FusedElementwise node each; buffer reuse (SessionOptions::
//   reuse_input_buffers) marks the inputs whose values die at a step, which
//   its kernel may then overwrite (KernelContext::forward_input_or_allocate_output).
// - Inter-op waves (SessionOptions::inter_op): independent CPU nodes of similar work
//   estimate (OpDef::cost) are moved next to each other (core/step_order.h) and run at
//   the same time as one parallel_for over the device's pool, one node per chunk; their
//   kernels' own parallel_for calls then run inline. Every member loads its inputs before
//   any decides which it may overwrite. A member's cross-lane waits happen before the wave.
// - Sequential mode (SessionOptions::sequential) puts every step in one lane
//   on the caller's thread and runs each multi-device node as one step with
//   all participants; results are bit-identical to the parallel mode where
//   the graph orders every read of a variable against its updates (as a
//   TF1 graph must: a read and an unordered update may run in either order,
//   in one lane as in several).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/fusion.h"
#include "core/graph.h"
#include "core/kernel_registry.h"
#include "core/session.h"
#include "core/step_stats.h"

namespace spire {

struct DeviceBackend;

/// What the Session lends its executor.
struct ExecutorEnv {
  SessionState* state = nullptr;
  const SessionOptions* options = nullptr;
  /// The resource of a variable node (created when missing).
  std::function<VariableResource*(const Node*)> variable;
  /// One kernel thread pool per CPU device.
  const std::vector<std::unique_ptr<ThreadPool>>* cpu_pools = nullptr;
  LaneThreads* lane_threads = nullptr;
};

class ExecutionPlan {
 public:
  /// Plans a run; throws spire::Error for a cycle, an unfed placeholder, a
  /// node without kernel, or a node on a device the session does not have.
  static std::shared_ptr<ExecutionPlan> compile(Graph& graph, const std::vector<Output>& fetches,
                                                const std::vector<Node*>& targets,
                                                const FeedDict& feeds, const ExecutorEnv& env);

  /// Executes the plan. `feeds` must have the keys the plan was compiled
  /// for. Returns the fetched values on the CPU, never aliasing session
  /// state or the caller's fed tensors.
  /// With `trace`, records every step's start and end (and kernels' own events) there.
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds,
                          uint64_t run_id, const ExecutorEnv& env,
                          StepTrace* trace = nullptr) const;

  /// The devices of the lanes, in lane order.
  std::vector<Device> lane_devices() const;
  /// One line per lane: "cpu:1: a, b, allreduce[1], ..." (for tests and debugging).
  std::string to_text() const;

 private:
  struct Step {
    Node* node = nullptr;
    const KernelFn* kernel = nullptr;
    Device device;
    void* device_context = nullptr;          // the backend's per-device context (null on CPU)
    const DeviceBackend* backend = nullptr;  // null on CPU
    ThreadPool* pool = nullptr;              // CPU steps: the device's kernel pool
    int lane = 0;
    bool transfer_inputs = true;  // false for Copy, whose kernel moves its input itself
    const std::vector<Output>* sources = nullptr;  // the data inputs: node's own, or a fused group's
    std::vector<int> input_slots;                // per node input; -1: not read by this step
    std::vector<VariableResource*> ref_inputs;   // per node input: the variable read at run time
    int first_output_slot = 0;
    std::vector<int> outputs;       // output indices this step defines
    std::vector<int> participants;  // multi-device steps: the participants this step runs
    std::vector<int> waits;         // steps of other lanes that must finish first
    bool signals = false;           // steps of other lanes wait for this one
    std::vector<int> release;       // slots freed after this step (read in one lane only)
    std::vector<int> count_down;    // slots read by several lanes: counted down after this step
    // Inputs (bit i: input i) whose value dies at this step: its slot is released here and
    // read by no other input of this step, so the kernel may write an output into it when, at
    // run time, nothing else holds the buffer (KernelContext::forward_input_or_allocate_output).
    uint64_t forwardable = 0;
    int wave = -1;  // the inter-op wave this step belongs to (-1: none)
  };
  struct RunState;
  // Inter-op parallelism (SessionOptions::inter_op): steps of one CPU lane, consecutive,
  // independent of each other, that may run at the same time, one per kernel thread (their
  // kernels then run single-threaded). With InterOp::kMeasured a wave runs both ways in
  // the plan's first runs (alternating, kTuningRuns each) and then keeps the faster.
  struct Wave {
    std::vector<int> steps;
  };
  struct WaveTiming {
    int serial_runs = 0;
    int parallel_runs = 0;
    int64_t best_serial_ns = 0;
    int64_t best_parallel_ns = 0;
  };
  enum class WaveChoice : int8_t { kMeasuring, kParallel, kSerial };
  static constexpr int kTuningRuns = 3;

  void run_lane(int lane, RunState& rs) const;
  void run_step(const Step& st, RunState& rs, std::vector<Tensor>& inputs, int lane) const;
  // run_step's phases: a wave loads every member's inputs before it decides what its
  // kernels may overwrite, then runs the kernels, then releases.
  void load_inputs(const Step& st, RunState& rs, std::vector<Tensor>& inputs) const;
  uint64_t forwardable_inputs(const Step& st, const RunState& rs,
                              const std::vector<Tensor>& inputs) const;
  void execute(const Step& st, RunState& rs, std::vector<Tensor>& inputs, uint64_t forwardable,
               int lane, int64_t trace_start, const std::string& wave_arg) const;
  void release_inputs(const Step& st, RunState& rs, std::vector<Tensor>& inputs) const;
  // Runs wave `w` (its members' cross-lane waits first); `inputs` holds one vector per member.
  void run_wave(int w, RunState& rs, std::vector<std::vector<Tensor>>& inputs, int lane) const;
  void wait_for(const Step& st, int producer, RunState& rs) const;
  // Marks step k done for the lanes waiting for it (after recording its GPU event).
  void signal(int k, RunState& rs) const;

  // Elementwise fusion (core/fusion.h): the plan's own graph of FusedElementwise nodes, and
  // the groups they replace.
  std::unique_ptr<Graph> fused_graph_;
  std::vector<FusedGroup> fused_groups_;
  std::vector<Step> steps_;
  std::vector<std::vector<int>> lanes_;  // step indices per lane, in global order
  std::vector<Device> lane_devices_;
  int num_slots_ = 0;
  int max_inputs_ = 0;
  std::vector<int> fetch_slots_;
  std::map<Output, int> feed_slots_;
  std::vector<int> reader_counts_;  // per slot: readers to count down (0: freed statically)
  bool has_counted_slots_ = false;
  bool has_signals_ = false;
  std::vector<Wave> waves_;
  size_t max_wave_ = 0;
  // Per wave: the choice (read without the lock once made) and its samples (under tune_mu_).
  std::unique_ptr<std::atomic<WaveChoice>[]> wave_choice_;
  mutable std::mutex tune_mu_;
  mutable std::vector<WaveTiming> wave_timing_;

 public:
  /// Per inter-op wave: whether it runs its steps at the same time ("parallel"), one
  /// after another ("serial") or is still being measured ("measuring"), with its members'
  /// names (for tests and benchmarks).
  std::vector<std::pair<std::string, std::vector<std::string>>> wave_choices() const;
};

}  // namespace spire

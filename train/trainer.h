// The trainer stack (tensorpack's Trainer -> TowerTrainer ->
// SingleCostTrainer -> SimpleTrainer / NoOpTrainer). Trainer runs "anything
// that runs in a loop": it owns the session, the callbacks and monitors,
// and the epoch/step loop; run_step() is one iteration (by default one run
// of train_op through the hooked session). Multi-device and MPI trainers
// subclass SingleCostTrainer and override _setup_graph; the MPI trainers,
// one process of several each, also implement MultiProcessTrainer
// (train/multi_process_trainer.h), whose hooks Trainer calls.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/session.h"
#include "layers/optimizers.h"
#include "layers/tower.h"
#include "train/callback.h"
#include "train/input_source.h"
#include "train/monitor.h"
#include "train/multi_process_trainer.h"
#include "train/session_init.h"

namespace spire {

/// Creates the session of a trainer (tensorpack's session creator). The
/// default makes a Session and runs global_variables_initializer().
using SessionCreator = std::function<std::unique_ptr<Session>(Graph&)>;
SessionCreator new_session_creator();
/// The same with options for the Session (e.g. SessionOptions::num_threads
/// for the CPU kernels).
SessionCreator new_session_creator(SessionOptions options);

/// The loop counters of a trainer (tensorpack's TrainLoop).
struct TrainLoop {
  int starting_epoch = 1;
  int max_epoch = 99999;
  int64_t steps_per_epoch = 0;
  int epoch_num = 0;        // the current (or last finished) epoch, 1-based
  int64_t global_step = 0;  // hooked runs so far, across resumes
  int64_t local_step = -1;  // step within the current epoch, 0-based
};

/// Facade running the trainer's session WITHOUT callbacks' hooks (tensorpack's trainer.sess).
class PlainSession {
 public:
  explicit PlainSession(Session& s) : s_(s) {}
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds = {},
                          const std::vector<Node*>& targets = {}) {
    return s_.run_without_hooks(fetches, feeds, targets);
  }
  Session& session() const { return s_; }

 private:
  Session& s_;
};

/// Facade running the trainer's session WITH every callback's
/// before_run/after_run (tensorpack's trainer.hooked_sess).
class HookedSession {
 public:
  explicit HookedSession(Session& s) : s_(s) {}
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedDict& feeds = {},
                          const std::vector<Node*>& targets = {}) {
    return s_.run(fetches, feeds, targets);
  }
  Session& session() const { return s_; }

 private:
  Session& s_;
};

class Trainer {
 public:
  Trainer();
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// The graph this trainer builds into and trains (its own by default).
  Graph& graph() const { return *graph_; }
  const TrainLoop& loop() const { return loop_; }
  int epoch_num() const { return loop_.epoch_num; }
  /// Hooked runs so far, across resumes: the restored "global_step"
  /// variable once initialize() ran, then one more per hooked run.
  int64_t global_step() const { return loop_.global_step; }
  int64_t local_step() const { return loop_.local_step; }
  int64_t steps_per_epoch() const { return loop_.steps_per_epoch; }
  int starting_epoch() const { return loop_.starting_epoch; }
  int max_epoch() const { return loop_.max_epoch; }

  /// False on non-chief processes of distributed training.
  bool is_chief() const { return is_chief_; }
  /// The log directory monitors and savers write to ("" = none; a process
  /// that is not the chief writes none: setup_callbacks clears it there).
  const std::string& logdir() const { return logdir_; }
  /// The log directory the job was given, on every process (also where logdir() is cleared):
  /// for files each process writes under its own name (Timeline's timeline-rank<r>.json).
  const std::string& job_logdir() const { return job_logdir_; }
  void set_logdir(const std::string& dir) { logdir_ = dir; }

  /// Registers a callback (before training only). On non-chief processes
  /// chief-only callbacks are skipped with a log line.
  void register_callback(CallbackPtr cb);
  /// Registers callbacks and monitors (the Monitors group becomes a callback
  /// too). On a process that is not the chief the log directory is cleared
  /// first (the chief alone writes it).
  void setup_callbacks(const std::vector<CallbackPtr>& callbacks,
                       const std::vector<MonitorPtr>& monitors);
  /// Creates the session (with `creator`, or when it is empty with
  /// new_session_creator(default_session_options())), runs the session
  /// initializer (chief only), and finalizes the graph.
  void initialize(SessionCreator creator, std::shared_ptr<SessionInit> init);
  /// The session options of the default session creator: SessionOptions{}
  /// here; multi-device trainers add the CPU devices their towers use.
  virtual SessionOptions default_session_options() const { return {}; }
  /// The epoch/step loop; StopTraining ends it cleanly, after_train always runs.
  void main_loop(int64_t steps_per_epoch, int starting_epoch, int max_epoch);
  /// One training iteration: by default runs train_op through the hooked session.
  virtual void run_step();
  /// setup_callbacks + initialize + main_loop.
  void train(const std::vector<CallbackPtr>& callbacks, const std::vector<MonitorPtr>& monitors,
             SessionCreator creator, std::shared_ptr<SessionInit> init, int64_t steps_per_epoch,
             int starting_epoch = 1, int max_epoch = 99999);
  /// train() with tensorpack's defaults: extra_callbacks = DEFAULT_CALLBACKS,
  /// monitors = DEFAULT_MONITORS, a new session, no initializer.
  void train_with_defaults(std::vector<CallbackPtr> callbacks = {},
                           std::vector<MonitorPtr> monitors = {}, SessionCreator creator = {},
                           std::shared_ptr<SessionInit> init = {}, int64_t steps_per_epoch = 0,
                           int starting_epoch = 1, int max_epoch = 99999,
                           const std::vector<CallbackPtr>* extra_callbacks = nullptr);

  /// The session without hooks / with the callbacks' hooks.
  PlainSession sess() const;
  HookedSession hooked_sess() const;
  Session& session() const;

 protected:
  /// Called by initialize() right after the session is created, before the
  /// session initializer: subclasses check or prepare the session (e.g. that
  /// their devices exist).
  virtual void on_session_created(Session& session) { (void)session; }
  /// Shares of the graph and session (for objects that must keep them alive).
  std::shared_ptr<Graph> shared_graph() const { return graph_; }
  std::shared_ptr<Session> shared_session() const;

 public:
  Monitors& monitors() const;

  /// The op run_step runs (set by setup_graph; may be replaced).
  Node* train_op = nullptr;

 protected:
  bool is_chief_ = true;

 private:
  // Shared with predictors, which keep the graph and session they run alive
  // (a predictor may outlive its trainer).
  std::shared_ptr<Graph> graph_;
  std::string logdir_;
  std::string job_logdir_;  // logdir_ as given, before a non-chief process clears it
  TrainLoop loop_;
  std::vector<CallbackPtr> callbacks_;
  std::shared_ptr<Callbacks> group_;
  std::shared_ptr<Monitors> monitors_;
  std::shared_ptr<Session> session_;
  std::unique_ptr<SessionRunHook> hook_;
  bool setup_done_ = false;
  /// This trainer as a MultiProcessTrainer, or null (a single-process one).
  MultiProcessTrainer* multi_process();
  class StepCounter;
  friend class StepCounter;
  StepCounter* step_counter_ = nullptr;  // registered by setup_callbacks (held by callbacks_)
};

/// A trainer with a tower function (set once): towers() are the calls
/// made for training; get_predictor builds an inference tower sharing the
/// trained variables.
class TowerTrainer : public Trainer {
 public:
  void set_tower_func(TowerFunc tower_func);
  const TowerFunc& tower_func() const;
  const std::vector<std::shared_ptr<TowerHandle>>& towers() const;
  /// A callable running an inference tower ("InferenceTower") on the
  /// trainer's session: inputs by signature name, outputs by tensor name
  /// relative to the tower. It may run on another thread while training
  /// goes on (it reads consistent snapshots of the variables), and it owns
  /// a share of the graph and session, so it stays valid after the trainer
  /// is gone.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> get_predictor(
      const std::vector<std::string>& input_names, const std::vector<std::string>& output_names);
  /// The same on `device` (tensorpack's get_predictor(device=k)): the
  /// inference tower "tower-pred-<device>" is built on that device and
  /// reads the variables of the training tower on that device (its
  /// replicas, for replicated trainers), else the main tower's.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> get_predictor(
      const std::vector<std::string>& input_names, const std::vector<std::string>& output_names,
      const Device& device);

  /// Variable scope of the training tower running on `device` whose
  /// variables an inference tower there should read ("" = the main
  /// tower's). Replicated trainers return "tower<k>".
  virtual std::string variable_scope_on(const Device& device) const {
    (void)device;
    return "";
  }

 protected:
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> make_predictor(
      const std::string& tower_name, const std::optional<Device>& device,
      const std::vector<std::string>& input_names, const std::vector<std::string>& output_names);

  std::unique_ptr<TowerFunc> tower_func_;
};

/// Builds the cost of one tower from its input tensors.
using GetCostFn = std::function<Output(const std::vector<Output>& inputs)>;
using GetOptFn = std::function<std::shared_ptr<Optimizer>()>;

class SingleCostTrainer : public TowerTrainer {
 public:
  /// The devices of the training towers, one per tower (empty: one tower
  /// on the graph's current device, as SimpleTrainer). The input source is
  /// set up with them, so each tower gets its own batch.
  virtual std::vector<Device> tower_devices() const { return {}; }
  /// {index, count}: this process trains on shard `index` of `count` of the
  /// data ({0, 1}: all of it). launch_train_with_config wraps a dataflow in
  /// ShardData accordingly (distributed trainers: one shard per process).
  virtual std::pair<int, int> data_shard() const { return {0, 1}; }

  /// Sets up the input source, the tower function from get_cost_fn (the
  /// cost must be a scalar) and the training op; registers the callbacks
  /// the input and the trainer need.
  void setup_graph(const std::vector<InputDesc>& input_signature,
                   std::shared_ptr<InputSource> input, GetCostFn get_cost_fn,
                   GetOptFn get_opt_fn);

 protected:
  /// Builds train_op; returns callbacks to register. Subclasses (multi-GPU,
  /// MPI) override this.
  virtual std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) = 0;
  /// Calls the tower function on the input's tensors of the current
  /// TowerContext's tower (its index), checks the cost is a scalar, and
  /// computes gradients of the cost w.r.t. `var_list` (default: every
  /// trainable variable).
  GradsAndVars compute_tower_gradients(InputSource& input, Optimizer& opt,
                                       const std::vector<Output>& var_list = {});
  /// The first half of compute_tower_gradients: calls the tower function on
  /// the current tower's inputs and returns its checked scalar cost.
  Output build_tower_cost(InputSource& input);

  std::shared_ptr<InputSource> input_;
  std::shared_ptr<Optimizer> optimizer_;
};

/// Single device: one training tower, train_op = apply_gradients.
class SimpleTrainer : public SingleCostTrainer {
 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;
};

/// Builds the tower but no training op (run_step does nothing unless
/// overridden or train_op is set): for "train" loops of inference or custom steps.
class NoOpTrainer : public SimpleTrainer {
 public:
  void run_step() override;

 protected:
  std::vector<CallbackPtr> _setup_graph(InputSource& input, GetOptFn get_opt_fn) override;
};

}  // namespace spire

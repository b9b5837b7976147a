// General-purpose built-in callbacks (tensorpack's callbacks/trigger.py,
// graph.py, misc.py and prof.py): PeriodicTrigger (run a callback's
// trigger() on a step/epoch schedule), RunOp / RunUpdateOps (run graph ops
// before training, as a trigger or with every step), EstimatedTimeLeft and
// ThroughputTracker; plus small helpers the other callbacks share (tensor
// lookup in the main training tower, tensor-name normalization,
// humanize_time_delta).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <string>

#include "layers/variables.h"
#include "train/callback.h"

namespace spire {

/// "cost:0" -> "cost", "fc/out:1" -> "fc/out" (tensorpack's get_op_tensor_name()[0]).
std::string op_name_of(const std::string& tensor_name);

/// A tensor by name, looked up first in the trainer's main training tower
/// (when the trainer is a TowerTrainer with towers; relative names work),
/// then in the whole graph (tensorpack's get_tensors_maybe_in_tower).
/// Throws spire::Error when not found.
Output get_tensor_maybe_in_tower(Trainer& trainer, const std::string& name);

/// "1 hour 2 minutes 3 seconds", "4.5 seconds" (tensorpack's humanize_time_delta).
std::string humanize_time_delta(double seconds);

/// Wraps a callback and forwards every hook to it (tensorpack's
/// ProxyCallback); chief_only follows the wrapped callback.
class ProxyCallback : public Callback {
 public:
  explicit ProxyCallback(CallbackPtr cb);
  const CallbackPtr& wrapped() const { return cb_; }
  std::string name() const override { return "Proxy-" + cb_->name(); }

 protected:
  void _setup_graph() override;
  void _before_train() override { cb_->before_train(); }
  void _before_epoch() override { cb_->before_epoch(); }
  void _after_epoch() override { cb_->after_epoch(); }
  SessionRunArgs _before_run(SessionRunContext& ctx) override { return cb_->before_run(ctx); }
  void _after_run(SessionRunContext& ctx, const SessionRunValues& v) override {
    cb_->after_run(ctx, v);
  }
  void _trigger_step() override { cb_->trigger_step(); }
  void _trigger_epoch() override { cb_->trigger_epoch(); }
  void _trigger() override { cb_->trigger(); }
  void _after_train() override { cb_->after_train(); }

  CallbackPtr cb_;
};

/// Calls the wrapped callback's trigger() every `every_k_steps` global steps
/// (checked after each step: global_step % k == 0) and/or every
/// `every_k_epochs` epochs (epoch_num % k == 0, after the epoch); 0 disables
/// a schedule (both 0 is an error). With `before_train`, also triggers once
/// at the start of training. All other hooks (setup_graph, before_train,
/// before/after_run, trigger_step, after_train, ...) are forwarded; the
/// wrapped callback's own trigger_epoch is NOT called (tensorpack).
/// Unlike tensorpack (every_k_epochs=None), every_k_epochs defaults to 1:
/// pass 0 for a step-only schedule.
class PeriodicTrigger : public ProxyCallback {
 public:
  explicit PeriodicTrigger(CallbackPtr cb, int64_t every_k_steps = 0, int every_k_epochs = 1,
                           bool before_train = false);
  std::string name() const override { return "PeriodicTrigger-" + cb_->name(); }

 protected:
  void _before_train() override;
  void _trigger_step() override;
  void _trigger_epoch() override;

 private:
  int64_t step_k_;
  int epoch_k_;
  bool do_before_train_;
};

/// Runs an op (built by `op_builder` in setup_graph, in the trainer's graph)
/// through the plain session before training (`run_before`), on each
/// trigger (`run_as_trigger`, every epoch by default), and/or as a target of
/// every hooked run (`run_step`). Not chief-only.
class RunOp : public Callback {
 public:
  using OpBuilder = std::function<Node*()>;
  explicit RunOp(OpBuilder op_builder, bool run_before = true, bool run_as_trigger = true,
                 bool run_step = false, bool verbose = false);
  /// The op (after setup_graph).
  Node* op() const { return op_; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;
  SessionRunArgs _before_run(SessionRunContext&) override;

 private:
  void run_now();
  OpBuilder builder_;
  bool run_before_, run_as_trigger_, run_step_, verbose_;
  Node* op_ = nullptr;
};

/// Runs the ops of `collection` (UPDATE_OPS: e.g. BatchNorm's moving
/// average updates) with every training step (RunOp with run_step only).
class RunUpdateOps : public RunOp {
 public:
  explicit RunUpdateOps(const std::string& collection = GraphKeys::UPDATE_OPS);
  std::string name() const override { return "RunUpdateOps"; }
};

/// Logs "Estimated Time Left: ..." after each epoch: (max_epoch - epoch_num)
/// times the median (or mean) duration of the last `last_k_epochs` epochs
/// (nothing after the last epoch). Chief-only.
class EstimatedTimeLeft : public Callback {
 public:
  explicit EstimatedTimeLeft(int last_k_epochs = 5, bool median = true);
  /// The last estimate in seconds (-1 before the first epoch ends).
  double last_estimate() const { return last_estimate_; }

 protected:
  void _before_train() override;
  void _trigger_epoch() override;

 private:
  size_t last_k_;
  bool median_;
  std::deque<double> times_;
  std::chrono::steady_clock::time_point last_time_;
  double last_estimate_ = -1;
};

/// Puts "Throughput (samples/sec)" (steps/sec times `samples_per_step`), or
/// "Throughput (steps/sec)" when samples_per_step is 0, at each epoch;
/// the time counted is the time inside epochs (between before_epoch and
/// after_epoch). Not chief-only.
class ThroughputTracker : public Callback {
 public:
  explicit ThroughputTracker(int64_t samples_per_step = 0);

 protected:
  void _before_train() override;
  void _before_epoch() override;
  void _after_epoch() override;
  void _trigger_epoch() override;

 private:
  int64_t samples_per_step_;
  int64_t last_step_ = 0;
  double seconds_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
};

}  // namespace spire

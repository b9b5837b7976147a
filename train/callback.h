// Callbacks (tensorpack's Callback): hooks the trainer calls around
// training, epochs and steps. Subclasses override the protected _hooks;
// the trainer calls the public ones. Callbacks in a group run in
// registration order, and an exception from one is reported with its name.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/session.h"

namespace spire {

class Trainer;

/// Thrown from anywhere in training (a callback, run_step) to end training
/// cleanly: after_train still runs.
class StopTraining : public std::runtime_error {
 public:
  explicit StopTraining(const std::string& why = "StopTraining") : std::runtime_error(why) {}
};

class Callback {
 public:
  virtual ~Callback() = default;

  // Called by the trainer, in this order: setup_graph (before the graph is
  // finalized), before_train, then per epoch: before_epoch, per step
  // (before_run, after_run around the hooked run, then trigger_step),
  // after_epoch, trigger_epoch; finally after_train.
  void setup_graph(Trainer& trainer);
  void before_train() { _before_train(); }
  void before_epoch() { _before_epoch(); }
  void after_epoch() { _after_epoch(); }
  SessionRunArgs before_run(SessionRunContext& ctx) { return _before_run(ctx); }
  void after_run(SessionRunContext& ctx, const SessionRunValues& values) { _after_run(ctx, values); }
  void trigger_step() { _trigger_step(); }
  /// Once per epoch, after after_epoch; by default calls trigger().
  void trigger_epoch() { _trigger_epoch(); }
  /// The callback's periodic action (PeriodicTrigger calls it on its schedule).
  void trigger() { _trigger(); }
  void after_train() { _after_train(); }

  /// Chief-only callbacks are skipped on non-chief processes (default true, as tensorpack).
  bool chief_only() const { return chief_only_; }
  void set_chief_only(bool v) { chief_only_ = v; }
  /// Name for logs and error messages (the class name by default).
  virtual std::string name() const;
  /// The trainer this callback was set up with; throws before setup_graph.
  Trainer& trainer() const;

 protected:
  virtual void _setup_graph() {}
  virtual void _before_train() {}
  virtual void _before_epoch() {}
  virtual void _after_epoch() {}
  virtual SessionRunArgs _before_run(SessionRunContext&) { return {}; }
  virtual void _after_run(SessionRunContext&, const SessionRunValues&) {}
  virtual void _trigger_step() {}
  virtual void _trigger_epoch() { _trigger(); }
  virtual void _trigger() {}
  virtual void _after_train() {}

  bool chief_only_ = true;
  /// The trainer this callback was set up with, or null before setup_graph.
  Trainer* trainer_or_null() const { return trainer_; }

 private:
  Trainer* trainer_ = nullptr;
};

using CallbackPtr = std::shared_ptr<Callback>;

/// A group of callbacks run in order; errors are rethrown as spire::Error
/// prefixed with the failing callback's name (StopTraining passes through).
class Callbacks : public Callback {
 public:
  explicit Callbacks(std::vector<CallbackPtr> cbs) : cbs_(std::move(cbs)) { chief_only_ = false; }
  const std::vector<CallbackPtr>& callbacks() const { return cbs_; }
  std::string name() const override { return "Callbacks"; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _before_epoch() override;
  void _after_epoch() override;
  SessionRunArgs _before_run(SessionRunContext& ctx) override;
  void _after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  void _trigger_step() override;
  void _trigger_epoch() override;
  void _after_train() override;

 private:
  template <typename F>
  void each(const char* hook, F&& f);
  std::vector<CallbackPtr> cbs_;
  std::vector<std::pair<size_t, size_t>> ranges_;  // per callback: its fetches in the merged run
};

}  // namespace spire

// Input sources (tensorpack's InputSource): how a trainer's towers get their
// input tensors. An input source serves one or more training towers, each
// on its own device; every tower takes its own full batch (total batch per
// step = batch x towers), and a step consumes every tower's input or none.
// FeedInput feeds one datapoint of a DataFlow per tower per step to that
// tower's placeholders through the hooked session; QueueInput does the same
// from a bounded queue that a background thread keeps full, so a step does
// not wait for data when the data is fast enough; StagingInput keeps the
// next step's datapoints already copied to each tower's device
// (tensorpack's StagingInput); DummyConstantInput gives constant random
// tensors (for benchmarks).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "layers/tower.h"
#include "train/callback.h"

namespace spire {

class DataFlow;

class InputSource {
 public:
  virtual ~InputSource() = default;
  /// Creates the input tensors for `signature` in `g`, one set per
  /// training tower: `tower_devices` are the towers' devices (empty: one
  /// tower on the graph's current device). Returns the callbacks the
  /// trainer must register. Called once.
  std::vector<CallbackPtr> setup(const std::vector<InputDesc>& signature, Graph& g,
                                 const std::vector<Device>& tower_devices = {});
  bool setup_done() const { return setup_done_; }
  /// The number of towers served (valid after setup).
  int num_towers() const { return std::max<int>(1, static_cast<int>(tower_devices_.size())); }
  /// The towers' devices given to setup (empty: one tower, current device).
  const std::vector<Device>& tower_devices() const { return tower_devices_; }
  /// The tensors training tower `tower` takes as inputs (valid after setup).
  virtual std::vector<Output> get_input_tensors(int tower = 0) const = 0;
  /// Datapoints per epoch (the default steps_per_epoch); throws when unknown.
  virtual int64_t size() const;
  virtual void reset_state() {}

 protected:
  virtual std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) = 0;
  /// Checks 0 <= tower < num_towers().
  void check_tower(int tower) const;

  std::vector<Device> tower_devices_;

 private:
  bool setup_done_ = false;
};

/// Feeds one datapoint of `df` per tower per hooked run (its components in
/// signature order) to that tower's placeholders: tower 0's are named as
/// the signature ("x"), tower k's "input<k>/x", each on its tower's device.
/// With `infinite`, a finished epoch of `df` starts the next one (also in
/// the middle of a step's datapoints); otherwise the end of `df` stops
/// training without running the partial step. A resumed run continues the
/// data where the interrupted one was (reset_state_at_step).
class FeedInput : public InputSource {
 public:
  explicit FeedInput(std::shared_ptr<DataFlow> df, bool infinite = true);
  ~FeedInput() override;
  std::vector<Output> get_input_tensors(int tower = 0) const override;
  int64_t size() const override;
  void reset_state() override { reset_state_at_step(0); }
  /// reset_state() for a run that starts at `global_step` (its input
  /// callback passes the trainer's, restored from a checkpoint on resume):
  /// the first time, with global_step > 0, the stream of `df`'s passes
  /// continues global_step x towers datapoints in, where the uninterrupted
  /// run's step `global_step` read. Whole passes are skipped with
  /// DataFlow::set_next_epoch when `df` has a size and can_set_next_epoch(),
  /// the rest are read and dropped.
  void reset_state_at_step(int64_t global_step);

 protected:
  std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) override;
  /// The next step's datapoints, one per tower; false (and nothing taken
  /// from a finished non-infinite dataflow is kept) at the end of the data.
  bool next_step(std::vector<std::vector<Tensor>>& step);
  /// Feeds of one step's datapoints (checked against the signature).
  std::vector<std::pair<Output, Tensor>> feeds_of(std::vector<std::vector<Tensor>>& step) const;

  std::shared_ptr<DataFlow> df_;
  bool infinite_;
  bool state_reset_ = false;
  std::vector<std::vector<Output>> placeholders_;  // [tower][component]
  class FeedCallback;
  friend class StagingInput;
};

/// FeedInput from a bounded prefetch queue (`queue_size` datapoints) that a
/// background thread fills.
class QueueInput : public FeedInput {
 public:
  explicit QueueInput(std::shared_ptr<DataFlow> df, int queue_size = 50);
};

/// Wraps a FeedInput (or QueueInput): a background thread takes each
/// step's datapoints (one per tower) from it and copies them to the towers'
/// devices ahead of time, keeping up to `nr_stage` steps staged
/// (tensorpack's StagingInput; on GPUs the host-to-device copies leave the
/// step's critical path). A step takes all towers' staged inputs at once.
/// launch_train_with_config uses it for trainers with several towers.
/// Waiting for a staged step is bounded by `timeout_seconds`, and so is
/// stopping the thread at the end of training (a thread stuck inside the
/// dataflow is then left behind with an error log, never waited on forever).
class StagingInput : public InputSource {
 public:
  explicit StagingInput(std::shared_ptr<FeedInput> input, int nr_stage = 1,
                        double timeout_seconds = 600);
  ~StagingInput() override;
  std::vector<Output> get_input_tensors(int tower = 0) const override;
  int64_t size() const override { return input_->size(); }
  void reset_state() override { input_->reset_state(); }
  /// Steps staged so far (for tests and benchmarks).
  int64_t staged_steps() const;

 protected:
  std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) override;

 private:
  class Stager;
  class StagingCallback;
  std::shared_ptr<FeedInput> input_;
  int nr_stage_;
  double timeout_seconds_;
  std::shared_ptr<Stager> stager_;
};

/// Constant tensors of the signature (unknown dims taken from `shapes`),
/// built once; for measuring training speed without data loading.
class DummyConstantInput : public InputSource {
 public:
  explicit DummyConstantInput(std::vector<Shape> shapes);
  std::vector<Output> get_input_tensors(int tower = 0) const override;

 protected:
  std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) override;

 private:
  std::vector<Shape> shapes_;
  std::vector<std::vector<Output>> tensors_;  // [tower][component]
};

}  // namespace spire

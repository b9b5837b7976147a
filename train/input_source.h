// Input sources (tensorpack's InputSource): how a trainer's tower gets its
// input tensors. FeedInput feeds datapoints of a DataFlow to placeholders
// through the hooked session; QueueInput does the same from a bounded queue
// that a background thread keeps full, so a step does not wait for data
// when the data is fast enough; DummyConstantInput gives constant random
// tensors (for benchmarks).
#pragma once

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
  /// Creates the input tensors for `signature` in `g`; returns the
  /// callbacks the trainer must register. Called once.
  std::vector<CallbackPtr> setup(const std::vector<InputDesc>& signature, Graph& g);
  bool setup_done() const { return setup_done_; }
  /// The tensors a tower takes as inputs (valid after setup).
  virtual std::vector<Output> get_input_tensors() const = 0;
  /// Datapoints per epoch (the default steps_per_epoch); throws when unknown.
  virtual int64_t size() const;
  virtual void reset_state() {}

 protected:
  virtual std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) = 0;

 private:
  bool setup_done_ = false;
};

/// Feeds one datapoint of `df` per hooked run (its components in signature order).
class FeedInput : public InputSource {
 public:
  explicit FeedInput(std::shared_ptr<DataFlow> df, bool infinite = true);
  ~FeedInput() override;
  std::vector<Output> get_input_tensors() const override { return placeholders_; }
  int64_t size() const override;
  void reset_state() override;

 protected:
  std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) override;
  std::shared_ptr<DataFlow> df_;
  bool infinite_;
  bool state_reset_ = false;
  std::vector<Output> placeholders_;
  class FeedCallback;
};

/// FeedInput from a bounded prefetch queue (`queue_size` datapoints) that a
/// background thread fills.
class QueueInput : public FeedInput {
 public:
  explicit QueueInput(std::shared_ptr<DataFlow> df, int queue_size = 50);
};

/// Constant tensors of the signature (unknown dims taken from `shapes`),
/// built once; for measuring training speed without data loading.
class DummyConstantInput : public InputSource {
 public:
  explicit DummyConstantInput(std::vector<Shape> shapes);
  std::vector<Output> get_input_tensors() const override { return tensors_; }

 protected:
  std::vector<CallbackPtr> _setup(const std::vector<InputDesc>& signature, Graph& g) override;

 private:
  std::vector<Shape> shapes_;
  std::vector<Output> tensors_;
};

}  // namespace spire

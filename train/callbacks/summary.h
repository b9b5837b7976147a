// Training summaries (tensorpack's tfutils/summary.py add_moving_summary and
// callbacks/summary.py): add_moving_summary() keeps an exponential moving
// average of scalar tensors (e.g. the cost) in non-trainable variables
// under "EMA/", updated by ops in the MOVING_SUMMARY_OPS collection;
// MovingAverageSummary runs those ops with every training step and puts the
// averages to the monitors after each epoch; MergeAllSummaries puts the
// scalar tensors of the SUMMARIES collection. Scalar names follow
// tensorpack: the tensor's op name without ":0", without a "towerN/" prefix
// and without a "-summary" suffix.
#pragma once

#include <string>
#include <vector>

#include "layers/variables.h"
#include "train/callback.h"

namespace spire {

/// One tensor summarized by add_moving_summary.
struct MovingSummary {
  std::string name;  // the scalar's name ("cost")
  Output ema;        // the variable holding the (zero-debiased) moving average
  Output update;     // the op updating it (in the summary's collection)
  std::string collection;
};

/// For each scalar tensor, makes the non-trainable variables
/// "EMA/<name>" (the average), "EMA/<name>/biased" and "EMA/<name>/local_step"
/// (TF's assign_moving_average with zero_debias=True, as tensorpack:
/// biased -= (biased - x) * (1 - decay); ema = biased / (1 - decay^steps)),
/// adds the update op (named "EMA/<name>_EMA_apply") to `collection` and
/// records the summary for MovingAverageSummary. Integer tensors are cast to
/// f32. Only acts in the main training tower or outside towers (returns {}
/// elsewhere, and under a reusing variable scope, with a warning). A name
/// already summarized is skipped with a warning. Non-scalar tensors are an
/// error. Returns the update ops.
std::vector<Output> add_moving_summary(const std::vector<Output>& tensors, double decay = 0.95,
                                       const std::string& collection = GraphKeys::MOVING_SUMMARY_OPS);
inline std::vector<Output> add_moving_summary(const Output& tensor, double decay = 0.95) {
  return add_moving_summary(std::vector<Output>{tensor}, decay);
}

/// The summaries add_moving_summary recorded in `g`, in creation order.
std::vector<MovingSummary> moving_summaries(Graph& g);

/// The monitor name of a summarized tensor: op name without the output
/// index, "towerN/" prefixes and a "-summary" suffix removed.
std::string summary_name_of(const std::string& tensor_name);

/// Runs the ops of `collection` as targets of every hooked run (so the
/// averages move with each training step) and puts the recorded averages as
/// scalars at trigger_epoch. Chief-only (tensorpack's default).
class MovingAverageSummary : public Callback {
 public:
  explicit MovingAverageSummary(std::string collection = GraphKeys::MOVING_SUMMARY_OPS);

 protected:
  void _setup_graph() override;
  SessionRunArgs _before_run(SessionRunContext&) override;
  void _trigger_epoch() override;

 private:
  std::string collection_;
  Node* op_ = nullptr;
  std::vector<MovingSummary> summaries_;
};

/// Puts the scalar (one-element) tensors of the `key` collection
/// (SUMMARIES) as monitor scalars. Default (run_alone = false, tensorpack's
/// MergeAllSummaries_RunWithOp): they are fetched with the last hooked run
/// of each epoch (so tensors depending on the training feed work), and also
/// every `period` steps when period > 0. With run_alone, they are evaluated
/// through the plain session at each trigger_epoch (and every `period`
/// steps), without feeds. Non-scalar items are skipped with a warning.
/// Chief-only.
class MergeAllSummaries : public Callback {
 public:
  explicit MergeAllSummaries(int64_t period = 0, bool run_alone = false,
                             std::string key = GraphKeys::SUMMARIES);

 protected:
  void _setup_graph() override;
  SessionRunArgs _before_run(SessionRunContext&) override;
  void _after_run(SessionRunContext&, const SessionRunValues& values) override;
  void _trigger_step() override;
  void _trigger_epoch() override;

 private:
  bool need_run() const;
  void put(const std::vector<Tensor>& values);
  int64_t period_;
  bool run_alone_;
  std::string key_;
  std::vector<Output> tensors_;
  std::vector<std::string> names_;
};

}  // namespace spire

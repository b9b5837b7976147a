// Validation during training (tensorpack's callbacks/inference.py and
// inference_runner.py). InferenceRunner builds an inference tower from the
// trainer's tower function (sharing the trained variables; layers run in
// inference mode) and, on each trigger (every epoch by default), runs one
// epoch of a DataFlow through it with the PLAIN session (no training hooks),
// handing each batch's fetched tensors to its Inferencers; their results are
// put to the monitors as scalars (so they reach stats.json, TensorBoard and
// MinSaver/MaxSaver).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "train/callback.h"

namespace spire {

class DataFlow;
class TowerHandle;

/// Computes statistics over one inference epoch (tensorpack's Inferencer).
class Inferencer {
 public:
  virtual ~Inferencer() = default;
  /// Called before each inference epoch (reset accumulators).
  virtual void before_inference() {}
  /// Names of the tensors to fetch for each batch, relative to the
  /// inference tower ("cost", "incorrect_vector:0"), or absolute names.
  virtual std::vector<std::string> get_fetches() = 0;
  /// The values of get_fetches() for one batch, in order.
  virtual void on_fetches(const std::vector<Tensor>& values) = 0;
  /// The statistics of the epoch: name -> value, put to the monitors.
  virtual std::map<std::string, double> after_inference() = 0;
  virtual std::string name() const { return "Inferencer"; }
  /// The epoch's accumulators as numbers that add up across processes
  /// (sums and counts), and setting them back (to the sums over every
  /// process): how a distributed InferenceRunner combines the ranks'
  /// shards. Empty (the default): this inferencer cannot be combined.
  virtual std::vector<double> accumulators() const { return {}; }
  virtual void set_accumulators(const std::vector<double>& values) { (void)values; }
};

using InferencerPtr = std::shared_ptr<Inferencer>;

/// Averages one-element tensors over the batches of an epoch (the mean of
/// the per-batch values, not weighted by batch size: tensorpack's
/// ScalarStats) and reports them as "<prefix>_<op name>" ("validation_cost"
/// for "cost:0"), or "<op name>" when prefix is empty.
class ScalarStats : public Inferencer {
 public:
  explicit ScalarStats(std::vector<std::string> names, std::string prefix = "validation");
  explicit ScalarStats(const std::string& name, std::string prefix = "validation")
      : ScalarStats(std::vector<std::string>{name}, std::move(prefix)) {}
  void before_inference() override { sums_.assign(names_.size(), 0.0), count_ = 0; }
  std::vector<std::string> get_fetches() override { return names_; }
  void on_fetches(const std::vector<Tensor>& values) override;
  std::map<std::string, double> after_inference() override;
  std::string name() const override { return "ScalarStats"; }
  std::vector<double> accumulators() const override;
  void set_accumulators(const std::vector<double>& values) override;

 private:
  std::vector<std::string> names_;
  std::string prefix_;
  std::vector<double> sums_;
  int64_t count_ = 0;
};

/// The error rate over an epoch: the sum of a per-example 0/1 vector
/// (`wrong_tensor_name`, rank 1, e.g. a cast of not_equal(prediction,
/// label)) over all examples divided by the number of examples, reported
/// as `summary_name` (0 when there were no examples).
class ClassificationError : public Inferencer {
 public:
  explicit ClassificationError(std::string wrong_tensor_name = "incorrect_vector",
                               std::string summary_name = "validation_error");
  void before_inference() override { wrong_ = 0, count_ = 0; }
  std::vector<std::string> get_fetches() override { return {wrong_name_}; }
  void on_fetches(const std::vector<Tensor>& values) override;
  std::map<std::string, double> after_inference() override;
  std::string name() const override { return "ClassificationError"; }
  std::vector<double> accumulators() const override { return {wrong_, static_cast<double>(count_)}; }
  void set_accumulators(const std::vector<double>& values) override;

 private:
  std::string wrong_name_, summary_name_;
  double wrong_ = 0;
  int64_t count_ = 0;
};

/// Runs `inferencers` over one epoch of `dataflow` on each trigger. The
/// trainer must be a TowerTrainer with a tower function; the tower
/// `tower_name` is built in setup_graph (inputs: placeholders
/// "<tower_name>/<input name>"; TowerContext(tower_name, is_training=false)),
/// or reused when the tower function already has a tower of that name. Each
/// datapoint of the dataflow is one batch whose components feed the
/// tower's inputs in signature order. The dataflow is reset once, in
/// before_train. Chief-only.
class InferenceRunner : public Callback {
 public:
  InferenceRunner(std::shared_ptr<DataFlow> dataflow, std::vector<InferencerPtr> inferencers,
                  std::string tower_name = "InferenceTower");
  InferenceRunner(std::shared_ptr<DataFlow> dataflow, InferencerPtr inferencer,
                  std::string tower_name = "InferenceTower")
      : InferenceRunner(std::move(dataflow), std::vector<InferencerPtr>{std::move(inferencer)},
                        std::move(tower_name)) {}

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;
  /// Called after the epoch's batches, before the inferencers' statistics
  /// are taken (a distributed runner sums their accumulators over the
  /// processes here).
  virtual void combine_inferencers(std::vector<InferencerPtr>& inferencers) { (void)inferencers; }
  const std::shared_ptr<DataFlow>& dataflow() const { return df_; }

 private:
  std::shared_ptr<DataFlow> df_;
  std::vector<InferencerPtr> infs_;
  std::string tower_name_;
  std::shared_ptr<TowerHandle> handle_;
  std::vector<Output> fetches_;
  std::vector<std::pair<size_t, size_t>> ranges_;  // per inferencer: its fetches
};

/// InferenceRunner over several devices (tensorpack's
/// DataParallelInferenceRunner): one inference tower "InferenceTower<k>"
/// per device, reading the variables of the training tower on that device
/// (the replicas of replicated trainers) or the main tower's; each run feeds
/// the next batches of the dataflow to the towers, one batch per device, in
/// one session run, and the inferencers see every batch in dataflow order,
/// so the statistics equal InferenceRunner's. Chief-only.
class DataParallelInferenceRunner : public Callback {
 public:
  DataParallelInferenceRunner(std::shared_ptr<DataFlow> dataflow,
                              std::vector<InferencerPtr> inferencers, std::vector<Device> devices);

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;

 private:
  std::shared_ptr<DataFlow> df_;
  std::vector<InferencerPtr> infs_;
  std::vector<Device> devices_;
  std::vector<std::shared_ptr<TowerHandle>> handles_;
  std::vector<std::vector<Output>> fetches_;       // per device
  std::vector<std::pair<size_t, size_t>> ranges_;  // per inferencer: its fetches
};

}  // namespace spire

// Shared helpers of the callbacks/config tests: a temp directory, a tiny
// classifier ModelDesc (FC + optional BatchNorm, cost with a moving summary,
// "incorrect_vector"), deterministic toy data, and helpers to build a
// TrainConfig and read variables of a trainer.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "layers/layers.h"
#include "tests/support/op_test_util.h"
#include "train/callbacks.h"
#include "train/config.h"
#include "train/dataflow.h"
#include "train/model_desc.h"
#include "train/trainer.h"
#include "tests/support/temp_dir.h"

namespace spire::testing {


// x [-1, 2] -> (BatchNorm) -> FC(2) -> softmax cross-entropy "cost";
// "incorrect_vector" = (argmax != label) as the model dtype; the cost gets
// a moving summary; "train_error-summary" goes to SUMMARIES.
class TinyClassifier : public ModelDesc {
 public:
  explicit TinyClassifier(DType dt = DType::F32, double lr = 0.1, bool batch_norm = false)
      : dt_(dt), lr_(lr), bn_(batch_norm) {}
  std::vector<InputDesc> inputs() const override {
    return {{"x", dt_, {-1, 2}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = in[0];
    if (bn_) h = BatchNorm("bn", h);
    Output logits = FullyConnected("fc", h, 2);
    Output xent = ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]);
    Output cost = ops::mean(xent, {}, false, "cost");
    Output wrong = ops::cast(ops::not_equal(ops::argmax(logits, 1), in[1]), dt_, "incorrect_vector");
    Output err = ops::mean(wrong, {}, false, "train_error-summary");
    if (auto* ctx = get_current_tower_context(); ctx && ctx->is_main_training_tower())
      default_graph().add_to_collection(GraphKeys::SUMMARIES, err);
    add_moving_summary(cost);
    return cost;
  }
  std::shared_ptr<Optimizer> optimizer() override {
    return std::make_shared<MomentumOptimizer>(lr_, 0.9);
  }

 private:
  DType dt_;
  double lr_;
  bool bn_;
};

// n points x in [-1, 1)^2 with label (x0 + 0.5 x1 > 0); one datapoint each.
inline std::vector<Datapoint> toy_points(int n, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    double a = u(rng), b = u(rng);
    Tensor x = dt == DType::F64 ? Tensor::from_vector<double>({2}, {a, b})
                                : Tensor::from_vector<float>({2}, {static_cast<float>(a), static_cast<float>(b)});
    out.push_back({x, Tensor::scalar<int64_t>(a + 0.5 * b > 0 ? 1 : 0)});
  }
  return out;
}

// 8 toy points in batches of 2: 4 steps per epoch.
inline std::shared_ptr<DataFlow> toy_train_data(DType dt = DType::F32, bool shuffle = false,
                                                std::shared_ptr<DataFromList>* list = nullptr) {
  auto l = std::make_shared<DataFromList>(toy_points(8, dt, 11), shuffle, 5);
  if (list) *list = l;
  return std::make_shared<BatchData>(l, 2);
}

// A config training TinyClassifier on toy data, quiet (no ProgressBar /
// printing monitors unless asked), in `logdir`.
inline TrainConfig tiny_config(const std::string& logdir, int max_epoch, DType dt = DType::F32) {
  TrainConfig cfg;
  cfg.model = std::make_shared<TinyClassifier>(dt);
  cfg.dataflow = toy_train_data(dt);
  cfg.max_epoch = max_epoch;
  cfg.logdir = logdir;
  cfg.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<MovingAverageSummary>(),
                                                 std::make_shared<MergeAllSummaries>(),
                                                 std::make_shared<RunUpdateOps>()};
  cfg.monitors = std::vector<MonitorPtr>{std::make_shared<JSONWriter>()};
  return cfg;
}

inline Node* find_variable(Trainer& t, const std::string& name) {
  for (const Variable& v : all_variables(&t.graph()))
    if (v.name() == name) return v.node();
  throw Error("no variable " + name);
}

inline Tensor var_value(Trainer& t, const std::string& name) {
  return t.session().variable_value(find_variable(t, name));
}

// Calls `fn` at the given hook (for probing values during training).
class LambdaCallback : public Callback {
 public:
  std::function<void(Trainer&)> before_epoch, trigger_epoch, trigger_step;
  std::function<SessionRunArgs(Trainer&)> before_run;
  std::function<void(Trainer&, const SessionRunValues&)> after_run;
  LambdaCallback() { chief_only_ = false; }
  std::string name() const override { return "LambdaCallback"; }

 protected:
  void _before_epoch() override {
    if (before_epoch) before_epoch(trainer());
  }
  void _trigger_epoch() override {
    if (trigger_epoch) trigger_epoch(trainer());
  }
  void _trigger_step() override {
    if (trigger_step) trigger_step(trainer());
  }
  SessionRunArgs _before_run(SessionRunContext&) override {
    return before_run ? before_run(trainer()) : SessionRunArgs{};
  }
  void _after_run(SessionRunContext&, const SessionRunValues& v) override {
    if (after_run) after_run(trainer(), v);
  }
};

}  // namespace spire::testing

// Built-in callbacks driven by real (tiny) trainers: ModelSaver keep-N,
// MinSaver/MaxSaver, InferenceRunner with ScalarStats/ClassificationError
// against a hand computation, hyper-parameter schedules, PeriodicTrigger,
// ProgressBar output, moving-average summaries, RunUpdateOps with
// BatchNorm, MergeAllSummaries, throughput and time-left estimates.
#include <cmath>
#include <sstream>

#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/file_util.h"

namespace spire::testing {
namespace {

// ---- ModelSaver / MinSaver / MaxSaver --------------------------------------------------

TEST(ModelSaver, KeepsTheNLatestCheckpointsAndTheIndex) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 4);
  cfg.callbacks = {std::make_shared<ModelSaver>(2)};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_EQ(t.global_step(), 16);
  auto files = dir.list();
  EXPECT_EQ(files, (std::vector<std::string>{"checkpoint", "model-12.safetensors",
                                             "model-16.safetensors", "stats.json"}));
  auto index = read_checkpoint_index(dir.path());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->latest, "model-16.safetensors");
  EXPECT_EQ(index->all, (std::vector<std::string>{"model-12.safetensors", "model-16.safetensors"}));
  EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("model-16.safetensors"));
  Checkpoint ck = read_checkpoint(dir.file("model-16.safetensors"));
  EXPECT_EQ(ck.metadata.at("global_step"), "16");
  EXPECT_EQ(ck.tensors.at("global_step").item<int64_t>(), 16);
  Tensor w = var_value(t, "fc/W");
  EXPECT_EQ(ck.tensors.at("fc/W").to_vector<float>(), w.to_vector<float>());
  EXPECT_TRUE(ck.tensors.count("fc/W/Momentum"));
  EXPECT_TRUE(ck.tensors.count("learning_rate"));
  EXPECT_TRUE(ck.tensors.count("EMA/cost"));
}

TEST(ModelSaver, NeedsADirectory) {
  TrainConfig cfg = tiny_config("", 1);
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.callbacks = {std::make_shared<ModelSaver>()};
  SimpleTrainer t;
  expect_error([&] { launch_train_with_config(cfg, t); }, {"ModelSaver", "checkpoint directory"});
}

// Puts `values[epoch - 1]` as "val" at each epoch.
CallbackPtr put_stat(std::vector<double> values) {
  auto cb = std::make_shared<LambdaCallback>();
  cb->trigger_epoch = [values](Trainer& t) {
    t.monitors().put_scalar("val", values.at(static_cast<size_t>(t.epoch_num() - 1)));
  };
  return cb;
}

TEST(MinSaver, CopiesTheLatestCheckpointOnlyOnImprovement) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 4);
  // Which model-<step> file min-val / max-val equal after each epoch.
  std::vector<int64_t> min_is, max_is;
  auto which = [&dir](const std::string& f) -> int64_t {
    if (!path_exists(dir.file(f))) return -1;
    std::string bytes = read_file(dir.file(f));
    for (int64_t step : {4, 8, 12, 16})
      if (path_exists(dir.file(str_cat("model-", step, ".safetensors"))) &&
          read_file(dir.file(str_cat("model-", step, ".safetensors"))) == bytes)
        return step;
    return 0;
  };
  auto probe = std::make_shared<LambdaCallback>();
  probe->trigger_epoch = [&](Trainer&) {
    min_is.push_back(which("min-val.safetensors"));
    max_is.push_back(which("max-val.safetensors"));
  };
  auto min_saver = std::make_shared<MinSaver>("val");
  cfg.callbacks = {std::make_shared<ModelSaver>(), put_stat({3, 1, 2, 0.5}), min_saver,
                   std::make_shared<MaxSaver>("val"), probe};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_EQ(min_is, (std::vector<int64_t>{4, 8, 8, 16}));
  EXPECT_EQ(max_is, (std::vector<int64_t>{4, 4, 4, 4}));
  ASSERT_TRUE(min_saver->best().has_value());
  EXPECT_EQ(min_saver->best()->first, 16);
  EXPECT_EQ(min_saver->best()->second, 0.5);
  // The copy is a valid checkpoint.
  EXPECT_EQ(load_checkpoint(dir.file("min-val.safetensors")).at("global_step").item<int64_t>(), 16);
}

TEST(MinSaver, WithoutModelSaverIsAnError) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 1);
  cfg.callbacks = {put_stat({1}), std::make_shared<MinSaver>("val")};
  SimpleTrainer t;
  expect_error([&] { launch_train_with_config(cfg, t); }, {"MinSaver", "cannot find a checkpoint"});
}

TEST(MinSaver, DoesNothingWhenTheStatIsOlderThanTheCheckpoint) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 3);
  // Wrong order: the stat is put after MinSaver ran, so MinSaver sees the
  // previous epoch's value while the latest checkpoint is this epoch's.
  auto saver = std::make_shared<MinSaver>("val");
  cfg.callbacks = {std::make_shared<ModelSaver>(), saver, put_stat({3, 2, 1})};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_FALSE(path_exists(dir.file("min-val.safetensors")));
  ASSERT_TRUE(saver->best().has_value());
  EXPECT_EQ(saver->best()->second, 2);  // tracked, but never copied
}

// ---- InferenceRunner ---------------------------------------------------------------------

TEST(InferenceRunner, ScalarStatsAndClassificationErrorMatchAHandComputation) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2, DType::F64);
  std::vector<Datapoint> val = toy_points(7, DType::F64, 99);
  auto val_df = std::make_shared<BatchData>(std::make_shared<DataFromList>(val, false), 3, true);
  cfg.callbacks = {std::make_shared<InferenceRunner>(
      val_df, std::vector<InferencerPtr>{std::make_shared<ScalarStats>("cost"),
                                         std::make_shared<ClassificationError>()})};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);

  // The runner ran after the last epoch's steps: the final weights produced its values.
  std::vector<double> w = var_value(t, "fc/W").to_vector<double>();  // [2, 2]
  std::vector<double> b = var_value(t, "fc/b").to_vector<double>();
  std::vector<double> batch_costs;
  double cost_sum = 0;
  int64_t wrong = 0, in_batch = 0;
  for (size_t i = 0; i < val.size(); ++i) {
    double x0 = val[i][0].to_vector<double>()[0], x1 = val[i][0].to_vector<double>()[1];
    int64_t y = val[i][1].item<int64_t>();
    double l0 = x0 * w[0] + x1 * w[2] + b[0], l1 = x0 * w[1] + x1 * w[3] + b[1];
    double m = std::max(l0, l1);
    double lse = m + std::log(std::exp(l0 - m) + std::exp(l1 - m));
    cost_sum += lse - (y == 0 ? l0 : l1);
    ++in_batch;
    int64_t pred = l1 > l0 ? 1 : 0;
    wrong += pred != y;
    if (in_batch == 3 || i + 1 == val.size()) {
      batch_costs.push_back(cost_sum / static_cast<double>(in_batch));
      cost_sum = 0;
      in_batch = 0;
    }
  }
  ASSERT_EQ(batch_costs.size(), 3u);  // 3 + 3 + 1
  double want_cost = (batch_costs[0] + batch_costs[1] + batch_costs[2]) / 3;  // per-batch mean
  EXPECT_NEAR(t.monitors().get_latest("validation_cost"), want_cost, 1e-12);
  EXPECT_NEAR(t.monitors().get_latest("validation_error"), static_cast<double>(wrong) / 7, 1e-15);
  EXPECT_EQ(t.monitors().get_history("validation_cost").size(), 2u);  // every epoch
  // The tower exists and the predictor reuses it.
  EXPECT_EQ(t.tower_func().inference_towers().size(), 1u);
  auto predict = t.get_predictor({"x", "label"}, {"cost"});
  EXPECT_EQ(t.tower_func().inference_towers().size(), 1u);
  Datapoint all = {Tensor::from_vector<double>({1, 2}, val[6][0].to_vector<double>()),
                   Tensor::from_vector<int64_t>({1}, {val[6][1].item<int64_t>()})};
  EXPECT_NEAR(predict(all)[0].item<double>(), batch_costs[2], 1e-12);
}

TEST(InferenceRunner, NeedsATowerTrainer) {
  class Plain : public Trainer {};
  Plain t;
  auto df = std::make_shared<DataFromList>(toy_points(2, DType::F32, 1), false);
  expect_error([&] {
    t.setup_callbacks({std::make_shared<InferenceRunner>(df, std::make_shared<ScalarStats>("cost"))}, {});
  }, {"InferenceRunner", "TowerTrainer"});
}

// ---- hyper-parameter setters ------------------------------------------------------------------

// Learning rate seen by each epoch (before_epoch) and each step (before the hooked run).
struct LrProbe {
  std::vector<double> per_epoch, per_step;
  CallbackPtr callback() {
    auto cb = std::make_shared<LambdaCallback>();
    cb->before_epoch = [this](Trainer& t) { per_epoch.push_back(var_value(t, "learning_rate").item<double>()); };
    cb->before_run = [this](Trainer& t) {
      per_step.push_back(var_value(t, "learning_rate").item<double>());
      return SessionRunArgs{};
    };
    return cb;
  }
};

std::vector<double> run_schedule(CallbackPtr setter, int max_epoch, int starting_epoch = 1,
                                 std::vector<double>* per_step = nullptr, SimpleTrainer* out = nullptr) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), max_epoch);  // the optimizer starts at lr 0.1
  cfg.starting_epoch = starting_epoch;
  LrProbe probe;
  cfg.callbacks = {setter, probe.callback()};
  SimpleTrainer local;
  SimpleTrainer& t = out ? *out : local;
  launch_train_with_config(cfg, t);
  if (per_step) *per_step = probe.per_step;
  return probe.per_epoch;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7) << "at " << i;
}

TEST(ScheduledHyperParamSetter, EpochBasedAsTensorpack) {
  // (1, 0.05): set after epoch 1; (3, 0.01): after epoch 3. Epoch 1 keeps the initial 0.1.
  SimpleTrainer t;
  auto lrs = run_schedule(std::make_shared<ScheduledHyperParamSetter>(
                              "learning_rate", ScheduledHyperParamSetter::Schedule{{1, 0.05}, {3, 0.01}}),
                          4, 1, nullptr, &t);
  expect_near_all(lrs, {0.1, 0.05, 0.05, 0.01});
  auto h = t.monitors().get_history("learning_rate");
  ASSERT_EQ(h.size(), 2u);  // put when set: after epochs 1 and 3
  EXPECT_EQ(h[0].first, 4);
  EXPECT_NEAR(h[1].second, 0.01, 1e-12);
  // Point 0 is set before training.
  expect_near_all(run_schedule(std::make_shared<ScheduledHyperParamSetter>(
                                   "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.5}, {2, 0.2}}),
                               3),
                  {0.5, 0.5, 0.2});
}

TEST(ScheduledHyperParamSetter, LinearInterpolation) {
  auto s = std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{4, 0.2}, {0, 1.0}}, "linear");
  expect_near_all(run_schedule(s, 6), {1.0, 0.8, 0.6, 0.4, 0.2, 0.2});
  EXPECT_FALSE(s->value_at_point(5).has_value());  // past the last point: nothing set
  EXPECT_NEAR(*s->value_in_effect(5), 0.2, 1e-15);
  expect_error([] { ScheduledHyperParamSetter("learning_rate", {{0, 1.0}}, "cubic"); }, {"interp", "cubic"});
}

TEST(ScheduledHyperParamSetter, StepBased) {
  std::vector<double> steps;
  run_schedule(std::make_shared<ScheduledHyperParamSetter>(
                   "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 1.0}, {2, 0.5}, {5, 0.25}}, "", true),
               2, 1, &steps);
  // Runs 1..8 (global_step before each: 0..7); point s applies from the run after step s.
  expect_near_all(steps, {1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25});
}

TEST(ScheduledHyperParamSetter, ResumeSetsTheValueInEffect) {
  // Starting at epoch 3 without restoring: before_train sets the value for point 2.
  expect_near_all(run_schedule(std::make_shared<ScheduledHyperParamSetter>(
                                   "learning_rate", ScheduledHyperParamSetter::Schedule{{1, 0.05}, {3, 0.01}}),
                               4, 3),
                  {0.05, 0.01});
  expect_near_all(run_schedule(std::make_shared<ScheduledHyperParamSetter>(
                                   "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 1.0}, {4, 0.2}},
                                   "linear"),
                               5, 3),
                  {0.6, 0.4, 0.2});
}

TEST(HyperParamSetterWithFunc, HalvesEachEpoch) {
  std::vector<int> epochs;
  auto s = std::make_shared<HyperParamSetterWithFunc>("learning_rate", [&](int e, double old) {
    epochs.push_back(e);
    return old * 0.5;
  });
  expect_near_all(run_schedule(s, 3), {0.05, 0.025, 0.0125});
  EXPECT_EQ(epochs, (std::vector<int>{0, 1, 2, 3}));
}

TEST(GraphVarParam, UnknownVariableIsAnError) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 1);
  cfg.callbacks = {std::make_shared<ScheduledHyperParamSetter>(
      "no_such_var", ScheduledHyperParamSetter::Schedule{{0, 1.0}})};
  SimpleTrainer t;
  expect_error([&] { launch_train_with_config(cfg, t); }, {"'no_such_var' is not a variable"});
}

// ---- PeriodicTrigger ----------------------------------------------------------------------------

class CountingTrainer : public Trainer {
 public:
  CountingTrainer() {
    DefaultGraphGuard guard(graph());
    counter = ops::variable({}, DType::F64, "counter");
    init = ops::assign(counter, ops::scalar(0, DType::F64)).node;
    train_op = ops::assign_add(counter, ops::scalar(1, DType::F64)).node;
  }
  SessionCreator creator() {
    Node* i = init;
    return [i](Graph& g) {
      auto s = new_session_creator()(g);
      s->run_targets({i});
      return s;
    };
  }
  Output counter;
  Node* init;
};

class TriggerLog : public Callback {
 public:
  std::vector<std::string> log;
  TriggerLog() { chief_only_ = false; }

 protected:
  void _before_train() override { log.push_back("before_train"); }
  void _trigger() override { log.push_back(str_cat("trigger@", trainer().global_step())); }
  void _trigger_epoch() override {
    log.push_back("own_trigger_epoch");
    _trigger();
  }
  void _after_train() override { log.push_back("after_train"); }
};

TEST(PeriodicTrigger, StepAndEpochSchedules) {
  {
    CountingTrainer t;
    auto cb = std::make_shared<TriggerLog>();
    t.train({std::make_shared<PeriodicTrigger>(cb, 2, 0)}, {}, t.creator(), nullptr, 3, 1, 2);
    EXPECT_EQ(cb->log, (std::vector<std::string>{"before_train", "trigger@2", "trigger@4",
                                                 "trigger@6", "after_train"}));
  }
  {
    CountingTrainer t;
    auto cb = std::make_shared<TriggerLog>();
    t.train({std::make_shared<PeriodicTrigger>(cb, 0, 2, true)}, {}, t.creator(), nullptr, 3, 1, 5);
    EXPECT_EQ(cb->log, (std::vector<std::string>{"before_train", "trigger@0", "trigger@6",
                                                 "trigger@12", "after_train"}));
  }
  {
    CountingTrainer t;
    auto cb = std::make_shared<TriggerLog>();
    t.train({std::make_shared<PeriodicTrigger>(cb, 4)}, {}, t.creator(), nullptr, 3, 1, 2);  // + every epoch
    EXPECT_EQ(cb->log, (std::vector<std::string>{"before_train", "trigger@3", "trigger@4",
                                                 "trigger@6", "after_train"}));
  }
  expect_error([] { PeriodicTrigger(std::make_shared<TriggerLog>(), 0, 0); }, {"cannot both be 0"});
}

// ---- RunOp ------------------------------------------------------------------------------------------

TEST(RunOp, RunsBeforeTrainingOnTriggerAndWithSteps) {
  CountingTrainer t;
  Output extra;
  {
    DefaultGraphGuard guard(t.graph());
    extra = ops::variable({}, DType::F64, "extra");
  }
  auto creator = [&](Graph& g) {
    auto s = t.creator()(g);
    s->set_variable_value(extra.node, Tensor::scalar<double>(0));
    return s;
  };
  auto add10 = std::make_shared<RunOp>([&] { return ops::assign_add(extra, ops::scalar(10, DType::F64)).node; });
  auto add1 = std::make_shared<RunOp>([&] { return ops::assign_add(extra, ops::scalar(1, DType::F64)).node; },
                                      false, false, true);
  t.train({add10, add1}, {}, creator, nullptr, 3, 1, 2);
  // 10 before training + 10 per epoch (2) + 1 per step (6).
  EXPECT_EQ(t.session().variable_value(extra.node).item<double>(), 36);
}

// ---- ProgressBar ------------------------------------------------------------------------------------------

std::string progress_output(bool tty) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  auto bar = std::make_shared<ProgressBar>(std::vector<std::string>{"cost"});
  std::ostringstream os;
  bar->set_output(&os, tty);
  cfg.callbacks = {bar};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  return os.str();
}

TEST(ProgressBar, PlainLinesWhenNotATerminal) {
  std::string out = progress_output(false);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  for (char c : out) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << static_cast<int>(c);
  EXPECT_NE(out.find("4/4"), std::string::npos) << out;
  EXPECT_NE(out.find("100%"), std::string::npos) << out;
  EXPECT_NE(out.find("cost="), std::string::npos) << out;
  EXPECT_NE(out.find("it/s"), std::string::npos) << out;
  // 4 steps: a line at each 10% boundary crossed (every step), 2 epochs.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 8) << out;
}

TEST(ProgressBar, RedrawsOneLineOnATerminal) {
  std::string out = progress_output(true);
  EXPECT_NE(out.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;  // one line per epoch
  EXPECT_NE(out.find("4/4"), std::string::npos);
}

// ---- summaries ---------------------------------------------------------------------------------------------

TEST(MovingAverageSummary, PutsTheZeroDebiasedAverageOfTheCost) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2, DType::F64);
  std::vector<double> costs;
  auto probe = std::make_shared<LambdaCallback>();
  Output cost;
  probe->before_run = [&](Trainer& t) {
    if (!cost.valid()) cost = get_tensor_maybe_in_tower(t, "cost");
    return SessionRunArgs{{cost}, {}, {}};
  };
  probe->after_run = [&](Trainer&, const SessionRunValues& v) { costs.push_back(v.results.at(0).item<double>()); };
  cfg.callbacks = {probe};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  ASSERT_EQ(costs.size(), 8u);
  double biased = 0;
  std::vector<double> want;
  for (size_t i = 0; i < costs.size(); ++i) {
    biased -= (biased - costs[i]) * (1 - 0.95);
    if (i == 3 || i == 7) want.push_back(biased / (1 - std::pow(0.95, static_cast<double>(i + 1))));
  }
  EXPECT_NEAR(t.monitors().get_history("cost")[0].second, want[0], 1e-12);
  EXPECT_NEAR(t.monitors().get_latest("cost"), want[1], 1e-12);
  auto ms = moving_summaries(t.graph());
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].name, "cost");
  EXPECT_EQ(ms[0].ema.node->name(), "EMA/cost");
  EXPECT_FALSE(variable_of(ms[0].ema).trainable);
}

TEST(MovingAverageSummary, NamesDropTowerPrefixesAndSuffixes) {
  EXPECT_EQ(summary_name_of("tower0/cost:0"), "cost");
  EXPECT_EQ(summary_name_of("tower12/fc/loss"), "fc/loss");
  EXPECT_EQ(summary_name_of("train_error-summary:0"), "train_error");
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::placeholder(DType::F32, {2}, "vec");
  expect_error([&] { add_moving_summary(v); }, {"scalar"});
  Output s = ops::placeholder(DType::F32, {}, "s");
  {
    TowerContext ctx("pred", false);
    EXPECT_TRUE(add_moving_summary(s).empty());  // not the main training tower
  }
  EXPECT_EQ(add_moving_summary(s).size(), 1u);
  EXPECT_EQ(add_moving_summary(s).size(), 1u);  // again: the existing op, with a warning
  EXPECT_EQ(moving_summaries(g).size(), 1u);
  EXPECT_EQ(g.get_collection(GraphKeys::MOVING_SUMMARY_OPS).size(), 1u);
}

TEST(MergeAllSummaries, PutsTheSummariesCollectionWithTheLastStep) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  auto h = t.monitors().get_history("train_error");
  ASSERT_EQ(h.size(), 2u);  // once per epoch, fetched with the epoch's last step
  EXPECT_EQ(h[0].first, 4);
  EXPECT_EQ(h[1].first, 8);
  for (const auto& [step, v] : h) {
    EXPECT_TRUE(v == 0 || v == 0.5 || v == 1) << v;  // a batch of 2
  }
}

TEST(RunUpdateOps, MakesBatchNormAveragesMove) {
  for (bool with_update : {true, false}) {
    TempDir dir;
    TrainConfig cfg = tiny_config(dir.path(), 1);
    cfg.model = std::make_shared<TinyClassifier>(DType::F32, 0.1, /*batch_norm=*/true);
    if (!with_update) cfg.extra_callbacks = std::vector<CallbackPtr>{};
    SimpleTrainer t;
    launch_train_with_config(cfg, t);
    std::vector<float> mean = var_value(t, "bn/mean/EMA").to_vector<float>();
    std::vector<float> var = var_value(t, "bn/variance/EMA").to_vector<float>();
    bool moved = mean[0] != 0 || mean[1] != 0 || var[0] != 1 || var[1] != 1;
    EXPECT_EQ(moved, with_update);
  }
}

// ---- throughput / time left ---------------------------------------------------------------------------

TEST(ThroughputTracker, PutsSamplesPerSecond) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  auto eta = std::make_shared<EstimatedTimeLeft>();
  cfg.callbacks = {std::make_shared<ThroughputTracker>(2), std::make_shared<ThroughputTracker>(), eta};
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_GT(t.monitors().get_latest("Throughput (samples/sec)"), 0);
  EXPECT_GT(t.monitors().get_latest("Throughput (steps/sec)"), 0);
  EXPECT_EQ(t.monitors().get_history("Throughput (samples/sec)").size(), 2u);
  EXPECT_EQ(eta->last_estimate(), 0);  // the last epoch leaves nothing
  EXPECT_EQ(humanize_time_delta(3725), "1 hour 2 minutes 5 seconds");
  EXPECT_EQ(humanize_time_delta(4.5), "4.5 seconds");
  EXPECT_EQ(humanize_time_delta(0), "0 second");
}

TEST(DefaultCallbacks, AreTensorpacks) {
  auto cbs = default_callbacks();
  ASSERT_EQ(cbs.size(), 4u);
  EXPECT_EQ(cbs[0]->name(), "MovingAverageSummary");
  EXPECT_EQ(cbs[1]->name(), "ProgressBar");
  EXPECT_EQ(cbs[2]->name(), "MergeAllSummaries");
  EXPECT_EQ(cbs[3]->name(), "RunUpdateOps");
}

}  // namespace
}  // namespace spire::testing

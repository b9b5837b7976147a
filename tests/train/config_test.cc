// TrainConfig / launch_train_with_config / AutoResumeTrainConfig: config
// validation, what a run leaves in its logdir (stats.json, the TensorBoard
// event file, the JSONWriter backup), and resuming: 2 epochs + an
// auto-resumed run to 4 epochs ends with the same weights as 4 epochs
// straight; a logdir with only one of checkpoint/stats.json is refused.
#include <cmath>

#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/file_util.h"
#include "train/input_source.h"
#include "train/session_init.h"

namespace spire::testing {
namespace {

TEST(TrainConfig, ValidatesTheData) {
  TempDir dir;
  {
    TrainConfig cfg = tiny_config(dir.path(), 1);
    cfg.dataflow = nullptr;
    SimpleTrainer t;
    expect_error([&] { launch_train_with_config(cfg, t); }, {"needs a dataflow or an input source"});
  }
  {
    TrainConfig cfg = tiny_config(dir.path(), 1);
    cfg.data = std::make_shared<FeedInput>(toy_train_data());
    SimpleTrainer t;
    expect_error([&] { launch_train_with_config(cfg, t); }, {"both a dataflow and an input source"});
  }
  {
    TrainConfig cfg = tiny_config(dir.path(), 1);
    cfg.model = nullptr;
    SimpleTrainer t;
    expect_error([&] { launch_train_with_config(cfg, t); }, {"model is required"});
  }
}

TEST(TrainConfig, InputSourceAndStepsPerEpoch) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  cfg.dataflow = nullptr;
  cfg.data = std::make_shared<FeedInput>(toy_train_data());
  cfg.steps_per_epoch = 3;
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_EQ(t.logdir(), dir.path());
}

TEST(TrainConfig, StatsJsonAndEventFileAfterTwoEpochs) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  cfg.monitors = std::nullopt;  // the defaults: TFEventWriter, JSONWriter, ScalarPrinter
  SimpleTrainer t;
  launch_train_with_config(cfg, t);
  std::string raw = read_file(dir.file("stats.json"));
  EXPECT_EQ(raw.front(), '[');
  auto stats = JSONWriter::load_existing_json(dir.path());
  ASSERT_EQ(stats.size(), 2u);
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(stats[e].at("epoch_num"), e + 1);
    EXPECT_EQ(stats[e].at("global_step"), 4 * (e + 1));
    EXPECT_TRUE(stats[e].count("cost"));         // MovingAverageSummary
    EXPECT_TRUE(stats[e].count("train_error"));  // MergeAllSummaries
    EXPECT_DOUBLE_EQ(stats[e].at("cost"), t.monitors().get_history("cost")[e].second);
  }
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(dir.path()), 2);
  bool event_file = false;
  for (const auto& f : dir.list())
    if (f.rfind("events.out.tfevents.", 0) == 0 && read_file(dir.file(f)).size() > 0) event_file = true;
  EXPECT_TRUE(event_file);
}

TEST(TrainConfig, JsonWriterBacksUpStatsThatDoNotPrecedeTheStart) {
  TempDir dir;
  {
    SimpleTrainer t;
    launch_train_with_config(tiny_config(dir.path(), 2), t);
  }
  {
    SimpleTrainer t;  // starts again at epoch 1: the old stats.json is moved aside
    launch_train_with_config(tiny_config(dir.path(), 1), t);
  }
  int backups = 0;
  for (const auto& f : dir.list())
    if (f.rfind("stats.json.", 0) == 0) {
      ++backups;
      EXPECT_NE(read_file(dir.file(f)).find("\"epoch_num\": 2"), std::string::npos);  // the old run
    }
  EXPECT_EQ(backups, 1);
  auto stats = JSONWriter::load_existing_json(dir.path());
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].at("epoch_num"), 1);
}

// Trains TinyClassifier (f32, shuffled data, fixed graph seed) from
// `starting` (auto-resumed from `dir`) to `max_epoch`; returns the final
// variable values.
std::map<std::string, Tensor> train_to(const std::string& dir, int max_epoch, bool auto_resume,
                                       int* started_at = nullptr) {
  TrainConfig cfg = tiny_config(dir, max_epoch);
  std::shared_ptr<DataFromList> list;
  cfg.dataflow = toy_train_data(DType::F32, /*shuffle=*/true, &list);
  cfg.callbacks = {std::make_shared<ModelSaver>(3)};
  if (auto_resume) cfg = AutoResumeTrainConfig(cfg);
  if (started_at) *started_at = cfg.starting_epoch;
  // Epoch e (1-based) reads the data in the shuffled order of dataflow epoch e - 1.
  list->set_next_epoch(cfg.starting_epoch - 1);
  SimpleTrainer t;
  t.graph().set_seed(1234);
  launch_train_with_config(cfg, t);
  return get_variable_values(t.session());
}

TEST(AutoResumeTrainConfig, ResumedRunEndsWithTheWeightsOfAStraightRun) {
  TempDir straight, resumed;
  auto want = train_to(straight.path(), 4, false);
  int started = 0;
  train_to(resumed.path(), 2, true, &started);
  EXPECT_EQ(started, 1);  // nothing to resume yet
  auto got = train_to(resumed.path(), 4, true, &started);
  EXPECT_EQ(started, 3);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    std::vector<double> a(static_cast<size_t>(w.num_elements())), b(a.size());
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      a[static_cast<size_t>(i)] = w.element_as_double(i);
      b[static_cast<size_t>(i)] = got.at(name).element_as_double(i);
    }
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << name << "[" << i << "]";
  }
  EXPECT_EQ(got.at("global_step").item<int64_t>(), 16);
  // The resumed stats.json continues the first part.
  auto stats = JSONWriter::load_existing_json(resumed.path());
  ASSERT_EQ(stats.size(), 4u);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(stats[e].at("epoch_num"), e + 1);
  EXPECT_EQ(stats[3].at("global_step"), 16);
  // A different start really changes the result (the check above is not vacuous).
  TempDir other;
  TrainConfig cfg = tiny_config(other.path(), 4);
  SimpleTrainer t;
  t.graph().set_seed(99);
  launch_train_with_config(cfg, t);
  EXPECT_NE(var_value(t, "fc/W").to_vector<float>(), want.at("fc/W").to_vector<float>());
}

TEST(AutoResumeTrainConfig, NeedsBothTheCheckpointAndStatsJson) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), 2);
  // Neither: unchanged.
  TrainConfig same = AutoResumeTrainConfig(cfg);
  EXPECT_EQ(same.starting_epoch, 1);
  EXPECT_FALSE(same.session_init);
  // Only a checkpoint.
  save_checkpoint_in_dir(dir.path(), "model", 8, {{"w", Tensor::scalar<float>(1)}});
  expect_error([&] { AutoResumeTrainConfig(cfg); }, {"checkpoint index", "no stats.json"});
  // Only stats.json.
  {
    TempDir d2;
    atomic_write_file(d2.file("stats.json"), "[{\"epoch_num\": 2, \"global_step\": 8}]");
    TrainConfig c2 = tiny_config(d2.path(), 2);
    expect_error([&] { AutoResumeTrainConfig(c2); }, {"stats.json", "no checkpoint index"});
  }
  // Both.
  atomic_write_file(dir.file("stats.json"), "[{\"epoch_num\": 2, \"global_step\": 8}]");
  TrainConfig resumed = AutoResumeTrainConfig(cfg);
  EXPECT_EQ(resumed.starting_epoch, 3);
  EXPECT_TRUE(resumed.session_init);
  // always_resume = false keeps what the config sets.
  cfg.starting_epoch = 2;
  cfg.session_init = std::make_shared<JustCurrentSession>();
  TrainConfig kept = AutoResumeTrainConfig(cfg, false);
  EXPECT_EQ(kept.starting_epoch, 2);
  EXPECT_EQ(kept.session_init, cfg.session_init);
}

}  // namespace
}  // namespace spire::testing

// An exact resume: a run interrupted after a checkpoint and continued with
// AutoResumeTrainConfig ends with the variables of the uninterrupted run,
// bit for bit, also with dropout (the checkpoint keeps the random streams'
// positions: Session::rng_offsets, kRngOffsetsMetadataKey) and with epochs
// that end mid-pass through the data (the input continues at the restored
// global_step: FeedInput::reset_state_at_step, DataFlow::set_next_epoch).
// Plus the pieces: the session's stream offsets, their metadata format and
// its errors, an older checkpoint without them, and the data skip.
#include <cstring>

#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/file_util.h"
#include "train/input_source.h"
#include "train/session_init.h"

namespace spire::testing {
namespace {

// x [-1, 2] -> FC(8) + ReLU -> Dropout(0.5) -> FC(2) -> softmax cross-entropy.
class DropoutClassifier : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F32, {-1, 2}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 8, FullyConnectedOptions().activation(activations::relu()));
    h = Dropout("dropout", h, DropoutOptions().rate(0.5));
    Output logits = FullyConnected("fc1", h, 2);
    Output cost = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
    add_moving_summary(cost);  // (stats.json records the epochs)
    return cost;
  }
  std::shared_ptr<Optimizer> optimizer() override { return std::make_shared<MomentumOptimizer>(0.1, 0.9); }
};

// 14 shuffled toy points in batches of 2 (a pass is 7 steps), 3 steps per
// epoch (epochs end mid-pass), checkpoints every epoch; from `dir`
// auto-resumed when it holds a run. Returns the final variables.
std::map<std::string, Tensor> train_dropout_to(const std::string& dir, int max_epoch, int* started_at = nullptr) {
  TrainConfig cfg = tiny_config(dir, max_epoch);
  cfg.model = std::make_shared<DropoutClassifier>();
  cfg.dataflow = std::make_shared<BatchData>(std::make_shared<DataFromList>(toy_points(14, DType::F32, 3), true, 7), 2);
  cfg.steps_per_epoch = 3;
  cfg.callbacks = {std::make_shared<ModelSaver>(3)};
  cfg = AutoResumeTrainConfig(cfg);
  if (started_at) *started_at = cfg.starting_epoch;
  SimpleTrainer t;
  t.graph().set_seed(4321);
  launch_train_with_config(cfg, t);
  return get_variable_values(t.session());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(ExactResume, ResumedRunWithDropoutMidPassEqualsTheStraightRunBitForBit) {
  TempDir straight, resumed;
  const auto want = train_dropout_to(straight.path(), 5);
  int started = 0;
  train_dropout_to(resumed.path(), 3, &started);
  EXPECT_EQ(started, 1);
  const auto got = train_dropout_to(resumed.path(), 5, &started);
  EXPECT_EQ(started, 4);  // global_step 9: pass 1, 2 of its 7 batches read
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(same_bits(w, got.at(name))) << name << " differs from the straight run";
  }
  EXPECT_EQ(got.at("global_step").item<int64_t>(), 15);
  // The checkpoint holds the dropout stream's position.
  const Checkpoint ckpt = read_checkpoint(latest_checkpoint(resumed.path()));
  ASSERT_TRUE(ckpt.metadata.count(kRngOffsetsMetadataKey));
  EXPECT_NE(ckpt.metadata.at(kRngOffsetsMetadataKey).find("dropout"), std::string::npos)
      << ckpt.metadata.at(kRngOffsetsMetadataKey);
}

// The Dropout node of a one-op graph, drawn `runs` times.
struct DropoutGraph {
  Graph g;
  Output out;
  DropoutGraph() {
    g.set_seed(5);
    DefaultGraphGuard guard(g);
    out = ops::dropout(ops::constant(Tensor::from_vector<float>({8}, {1, 1, 1, 1, 1, 1, 1, 1})), 0.5, 0, "drop");
  }
};

TEST(ExactResume, SessionRngOffsetsRestoreTheStream) {
  DropoutGraph d;
  Session s(d.g);
  EXPECT_TRUE(s.rng_offsets().empty());
  s.run({d.out});
  const auto after_one = s.rng_offsets();
  ASSERT_EQ(after_one.size(), 1u);
  EXPECT_EQ(after_one[0].first, d.out.node);
  EXPECT_EQ(after_one[0].second, 8u);
  const Tensor second = s.run({d.out})[0];
  s.run({d.out});
  // Back to after the first run: the next draw is the second run's again.
  s.set_rng_offset(d.out.node, after_one[0].second);
  EXPECT_TRUE(same_bits(s.run({d.out})[0], second));
  // Through the metadata text, into a fresh session.
  s.set_rng_offset(d.out.node, 8);
  const std::string text = encode_rng_offsets(s);
  EXPECT_EQ(text, "8 drop\n");
  Session fresh(d.g);
  EXPECT_TRUE(restore_rng_offsets(fresh, text, "test").empty());
  EXPECT_TRUE(same_bits(fresh.run({d.out})[0], second));
  // Another graph's node is refused.
  DropoutGraph other;
  expect_error([&] { s.set_rng_offset(other.out.node, 0); }, {"set_rng_offset", "drop", "not a node of this"});
}

TEST(ExactResume, RngOffsetsMetadataErrorsAndUnknownNodes) {
  DropoutGraph d;
  Session s(d.g);
  for (const std::string bad : {"drop", "x drop", "12", "12 ", "-3 drop", "99999999999999999999999 drop"})
    expect_error([&] { restore_rng_offsets(s, bad, "model-3.safetensors"); },
                 {"model-3.safetensors", "rng_offsets", "line 1", "malformed"});
  // A malformed second line sets nothing.
  expect_error([&] { restore_rng_offsets(s, "40 drop\nbad", "f"); }, {"line 2"});
  EXPECT_TRUE(s.rng_offsets().empty());
  const auto warnings = restore_rng_offsets(s, "16 gone/Dropout\n24 drop\n", "f");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("gone/Dropout"), std::string::npos);
  ASSERT_EQ(s.rng_offsets().size(), 1u);
  EXPECT_EQ(s.rng_offsets()[0].second, 24u);
}

TEST(ExactResume, OlderCheckpointWithoutRngOffsetsStillRestores) {
  TempDir dir;
  DropoutGraph d;
  Output v;
  {
    DefaultGraphGuard guard(d.g);
    v = get_variable("w", Shape{2}, DType::F32, init::zeros()).value;
  }
  Session s(d.g);
  save_checkpoint(dir.file("old.safetensors"), {{"w", Tensor::from_vector<float>({2}, {3, 4})}},
                  {{"global_step", "7"}});
  s.run({d.out});
  CheckpointRestore(dir.file("old.safetensors")).init(s);
  EXPECT_EQ(s.variable_value(v.node).to_vector<float>(), (std::vector<float>{3, 4}));
  ASSERT_EQ(s.rng_offsets().size(), 1u);
  EXPECT_EQ(s.rng_offsets()[0].second, 8u);  // left where it was
}

// A FeedInput whose steps a test takes itself.
class PeekFeedInput : public FeedInput {
 public:
  using FeedInput::FeedInput;
  using FeedInput::next_step;
};

// The first component (a float) of `steps` steps of a FeedInput over `df`
// started at `global_step`.
std::vector<float> feed_steps(std::shared_ptr<DataFlow> df, int64_t global_step, int steps) {
  PeekFeedInput in(std::move(df));
  Graph g;
  in.setup({{"x", DType::F32, {1}}}, g);
  in.reset_state_at_step(global_step);
  std::vector<float> out;
  for (int i = 0; i < steps; ++i) {
    std::vector<std::vector<Tensor>> step;
    EXPECT_TRUE(in.next_step(step));
    out.push_back(step.at(0).at(0).to_vector<float>().at(0));
  }
  return out;
}

std::vector<Datapoint> numbered(int n) {
  std::vector<Datapoint> l;
  for (int i = 0; i < n; ++i) l.push_back({Tensor::from_vector<float>({1}, {static_cast<float>(i)})});
  return l;
}

TEST(ExactResume, FeedInputContinuesTheStreamAtTheGlobalStep) {
  // 5 shuffled datapoints per pass: steps 7..12 of a straight run are pass 1's
  // last three, then pass 2's first three.
  auto make = [] { return std::make_shared<DataFromList>(numbered(5), true, 9); };
  const std::vector<float> straight = feed_steps(make(), 0, 13);
  const std::vector<float> want(straight.begin() + 7, straight.end());
  EXPECT_EQ(feed_steps(make(), 7, 6), want);
  // Through a prefetching wrapper (set_next_epoch is passed on before its reset).
  EXPECT_EQ(feed_steps(std::make_shared<PrefetchData>(make(), 4), 7, 6), want);
  // A DataFlow that cannot skip passes is read through instead.
  auto fixed = std::make_shared<FixedSizeData>(make(), 5, /*keep_state=*/false);
  EXPECT_FALSE(fixed->can_set_next_epoch());
  const std::vector<float> fixed_straight = feed_steps(std::make_shared<FixedSizeData>(make(), 5, false), 0, 13);
  EXPECT_EQ(feed_steps(fixed, 7, 6), std::vector<float>(fixed_straight.begin() + 7, fixed_straight.end()));
}

TEST(ExactResume, SetNextEpochOnlyWherePassesMapOneToOne) {
  auto list = std::make_shared<DataFromList>(numbered(6), true, 1);
  BatchData batched(list, 2);
  EXPECT_TRUE(batched.can_set_next_epoch());
  batched.set_next_epoch(3);
  EXPECT_EQ(list->next_epoch(), 3);
  RepeatedData repeated(list, 2);
  EXPECT_FALSE(repeated.can_set_next_epoch());
  expect_error([&] { repeated.set_next_epoch(1); }, {"RepeatedData", "set_next_epoch(1)", "not one pass"});
  PrefetchData prefetch(list, 2);
  EXPECT_TRUE(prefetch.can_set_next_epoch());
  prefetch.reset_state();
  EXPECT_FALSE(prefetch.can_set_next_epoch());
  expect_error([&] { prefetch.set_next_epoch(1); }, {"PrefetchData", "workers already started"});
  prefetch.stop();
}

}  // namespace
}  // namespace spire::testing

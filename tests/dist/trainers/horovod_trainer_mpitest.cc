// HorovodTrainer under mpirun on 2, 3 and 4 ranks (runs in spire_mpi_tests):
// N ranks x batch b end with the variables SimpleTrainer reaches on the N*b
// batch (f64), bit-identical on every rank; synchronized BatchNorm across
// ranks equals BatchNorm over the whole batch; graphs that differ between
// ranks fail on every rank before the first step; every rank runs rank 0's
// loop; the distributed InferenceRunner gives the numbers of one
// InferenceRunner over the whole dataflow; with a (fake) GPU communicator the graph's
// collectives go to it and the host-side calls to the CPU control communicator, and a
// collective that differs on one rank fails every rank naming both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "core/ops.h"
#include "dist/comm/negotiated_communicator.h"
#include "dist/mpi/mpi_communicator.h"
#include "dist/ops/collective_ops.h"
#include "dist/trainers/horovod_trainer.h"
#include "dist/mpi/mpi_runtime.h"
#include "layers/layers.h"
#include "train/callbacks.h"
#include "train/config.h"
#include "train/dataflow.h"
#include "train/input_source.h"
#include "train/model_desc.h"
#include "train/session_init.h"
#include "tests/dist/comm/fake_gpu_communicator.h"
#include "tests/dist/mpi/mpi_test_util.h"
#include "tests/support/step_callbacks.h"
#include "tests/support/temp_dir.h"
#include "train/file_util.h"
#include "tests/support/tower_batches.h"

namespace spire {
namespace {

using testing::batches;
using testing::concatenated;

int rank() { return dist::MpiRuntime::get().rank(); }
int nranks() { return dist::MpiRuntime::get().size(); }

// x [-1, 4] -> FC(6, tanh) -> [BatchNorm] -> FC(3) -> mean softmax cross-entropy.
class Model : public ModelDesc {
 public:
  Model(bool adam, std::string bn = "none", bool extra = false, std::string fc1 = "fc1")
      : adam_(adam), bn_(std::move(bn)), extra_(extra), fc1_(std::move(fc1)) {}
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    if (bn_ != "none") h = BatchNorm("bn", h, BatchNormOptions().sync_statistics(parse_sync_statistics(bn_)));
    if (extra_) h = FullyConnected("extra", h, 6);
    Output logits = FullyConnected(fc1_, h, 3);
    Output xent = ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]);
    ops::cast(ops::not_equal(ops::argmax(logits, 1), in[1]), DType::F64, "incorrect_vector");
    return ops::mean(xent, {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override {
    if (adam_) return std::make_shared<AdamOptimizer>(0.05);
    return std::make_shared<MomentumOptimizer>(0.1, 0.9);
  }

 private:
  bool adam_;
  std::string bn_;
  bool extra_;
  std::string fc1_;
};

// Batches r, r + k, r + 2k, ...: rank r's share.
std::vector<Datapoint> shard(const std::vector<Datapoint>& bs, int r, int k) {
  std::vector<Datapoint> out;
  for (size_t i = static_cast<size_t>(r); i < bs.size(); i += static_cast<size_t>(k)) out.push_back(bs[i]);
  return out;
}

// A config running only the loop and `callbacks` (no monitors, no default callbacks) on `data`.
TrainConfig loop_config(std::shared_ptr<ModelDesc> model, std::vector<Datapoint> data,
                        int64_t steps_per_epoch, int max_epoch, std::vector<CallbackPtr> callbacks) {
  TrainConfig cfg;
  cfg.model = std::move(model);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(std::move(data), false));
  cfg.steps_per_epoch = steps_per_epoch;
  cfg.max_epoch = max_epoch;
  cfg.callbacks = std::move(callbacks);
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  return cfg;
}

std::map<std::string, Tensor> train(SingleCostTrainer& t, std::shared_ptr<ModelDesc> model,
                                    std::vector<Datapoint> data, int64_t steps, int max_epoch = 1,
                                    std::vector<CallbackPtr> callbacks = {}, uint64_t seed = 3,
                                    const std::map<std::string, Tensor>* init = nullptr) {
  TrainConfig cfg;
  cfg.model = std::move(model);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(std::move(data), false));
  cfg.steps_per_epoch = steps;
  cfg.max_epoch = max_epoch;
  cfg.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<RunUpdateOps>()};
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.callbacks = std::move(callbacks);
  if (init) cfg.session_init = std::make_shared<DictRestore>(*init);
  t.graph().set_seed(seed);
  launch_train_with_config(cfg, t);
  return get_variable_values(t.session());
}

// The variables of a freshly initialized model (seed 11).
std::map<std::string, Tensor> initial_values(bool adam, const std::string& bn = "none") {
  SimpleTrainer t;
  t.graph().set_seed(11);
  auto model = std::make_shared<Model>(adam, bn);
  t.setup_graph(model->get_input_signature(),
                std::make_shared<FeedInput>(std::make_shared<DataFromList>(batches(1, 2, 1), false)),
                [model](const std::vector<Output>& in) { return model->build_graph(in); },
                [model] { return model->get_optimizer(); });
  t.setup_callbacks({}, {});
  t.initialize({}, {});
  return get_variable_values(t.session());
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.element_as_double(i), y = b.element_as_double(i);
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(x)));
  }
  return worst;
}

// FNV-1a of every variable's bytes, by name.
uint64_t checksum(const std::map<std::string, Tensor>& vars) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : vars) {
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}


constexpr int kBatch = 5, kSteps = 4;

TEST(HorovodTrainer, RanksTimesBatchEqualsSimpleTrainerOnTheWholeBatchBitIdenticalOnEveryRank) {
  const int n = nranks();
  for (bool adam : {false, true}) {
    auto data = batches(n * kSteps, kBatch, 42);
    // Every rank initializes differently; rank 0 restores these initial
    // values, and its broadcast gives them to the others.
    const std::map<std::string, Tensor> init_values = initial_values(adam);
    SimpleTrainer simple;
    auto want = train(simple, std::make_shared<Model>(adam), concatenated(data, n), kSteps, 1, {}, 3,
                      &init_values);
    HorovodOptions o;
    o.fusion_threshold_bytes = 200;  // several buckets
    HorovodTrainer hvd(o);
    EXPECT_EQ(hvd.is_chief(), rank() == 0);
    EXPECT_EQ(hvd.rank(), rank());
    EXPECT_EQ(hvd.size(), n);
    auto got = train(hvd, std::make_shared<Model>(adam), shard(data, rank(), n), kSteps, 1, {},
                     /*seed=*/3 + static_cast<uint64_t>(rank()) * 1000, &init_values);
    EXPECT_GT(hvd.gradient_collectives().size(), 1u);
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_LE(max_rel_diff(w, got.at(name)), 1e-12) << (adam ? "adam " : "momentum ") << name;
    }
    EXPECT_EQ(got.at("global_step").item<int64_t>(), kSteps);
    const std::vector<int64_t> sums = testing::gather_from_ranks(static_cast<int64_t>(checksum(got)));
    for (int r = 1; r < n; ++r) EXPECT_EQ(sums[static_cast<size_t>(r)], sums[0]) << "rank " << r << " differs";
  }
}

TEST(HorovodTrainer, Fp16CompressionIsWithinHalfPrecisionOfTheF32Run) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 49);
  const std::map<std::string, Tensor> init = initial_values(false);
  HorovodTrainer exact;
  auto want = train(exact, std::make_shared<Model>(false), shard(data, rank(), n), kSteps, 1, {}, 3, &init);
  HorovodOptions o;
  o.compression = HorovodCompression::kFp16;
  HorovodTrainer half(o);
  auto got = train(half, std::make_shared<Model>(false), shard(data, rank(), n), kSteps, 1, {}, 3, &init);
  for (Node* c : half.gradient_collectives()) EXPECT_EQ(c->output_dtype(0), DType::F16) << c->name();
  double worst = 0;
  for (const auto& [name, w] : want) {
    if (name == "global_step") continue;
    const double d = max_rel_diff(w, got.at(name));
    worst = std::max(worst, d);
    // Each step's gradient is rounded to f16 (relative 2^-11) a few times;
    // 4 steps of momentum 0.9 with learning rate 0.1 move the weights by a
    // fraction of that.
    EXPECT_LE(d, 2e-3) << name;
  }
  EXPECT_GT(worst, 0) << "fp16 compression changed nothing: were the gradients compressed?";
  // Still identical on every rank.
  const std::vector<int64_t> sums = testing::gather_from_ranks(static_cast<int64_t>(checksum(got)));
  for (int r = 1; r < n; ++r) EXPECT_EQ(sums[static_cast<size_t>(r)], sums[0]) << "rank " << r;
}

TEST(HorovodTrainer, OneBucketPerGradientAndSummedGradients) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 43);
  HorovodOptions o;
  o.fusion_threshold_bytes = 0;
  o.average = false;
  HorovodTrainer hvd(o);
  train(hvd, std::make_shared<Model>(false), shard(data, rank(), n), kSteps);
  EXPECT_EQ(hvd.gradient_collectives().size(), 4u);  // fc0/W, fc0/b, fc1/W, fc1/b
  for (Node* c : hvd.gradient_collectives()) {
    EXPECT_EQ(c->attr<std::string>("reduction"), "sum");
    EXPECT_TRUE(c->attr<bool>("overlap")) << c->name() << " does not run on a lane of its own";
  }
  // The buckets' allreduces run on a second lane of cpu:0, beside the backward pass.
  const FeedDict feeds{{hvd.graph().find_node("x")->output(0), Tensor::zeros(DType::F64, {kBatch, 4})},
                       {hvd.graph().find_node("label")->output(0), Tensor::zeros(DType::I64, {kBatch})}};
  const std::string plan = hvd.session().plan_text({}, feeds, {hvd.train_op});
  EXPECT_NE(plan.find("AllReduce/bucket0/allreduce"), std::string::npos) << plan;
  EXPECT_EQ(std::count(plan.begin(), plan.end(), '\n'), 2) << plan;
  // Explicit order: each bucket's allreduce waits for the previous one.
  const auto& cs = hvd.gradient_collectives();
  for (size_t i = 1; i < cs.size(); ++i) {
    const auto& deps = cs[i]->control_inputs();
    EXPECT_NE(std::find(deps.begin(), deps.end(), cs[i - 1]), deps.end()) << cs[i]->name();
  }
}

// x [-1, 512] -> 6 x FC(512, tanh) -> FC(4) -> mean softmax cross-entropy (f32): 1 MiB of
// gradients per hidden layer, so a backward pass long enough to overlap and several buckets.
class DeepModel : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F32, {-1, kWidth}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = in[0];
    for (int i = 0; i < 6; ++i)
      h = FullyConnected(str_cat("fc", i), h, kWidth, FullyConnectedOptions().activation(ops::tanh));
    Output logits = FullyConnected("logits", h, 4);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override { return std::make_shared<MomentumOptimizer>(0.01, 0.9); }
  static constexpr int64_t kWidth = 512;
};

TEST(HorovodTrainer, TheFirstBucketsAllreduceStartsBeforeTheLastGradientIsComputed) {
  // From the executor's own timestamps (a traced step on every rank): the first bucket
  // (the last layers' gradients, made first) is all-reduced on its own lane while the
  // main lane still computes the first layers' gradients.
  const int64_t batch = 256;
  std::mt19937_64 rng(60 + static_cast<uint64_t>(rank()));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Datapoint> data;
  for (int k = 0; k < 4; ++k) {
    Tensor x(DType::F32, {batch, DeepModel::kWidth}), y(DType::I64, {batch});
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
    for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % 4;
    data.push_back({x, y});
  }
  HorovodOptions o;
  o.fusion_threshold_bytes = int64_t{2} << 20;  // 1 MiB per layer: one or two layers a bucket
  HorovodTrainer hvd(o);
  launch_train_with_config(loop_config(std::make_shared<DeepModel>(), data, 2, 1, {}), hvd);
  const auto& buckets = hvd.gradient_collectives();
  ASSERT_GE(buckets.size(), 3u);
  // The gradients: the buckets' inputs (a bucket of several packs them, a Concat of Reshapes).
  std::set<std::string> grads, last_bucket;
  for (Node* b : buckets) {
    Node* in = b->input(0).node;
    std::vector<std::string> names;
    if (in->op_type() == "Concat")
      for (const Output& part : in->inputs()) names.push_back(part.node->input(0).node->name());
    else
      names.push_back(in->name());
    grads.insert(names.begin(), names.end());
    if (b == buckets.back()) last_bucket.insert(names.begin(), names.end());
  }
  const FeedDict feeds{{hvd.graph().find_node("x")->output(0), data[0][0]},
                       {hvd.graph().find_node("label")->output(0), data[0][1]}};
  for (int step = 0; step < 3; ++step) {
    StepStats stats;
    hvd.session().run_without_hooks({}, feeds, {hvd.train_op}, &stats);
    int64_t first_start = -1, first_lane = -1, last_grad_end = -1, main_lane = -1;
    int64_t last_bucket_start = std::numeric_limits<int64_t>::max();
    std::string last_grad;
    for (const TraceEvent& e : stats.events) {
      if (e.depth != 0) continue;
      if (last_bucket.count(e.name)) last_bucket_start = std::min(last_bucket_start, e.start_ns);
      if (e.name == buckets[0]->name()) {
        first_start = e.start_ns;
        first_lane = e.lane;
      }
      if (grads.count(e.name) && e.end_ns > last_grad_end) {
        last_grad_end = e.end_ns;
        last_grad = e.name;
        main_lane = e.lane;
      }
    }
    ASSERT_GE(first_start, 0) << buckets[0]->name() << " not traced";
    ASSERT_GE(last_grad_end, 0);
    EXPECT_NE(first_lane, main_lane) << "the allreduce runs on a lane of its own";
    // It is issued before the main lane even starts on the last bucket's gradients (the first
    // layers'): the executor follows the buckets' order through the backward pass.
    EXPECT_LT(first_start, last_bucket_start)
        << "rank " << rank() << " step " << step << ": " << buckets[0]->name() << " started at "
        << first_start / 1000 << " us, after the last bucket's gradients started at " << last_bucket_start / 1000
        << " us";
    EXPECT_LT(first_start, last_grad_end)
        << "rank " << rank() << " step " << step << ": " << buckets[0]->name() << " started at "
        << first_start / 1000 << " us, after the last gradient (" << last_grad << ") ended at "
        << last_grad_end / 1000 << " us";
  }
}

TEST(HorovodTrainer, SyncBatchNormAcrossRanksEqualsBatchNormOverTheWholeBatch) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 47);
  const auto init = initial_values(false, "");
  SimpleTrainer simple;
  auto want = train(simple, std::make_shared<Model>(false, ""), concatenated(data, n), kSteps, 1, {}, 3, &init);
  HorovodTrainer hvd;
  auto got = train(hvd, std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), kSteps, 1, {}, 3, &init);
  for (const auto& [name, w] : want) EXPECT_LE(max_rel_diff(w, got.at(name)), 1e-10) << name;
  // The buckets are on a communicator of their own: the BatchNorm allreduces (the backward
  // pass's on the main lane) never wait for a bucket.
  const auto& buckets = hvd.gradient_collectives();
  for (Node* b : buckets) EXPECT_EQ(b->attr<std::string>("communicator"), HorovodTrainer::bucket_communicator_name());
  const auto bn = dist::collective_nodes(hvd.graph(), HorovodTrainer::communicator_name());
  EXPECT_GE(bn.size(), 4u);  // mean and variance, forward and backward
  for (Node* c : bn)
    for (Node* dep : c->control_inputs())
      EXPECT_EQ(std::find(buckets.begin(), buckets.end(), dep), buckets.end()) << c->name() << " waits for " << dep->name();
  EXPECT_GT(max_rel_diff(want.at("bn/mean/EMA"), Tensor(want.at("bn/mean/EMA").dtype(), want.at("bn/mean/EMA").shape())), 1e-6);
}

TEST(HorovodTrainer, GraphsThatDifferBetweenRanksFailOnEveryRankBeforeTheFirstStep) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 44);
  HorovodOptions o;
  o.timeout_seconds = 20;
  HorovodTrainer hvd(o);
  // The last rank's model has one more layer.
  try {
    train(hvd, std::make_shared<Model>(false, "none", rank() == n - 1), shard(data, rank(), n), kSteps);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("HorovodTrainer: the ranks' collectives"), std::string::npos) << msg;
    EXPECT_NE(msg.find(str_cat("ranks disagree: rank ", n - 1, " has ")), std::string::npos) << msg;
    EXPECT_NE(msg.find("the first difference is item 0"), std::string::npos) << msg;
  }
}

// Runs the training tower's cost once, outside the training step, on the process it runs on
// (chief-only: rank 0): a run through the synchronized BatchNorm, whose allreduce the other
// ranks never issue.
class ChiefOnlyCostRun : public Callback {
 public:
  explicit ChiefOnlyCostRun(Datapoint batch) : batch_(std::move(batch)) {}
  std::string name() const override { return "ChiefOnlyCostRun"; }

 protected:
  void _before_train() override {
    Graph& g = trainer().graph();
    Output cost = get_tensor_maybe_in_tower(trainer(), "cost");
    trainer().session().run_without_hooks(
        {cost}, {{g.output_by_name("x"), batch_[0]}, {g.output_by_name("label"), batch_[1]}});
  }

 private:
  Datapoint batch_;
};

TEST(HorovodTrainer, ACollectiveIssuedOnTheChiefAloneFailsEveryRankNamingBothCollectives) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 48);
  HorovodOptions o;
  o.timeout_seconds = 20;
  HorovodTrainer hvd(o);
  try {
    train(hvd, std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), kSteps, 1,
          {std::make_shared<ChiefOnlyCostRun>(data[0])});
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const Error& e) {
    // Rank 0's extra BatchNorm allreduce meets the others' first collective (the loop's stop
    // agreement at the epoch boundary), which the per-call signature tells apart and names.
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ranks disagree: rank "), std::string::npos) << msg;
    const size_t first = msg.find(" called allreduce '"), second = msg.find(" where rank 0 called ");
    ASSERT_NE(first, std::string::npos) << msg;
    ASSERT_NE(second, std::string::npos) << msg;
    EXPECT_NE(msg.find("bn/", first), std::string::npos) << "the BatchNorm collective is named: " << msg;
  }
}

TEST(HorovodTrainer, BucketsOfTheSameSizesButOtherVariablesFailEveryRankBeforeTheFirstStep) {
  // The last rank names its output layer differently: every collective has the same name,
  // kind and size, but the gradient bucket holds other variables.
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 49);
  HorovodOptions o;
  o.timeout_seconds = 20;
  HorovodTrainer hvd(o);
  try {
    train(hvd, std::make_shared<Model>(false, "none", false, rank() == n - 1 ? "head" : "fc1"),
          shard(data, rank(), n), kSteps);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("HorovodTrainer: the ranks' collectives"), std::string::npos) << msg;
    EXPECT_NE(msg.find(str_cat("ranks disagree: rank ", n - 1, " has ")), std::string::npos) << msg;
    EXPECT_NE(msg.find("head/W"), std::string::npos) << msg;
  }
}

// How often `needle` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(HorovodTrainer, TimelineWritesOneFilePerRankWithTheCollectivesOfEachStep) {
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 50);
  testing::TempDir dir;  // each rank's own job directory (only the chief's gets monitors)
  HorovodTrainer hvd;
  auto timeline = std::make_shared<Timeline>(TraceWindow{2, 2});
  TrainConfig cfg = loop_config(std::make_shared<Model>(false, "horovod"), shard(data, rank(), n),
                                kSteps, 1, {timeline});
  cfg.logdir = dir.path();
  launch_train_with_config(cfg, hvd);
  const std::string path = dir.path() + "/timeline-rank" + std::to_string(rank()) + ".json";
  ASSERT_EQ(timeline->path(), path);
  const std::string json = read_file(path);
  EXPECT_NE(json.find(str_cat("\"name\":\"HorovodTrainer: rank ", rank())), std::string::npos);
  // Two traced steps, each with the synchronized BatchNorm's and the gradients' allreduces.
  const size_t allreduces = occurrences(json, "\"cat\":\"AllReduce\"");
  const size_t runs = occurrences(json, "\"name\":\"train_op\"");
  EXPECT_EQ(runs, 2u) << json.substr(0, 2000);
  EXPECT_GE(allreduces, 4u) << json.substr(0, 2000);
  // Each allreduce's phases on the MPI communicator: waiting for the other ranks, then the
  // transfer with its algorithm and bytes.
  const size_t waits = occurrences(json, ".wait\",\"cat\":\"collective\"");
  const size_t transfers = occurrences(json, ".transfer\",\"cat\":\"collective\"");
  EXPECT_EQ(waits, allreduces) << json.substr(0, 3000);
  EXPECT_EQ(transfers, allreduces);
  EXPECT_NE(json.find("\"algorithm\":\""), std::string::npos);
  EXPECT_NE(json.find("\"bytes\":\""), std::string::npos);
}

// Records the loop each rank ran.
class LoopRecorder : public Callback {
 public:
  LoopRecorder() { chief_only_ = false; }
  int first = 0, last = 0;
  int64_t steps = 0;

 protected:
  void _before_epoch() override {
    if (!first) first = trainer().epoch_num();
    last = trainer().epoch_num();
  }
  void _trigger_step() override { ++steps; }
};

// Raises StopTraining after global step `step` (in trigger_step) or, with `at_epoch_end`,
// in after_epoch once that step is done, on the rank it runs on.
class StopAfterStep : public Callback {
 public:
  StopAfterStep(int64_t step, bool chief_only, bool at_epoch_end = false)
      : step_(step), at_epoch_end_(at_epoch_end) {
    chief_only_ = chief_only;
  }
  std::string name() const override { return "StopAfterStep"; }

 protected:
  void _trigger_step() override {
    if (!at_epoch_end_ && trainer().global_step() == step_) throw StopTraining("enough");
  }
  void _after_epoch() override {
    if (at_epoch_end_ && trainer().global_step() >= step_) throw StopTraining("enough at the epoch's end");
  }

 private:
  int64_t step_;
  bool at_epoch_end_;
};

TEST(HorovodTrainer, AStopOnOneRankEndsEveryRankCleanlyAtTheNextStep) {
  const int n = nranks();
  auto data = batches(n * 12, kBatch, 51);
  for (bool from_chief : {true, false}) {
    HorovodOptions o;
    o.timeout_seconds = 20;
    HorovodTrainer hvd(o);
    auto rec = std::make_shared<LoopRecorder>();
    std::vector<CallbackPtr> cbs = {rec};
    // From the chief (a chief-only callback), or from the last rank alone.
    if (from_chief || rank() == n - 1) cbs.push_back(std::make_shared<StopAfterStep>(5, from_chief));
    TrainConfig cfg = loop_config(std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), 4, 3, cbs);
    launch_train_with_config(cfg, hvd);  // no error on any rank
    EXPECT_EQ(hvd.global_step(), 5) << "rank " << rank() << (from_chief ? ", chief stops" : ", last rank stops");
    EXPECT_EQ(rec->steps, 5);
    EXPECT_EQ(rec->last, 2) << "no rank starts epoch 3";
    // Every rank still meets the others afterwards.
    EXPECT_EQ(hvd.broadcast_from_chief(rank() + 20, "after the stop"), 20);
  }
}

TEST(HorovodTrainer, AStopAtTheEndOfAnEpochOnTheChiefEndsEveryRankAfterThatEpoch) {
  // The chief stops in after_epoch of epoch 1; the epoch's other end hooks (the every-epoch
  // broadcast of the variables, a collective) still run on every rank; epoch 2 never starts.
  const int n = nranks();
  auto data = batches(n * 12, kBatch, 52);
  HorovodOptions o;
  o.timeout_seconds = 20;
  HorovodTrainer hvd(o);
  auto rec = std::make_shared<LoopRecorder>();
  std::vector<CallbackPtr> cbs = {std::make_shared<StopAfterStep>(2, true, true), rec};
  TrainConfig cfg = loop_config(std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), 4, 3, cbs);
  launch_train_with_config(cfg, hvd);
  EXPECT_EQ(hvd.global_step(), 4) << "rank " << rank();
  EXPECT_EQ(rec->last, 1);
  EXPECT_EQ(hvd.broadcast_from_chief(rank() + 30, "after the stop"), 30);
}

TEST(HorovodTrainer, EveryRankRunsRankZerosLoop) {
  const int n = nranks();
  auto data = batches(n * 12, kBatch, 45);
  HorovodTrainer hvd;
  auto rec = std::make_shared<LoopRecorder>();
  TrainConfig cfg;
  cfg.model = std::make_shared<Model>(false);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(shard(data, rank(), n), false));
  // Rank 0 resumes at epoch 3 of 4 with 2 steps per epoch; the others were told otherwise.
  cfg.steps_per_epoch = rank() == 0 ? 2 : 3;
  cfg.starting_epoch = rank() == 0 ? 3 : 1;
  cfg.max_epoch = 4;
  cfg.callbacks = {rec};
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  launch_train_with_config(cfg, hvd);
  EXPECT_EQ(rec->first, 3);
  EXPECT_EQ(rec->last, 4);
  EXPECT_EQ(rec->steps, 4);
  EXPECT_EQ(hvd.broadcast_from_chief(rank() + 10, "probe"), 10);
}

TEST(HorovodTrainer, DistributedInferenceRunnerSumsTheRanksCounts) {
  const int n = nranks();
  auto data = batches(n * 2, kBatch, 46);
  auto val = batches(7, 3, 99);  // 7 batches: the shards differ in size
  auto stats = [] {
    return std::vector<InferencerPtr>{std::make_shared<ScalarStats>("cost"),
                                      std::make_shared<ClassificationError>("incorrect_vector")};
  };
  HorovodTrainer hvd;
  auto inf = stats();
  auto runner = std::make_shared<DistributedInferenceRunner>(
      std::make_shared<DataFromList>(val, false), inf, rank(), n);
  train(hvd, std::make_shared<Model>(false), shard(data, rank(), n), 2, 1, {runner});
  const double err = inf[1]->after_inference().at("validation_error");
  const double cost = inf[0]->after_inference().at("validation_cost");
  // One InferenceRunner over all of `val` on the same variables.
  auto whole = stats();
  auto df = std::make_shared<DataFromList>(val, false);
  df->reset_state();
  auto predict = hvd.get_predictor({"x", "label"}, {"cost", "incorrect_vector"});
  for (auto& i : whole) i->before_inference();
  for (auto& dp : df->epoch()) {
    auto out = predict(dp);
    whole[0]->on_fetches({out[0]});
    whole[1]->on_fetches({out[1]});
  }
  EXPECT_NEAR(whole[1]->after_inference().at("validation_error"), err, 1e-12);
  EXPECT_NEAR(whole[0]->after_inference().at("validation_cost"), cost, 1e-12);
}

TEST(HorovodTrainer, WithAGpuCommunicatorTheGraphCollectivesGoToItAndTheHostCallsToTheControlCommunicator) {
  // NCCL across the processes, as make_process_communicator("nccl") gives it (negotiated over
  // MPI), stood in for by a fake that, as NCCL, rejects every host-side call; the trainer's
  // control communicator is a CPU one.
  const int n = nranks();
  auto data = batches(n * 3, kBatch, 50);
  auto val = batches(4, 3, 98);
  auto gpu = std::make_shared<testing::FakeGpuCommunicator>(std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20),
                                                            /*graph_calls_only=*/true);
  auto negotiation =
      std::make_shared<testing::RecordingCommunicator>(std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20));
  auto control =
      std::make_shared<testing::RecordingCommunicator>(std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20));
  HorovodOptions o;
  o.fusion_threshold_bytes = 200;  // several buckets
  o.communicator = std::make_shared<dist::NegotiatedCommunicator>(gpu, negotiation);
  o.control_communicator = control;
  HorovodTrainer hvd(o);
  EXPECT_EQ(&hvd.control_communicator(), control.get());
  std::vector<InferencerPtr> inf{std::make_shared<ScalarStats>("cost")};
  auto runner =
      std::make_shared<DistributedInferenceRunner>(std::make_shared<DataFromList>(val, false), inf, rank(), n);
  auto got = train(hvd, std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), 3, 1, {runner});
  EXPECT_EQ(got.at("global_step").item<int64_t>(), 3);
  EXPECT_TRUE(std::isfinite(inf[0]->after_inference().at("validation_cost")));

  // The graph's collectives (the variables' broadcast, synchronized BatchNorm, the gradient
  // buckets), each negotiated over MPI first; nothing else.
  const auto on_gpu = gpu->calls();
  std::map<std::string, int> seen;
  for (const auto& c : on_gpu) {
    EXPECT_TRUE(c.from_graph) << c.kind << " '" << c.name << "' is not a graph collective";
    for (const char* what : {"broadcast_global_variables/", "cross_rank_mean/", "AllReduce/bucket"})
      if (c.name.find(what) != std::string::npos) ++seen[what];
  }
  EXPECT_GE(seen["broadcast_global_variables/"], 1) << "the variables' broadcast";
  EXPECT_GE(seen["cross_rank_mean/"], 3 * 2) << "BatchNorm's statistics, forward and backward, each step";
  EXPECT_GE(seen["AllReduce/bucket"], 3 * 2) << "several buckets each step";
  const auto negotiated = negotiation->calls();
  ASSERT_EQ(negotiated.size(), on_gpu.size());
  for (size_t i = 0; i < on_gpu.size(); ++i) EXPECT_EQ(negotiated[i].name, "negotiate " + on_gpu[i].name);

  // The host-side calls: the agreement before the first step, the loop's synchronization,
  // the stop agreement at every boundary, the validation's sums.
  const auto on_control = control->calls();
  std::map<std::string, int> host;
  for (const auto& c : on_control) {
    EXPECT_FALSE(c.from_graph) << c.kind << " '" << c.name << "' is a graph collective";
    ++host[c.kind + " " + c.name];
  }
  EXPECT_EQ(host["agree HorovodTrainer: the ranks' collectives"], 1);
  EXPECT_EQ(host["broadcast synchronize_loop"], 1);
  EXPECT_GE(host["allreduce stop training"], 3);
  EXPECT_EQ(host["allreduce DistributedInferenceRunner"], 1);
}

// Before training, rank 0 runs the training tower's cost (through synchronized BatchNorm's
// allreduce) and every other rank the variables' broadcast: the first collective differs.
class RankDependentRun : public Callback {
 public:
  explicit RankDependentRun(Datapoint batch) : batch_(std::move(batch)) { chief_only_ = false; }
  std::string name() const override { return "RankDependentRun"; }

 protected:
  void _before_train() override {
    Graph& g = trainer().graph();
    if (rank() == 0) {
      Output cost = get_tensor_maybe_in_tower(trainer(), "cost");
      trainer().session().run_without_hooks(
          {cost}, {{g.output_by_name("x"), batch_[0]}, {g.output_by_name("label"), batch_[1]}});
    } else {
      trainer().session().run_without_hooks({}, {}, {dynamic_cast<HorovodTrainer&>(trainer()).broadcast_op()});
    }
  }

 private:
  Datapoint batch_;
};

TEST(HorovodTrainer, WithANegotiatedGpuCommunicatorACollectiveThatDiffersOnOneRankFailsEveryRankNamingBoth) {
  // The fake, as NCCL, checks nothing; the negotiation over MPI names both collectives.
  const int n = nranks();
  auto data = batches(n * kSteps, kBatch, 51);
  auto gpu = std::make_shared<testing::FakeGpuCommunicator>(std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20),
                                                            /*graph_calls_only=*/true);
  HorovodOptions o;
  o.timeout_seconds = 20;
  o.communicator = std::make_shared<dist::NegotiatedCommunicator>(
      gpu, std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20));
  o.control_communicator = std::make_shared<dist::MpiCommunicator>(Device::cpu(), 20);
  HorovodTrainer hvd(o);
  const size_t before = gpu->calls().size();
  try {
    train(hvd, std::make_shared<Model>(false, "horovod"), shard(data, rank(), n), kSteps, 1,
          {std::make_shared<RankDependentRun>(data[0])});
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const DisagreementError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ranks disagree: rank "), std::string::npos) << msg;
    const size_t first = msg.find(" called broadcast 'broadcast_global_variables/"),
                 second = msg.find(" where rank 0 called allreduce 'bn/cross_rank_mean/");
    EXPECT_NE(first, std::string::npos) << msg;
    EXPECT_NE(second, std::string::npos) << msg;
    EXPECT_LT(first, second) << msg;
  }
  // The mismatched calls never reached the fake (only the broadcast after the session's
  // initialization did).
  for (size_t i = before; i < gpu->calls().size(); ++i)
    EXPECT_NE(gpu->calls()[i].name.find("broadcast_global_variables/"), std::string::npos) << gpu->calls()[i].name;
}

}  // namespace

// For rank_failures.py ("trainer" mode): a HorovodTrainer whose rank 1
// raises from a callback at its third step; every rank must end at once
// with an error naming rank 1 (the trainer announces the failure).
int run_trainer_failure() {
  const int n = nranks();
  auto data = batches(n * 50, kBatch, 48);
  HorovodOptions o;
  o.timeout_seconds = 30;  // the others must not need the timeout
  try {
    HorovodTrainer hvd(o);
    train(hvd, std::make_shared<Model>(false), shard(data, rank(), n), 50, 1, {std::make_shared<testing::AtStep>(3, [](Trainer&) {
                if (rank() == 1) throw_error("the model raised: boom");
              })});
    std::fprintf(stderr, "rank %d: no error\n", rank());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: spire::Error: %s\n", rank(), e.what());
    return 1;
  }
}

// A chief-only callback (as a validation or a checkpoint save is) that
// sleeps at the end of epoch 1 for SPIRE_TEST_SLEEP_SECONDS (default 125:
// twice the 60 s the other ranks' waits used to be limited to), while the
// other ranks wait for rank 0 at the step boundary, for
// tests/dist/mpi/rank_failures.py's "trainer-slow" mode: with HorovodTrainer's
// defaults the job ends well, the waiting ranks logging stall warnings.
int run_trainer_slow() {
  class SleepAtEpochEnd : public Callback {
   public:
    explicit SleepAtEpochEnd(double s) : seconds_(s) {}  // (chief-only: Callback's default)

   protected:
    void _trigger_epoch() override {
      if (trainer().epoch_num() == 1) std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
    }

   private:
    double seconds_;
  };
  const char* v = std::getenv("SPIRE_TEST_SLEEP_SECONDS");
  const double sleep = v && *v ? std::atof(v) : 125.0;
  const int n = nranks();
  auto data = batches(n * 20, kBatch, 48);
  try {
    HorovodTrainer hvd;
    const auto values = train(hvd, std::make_shared<Model>(false), shard(data, rank(), n), 5, 2,
                              {std::make_shared<SleepAtEpochEnd>(sleep)});
    // Every rank ends with the same variables (the steps after the pause were all-reduced).
    const Tensor& w = values.at("fc1/W");
    double sum = 0;
    for (int64_t i = 0; i < w.num_elements(); ++i) sum += w.data<double>()[i] * static_cast<double>(i + 1);
    std::fprintf(stderr, "rank %d: no error; fc1/W checksum %.17g\n", rank(), sum);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: spire::Error: %s\n", rank(), e.what());
    return 1;
  }
}

}  // namespace spire

// The data-parallel trainers on virtual CPU devices: K towers each fed a
// batch of b end a few steps with the variables SimpleTrainer reaches on the
// K*b concatenated batch (f64), for every replicated mode that runs on CPU
// devices, parameter-server mode, and SGD/Momentum/Adam; replicas,
// checkpoints, per-tower input, synchronized BatchNorm, inference on several
// devices, and the error cases.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "core/op_registry.h"
#include "dist/trainers/multi_device_trainers.h"
#include "layers/layers.h"
#include "tests/support/op_test_util.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/train/train_test_util.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/input_source.h"
#include "train/session_init.h"
#include "tests/support/tower_batches.h"

namespace spire::testing {
namespace {

enum class Opt { kSGD, kMomentum, kAdam };

// x [-1, 4] -> FC(6, tanh) -> [BatchNorm] -> FC(3) -> mean softmax cross-entropy.
class TowerModel : public ModelDesc {
 public:
  TowerModel(Opt opt, double lr, std::string bn_sync = "none")
      : opt_(opt), lr_(lr), bn_(std::move(bn_sync)) {}
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    if (bn_ != "none")
      h = BatchNorm("bn", h, BatchNormOptions().sync_statistics(parse_sync_statistics(bn_)));
    Output logits = FullyConnected("fc1", h, 3);
    Output xent = ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]);
    Output wrong = ops::cast(ops::not_equal(ops::argmax(logits, 1), in[1]), DType::F64,
                             "incorrect_vector");
    (void)wrong;
    return ops::mean(xent, {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override {
    switch (opt_) {
      case Opt::kSGD:
        return std::make_shared<GradientDescentOptimizer>(lr_);
      case Opt::kMomentum:
        return std::make_shared<MomentumOptimizer>(lr_, 0.9);
      case Opt::kAdam:
        return std::make_shared<AdamOptimizer>(lr_);
    }
    return nullptr;
  }

 private:
  Opt opt_;
  double lr_;
  std::string bn_;
};

// Initial values every trainer of a comparison restores (the masters).
std::map<std::string, Tensor> initial_values(Opt opt, const std::string& bn = "none") {
  SimpleTrainer t;
  t.graph().set_seed(7);
  auto model = std::make_shared<TowerModel>(opt, 0.1, bn);
  t.setup_graph(model->get_input_signature(),
                std::make_shared<FeedInput>(std::make_shared<DataFromList>(batches(1, 2, 1), false)),
                [model](const std::vector<Output>& in) { return model->build_graph(in); },
                [model] { return model->get_optimizer(); });
  t.setup_callbacks({}, {});
  t.initialize({}, {});
  return get_variable_values(t.session());
}

struct RunResult {
  std::map<std::string, Tensor> values;  // global variables after training
  std::map<std::string, Tensor> all;     // every variable (replicas too)
};

// Trains `t` on `data` (one datapoint per tower per step) for `steps` steps.
RunResult run(SingleCostTrainer& t, std::shared_ptr<ModelDesc> model, std::vector<Datapoint> data,
              int64_t steps, const std::map<std::string, Tensor>& init,
              std::vector<CallbackPtr> callbacks = {}, const std::string& logdir = "") {
  TrainConfig cfg;
  cfg.model = std::move(model);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(std::move(data), false));
  cfg.steps_per_epoch = steps;
  cfg.max_epoch = 1;
  cfg.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<RunUpdateOps>()};
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.callbacks = std::move(callbacks);
  cfg.session_init = std::make_shared<DictRestore>(init);
  cfg.logdir = logdir;
  t.graph().set_seed(3);
  launch_train_with_config(cfg, t);
  RunResult r;
  r.values = get_variable_values(t.session());
  for (const Variable& v : all_variables(&t.graph()))
    r.all[v.name()] = t.session().variable_value(v.node());
  return r;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.element_as_double(i), y = b.element_as_double(i);
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(x)));
  }
  return worst;
}

// Every variable of `want` is in `got` with (nearly) the same value.
void expect_same_variables(const std::map<std::string, Tensor>& want,
                           const std::map<std::string, Tensor>& got, double tol,
                           const std::string& what) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    ASSERT_EQ(it->second.shape(), w.shape()) << what << ": " << name;
    EXPECT_LE(max_rel_diff(w, it->second), tol) << what << ": " << name;
  }
}

std::vector<Device> cpus(int k) {
  std::vector<Device> d;
  for (int i = 0; i < k; ++i) d.push_back(Device::cpu(i));
  return d;
}

const char* opt_name(Opt o) {
  return o == Opt::kSGD ? "sgd" : o == Opt::kMomentum ? "momentum" : "adam";
}

// ---- equivalence -------------------------------------------------------------------------

constexpr int kTowers = 2, kBatch = 5, kSteps = 4;

TEST(MultiDeviceTrainers, ReplicatedEqualsSimpleTrainerOnTheWholeBatch) {
  for (Opt opt : {Opt::kSGD, Opt::kMomentum, Opt::kAdam}) {
    auto init = initial_values(opt);
    auto data = batches(kTowers * kSteps, kBatch, 42);
    SimpleTrainer simple;
    auto want = run(simple, std::make_shared<TowerModel>(opt, 0.1), concatenated(data, kTowers),
                    kSteps, init);
    // Training moved the variables (the comparison is not vacuous).
    EXPECT_GT(max_rel_diff(init.at("fc0/W"), want.values.at("fc0/W")), 1e-3);
    for (const char* mode : {"ring", "cpu", "gpu"}) {
      SyncMultiGPUTrainerReplicated t(cpus(kTowers), true, parse_replicated_mode(mode));
      auto got = run(t, std::make_shared<TowerModel>(opt, 0.1), data, kSteps, init);
      const std::string what = std::string(opt_name(opt)) + "/" + mode;
      expect_same_variables(want.values, got.values, 1e-12, what);
      // Replicas are not saved, and equal their masters after the steps.
      EXPECT_EQ(got.values.count("tower1/fc0/W"), 0u) << what;
      for (const auto& [name, v] : got.all)
        if (name.rfind("tower1/", 0) == 0)
          EXPECT_LE(max_rel_diff(got.all.at(name.substr(7)), v), 1e-12) << what << ": " << name;
      EXPECT_EQ(got.values.at("global_step").item<int64_t>(), kSteps) << what;
    }
  }
}

// The device of the node `prefix...` whose name contains `part`.
std::vector<std::pair<std::string, Device>> nodes_under(const Graph& g, const std::string& prefix) {
  std::vector<std::pair<std::string, Device>> out;
  for (int id = 0; id < g.num_nodes(); ++id)
    if (g.node(id)->name().rfind(prefix, 0) == 0) out.push_back({g.node(id)->name(), g.node(id)->device()});
  return out;
}

TEST(MultiDeviceTrainers, NaiveModesSumOnTensorpacksDevices) {
  // 4 gradients (fc0/W, fc0/b, fc1/W, fc1/b) in reverse: fc1/b on devices[0],
  // fc1/W on devices[1], fc0/b on devices[2], fc0/W on devices[0]; "cpu" mode: all on cpu:0.
  auto init = initial_values(Opt::kSGD);
  std::vector<Device> devs = {Device::cpu(2), Device::cpu(1), Device::cpu(0)};
  SyncMultiGPUTrainerReplicated t(devs, true, ReplicatedMode::kGpu);
  run(t, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(3, 2, 1), 1, init);
  auto sums = nodes_under(t.graph(), "AllReduceNaive/add_n");
  ASSERT_EQ(sums.size(), 4u);
  std::vector<Device> want = {devs[0], devs[1], devs[2], devs[0]};  // creation order = reverse
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(sums[r].second, want[r]) << sums[r].first;
  SyncMultiGPUTrainerReplicated c({Device::cpu(1), Device::cpu(2)}, true, ReplicatedMode::kCpu);
  run(c, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2, 2, 1), 1, init);
  for (const auto& [name, dev] : nodes_under(c.graph(), "AllReduceNaive/add_n"))
    EXPECT_EQ(dev, Device::cpu(0)) << name;
}

TEST(MultiDeviceTrainers, AdamBiasCorrectionAdvancesOncePerStep) {
  auto init = initial_values(Opt::kAdam);
  SyncMultiGPUTrainerReplicated t(cpus(3));
  auto got = run(t, std::make_shared<TowerModel>(Opt::kAdam, 0.1), batches(3 * kSteps, kBatch, 5),
                 kSteps, init);
  EXPECT_NEAR(got.values.at("beta1_power").item<double>(), std::pow(0.9, kSteps + 1), 1e-15);
  EXPECT_NEAR(got.values.at("beta2_power").item<double>(), std::pow(0.999, kSteps + 1), 1e-15);
  EXPECT_EQ(got.all.count("tower1/beta1_power"), 0u);
  EXPECT_EQ(got.all.count("tower2/fc0/W/Adam"), 1u);  // per-replica slots
}

TEST(MultiDeviceTrainers, HierarchicalModeOnEightDevices) {
  // 8 devices: packed (a model with >= 8 * 1024 gradient elements) and not.
  auto data = batches(8 * 2, 3, 9);
  auto init = initial_values(Opt::kMomentum);
  SimpleTrainer simple;
  auto want = run(simple, std::make_shared<TowerModel>(Opt::kMomentum, 0.1), concatenated(data, 8),
                  2, init);
  SyncMultiGPUTrainerReplicated t(cpus(8), true, ReplicatedMode::kHierarchical);
  EXPECT_EQ(t.mode(), ReplicatedMode::kHierarchical);
  auto got = run(t, std::make_shared<TowerModel>(Opt::kMomentum, 0.1), data, 2, init);
  expect_same_variables(want.values, got.values, 1e-12, "hierarchical (unpacked)");
  // Other counts fall back to the ring.
  SyncMultiGPUTrainerReplicated three(cpus(3), true, ReplicatedMode::kHierarchical);
  EXPECT_EQ(three.mode(), ReplicatedMode::kRing);
}

class WideModel : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 2048, FullyConnectedOptions().activation(ops::tanh));
    Output logits = FullyConnected("fc1", h, 3);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override {
    return std::make_shared<GradientDescentOptimizer>(0.05);
  }
};

TEST(MultiDeviceTrainers, HierarchicalModePacksLargeGradients) {
  auto data = batches(8, 2, 19);
  SimpleTrainer init_t;
  init_t.graph().set_seed(2);
  auto model = std::make_shared<WideModel>();
  init_t.setup_graph(model->get_input_signature(),
                     std::make_shared<FeedInput>(std::make_shared<DataFromList>(data, false)),
                     [model](const std::vector<Output>& in) { return model->build_graph(in); },
                     [model] { return model->get_optimizer(); });
  init_t.setup_callbacks({}, {});
  init_t.initialize({}, {});
  auto init = get_variable_values(init_t.session());
  SimpleTrainer simple;
  auto want = run(simple, std::make_shared<WideModel>(), concatenated(data, 8), 1, init);
  SyncMultiGPUTrainerReplicated t(cpus(8), true, ReplicatedMode::kHierarchical);
  auto got = run(t, std::make_shared<WideModel>(), data, 1, init);
  bool packed = false;
  for (int id = 0; id < t.graph().num_nodes(); ++id)
    packed = packed || t.graph().node(id)->name().find("AllReduceHierarchical/pack") != std::string::npos;
  EXPECT_TRUE(packed);
  // Chunk i: the half holding device i summed on device i, the other half on (i + 4) % 8.
  auto sums = [&](const std::string& prefix) {
    std::vector<const Node*> out;
    for (const auto& [name, dev] : nodes_under(t.graph(), prefix))
      if (t.graph().find_node(name)->op_type() == "AddN") out.push_back(t.graph().find_node(name));
    return out;
  };
  // Where an input comes from (through a Copy node).
  auto source_device = [](const Output& in) {
    return in.node->op_def().is_copy() ? in.node->input(0).device() : in.device();
  };
  auto g0 = sums("AllReduceHierarchical/group0_sum"), g1 = sums("AllReduceHierarchical/group1_sum");
  ASSERT_EQ(g0.size(), 8u);
  ASSERT_EQ(g1.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const Node* a = g0[static_cast<size_t>(i)];
    const Node* b = g1[static_cast<size_t>(i)];
    EXPECT_EQ(a->device(), Device::cpu(i)) << a->name();
    EXPECT_EQ(b->device(), Device::cpu((i + 4) % 8)) << b->name();
    ASSERT_EQ(a->num_inputs(), 4);
    ASSERT_EQ(b->num_inputs(), 4);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(source_device(a->input(j)).index / 4, i / 4) << a->name();
      EXPECT_EQ(source_device(b->input(j)).index / 4, 1 - i / 4) << b->name();
    }
  }
  expect_same_variables(want.values, got.values, 1e-12, "hierarchical (packed)");
}

TEST(MultiDeviceTrainers, ParameterServerEqualsSimpleTrainerOnTheWholeBatch) {
  for (Opt opt : {Opt::kSGD, Opt::kMomentum, Opt::kAdam}) {
    auto init = initial_values(opt);
    auto data = batches(kTowers * kSteps, kBatch, 43);
    SimpleTrainer simple;
    auto want = run(simple, std::make_shared<TowerModel>(opt, 0.1), concatenated(data, kTowers),
                    kSteps, init);
    for (const char* ps : {"cpu", "gpu"}) {
      SyncMultiGPUTrainerParameterServer t(cpus(kTowers), parse_ps_device(ps));
      auto got = run(t, std::make_shared<TowerModel>(opt, 0.1), data, kSteps, init);
      expect_same_variables(want.values, got.values, 1e-12,
                            std::string(opt_name(opt)) + "/ps=" + ps);
      EXPECT_EQ(got.all.size(), want.all.size());  // no replicas in PS mode
    }
  }
}

TEST(MultiDeviceTrainers, ParameterServerPlacesVariablesOnTheLeastLoadedDevice) {
  SyncMultiGPUTrainerParameterServer t(cpus(2), PsDevice::kGpu);
  run(t, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2, 2, 1), 1,
      initial_values(Opt::kSGD));
  // Creation order fc0/W (24), fc0/b (6), fc1/W (18), fc1/b (3): loads 24|0, 24|6, 24|24, 27|24.
  auto dev = [&](const std::string& n) { return find_variable(t, n)->device(); };
  EXPECT_EQ(dev("fc0/W"), Device::cpu(0));
  EXPECT_EQ(dev("fc0/b"), Device::cpu(1));
  EXPECT_EQ(dev("fc1/W"), Device::cpu(1));
  EXPECT_EQ(dev("fc1/b"), Device::cpu(0));
  SyncMultiGPUTrainerParameterServer c(cpus(2), PsDevice::kCpu);
  run(c, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2, 2, 1), 1,
      initial_values(Opt::kSGD));
  EXPECT_EQ(find_variable(c, "fc0/b")->device(), Device::cpu(0));
}

TEST(MultiDeviceTrainers, SumInsteadOfAverageEqualsKTimesTheLearningRate) {
  auto init = initial_values(Opt::kSGD);
  init.erase("learning_rate");  // each trainer keeps its own
  auto data = batches(kTowers * kSteps, kBatch, 44);
  SimpleTrainer simple;
  auto want = run(simple, std::make_shared<TowerModel>(Opt::kSGD, 0.1 * kTowers),
                  concatenated(data, kTowers), kSteps, init);
  want.values.erase("learning_rate");
  for (const char* mode : {"ring", "cpu"}) {
    SyncMultiGPUTrainerReplicated t(cpus(kTowers), /*average=*/false, parse_replicated_mode(mode));
    auto got = run(t, std::make_shared<TowerModel>(Opt::kSGD, 0.1), data, kSteps, init);
    expect_same_variables(want.values, got.values, 1e-12, std::string("sum/") + mode);
  }
}

TEST(MultiDeviceTrainers, AsyncWithOneDeviceEqualsSimpleTrainer) {
  auto init = initial_values(Opt::kAdam);
  auto data = batches(kSteps, kBatch, 45);
  SimpleTrainer simple;
  auto want = run(simple, std::make_shared<TowerModel>(Opt::kAdam, 0.1), data, kSteps, init);
  AsyncMultiGPUTrainer t({Device::cpu(0)});
  auto got = run(t, std::make_shared<TowerModel>(Opt::kAdam, 0.1), data, kSteps, init);
  expect_same_variables(want.values, got.values, 0.0, "async K=1");
}

TEST(MultiDeviceTrainers, AsyncTowersEachApplyTheirGradients) {
  // Async updates interleave freely, so no exact result is expected:
  // training runs, the global step advances once per step, the variables move.
  auto init = initial_values(Opt::kSGD);
  AsyncMultiGPUTrainer t(cpus(2));
  auto got = run(t, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2 * 20, kBatch, 46), 20,
                 init);
  EXPECT_EQ(got.values.at("global_step").item<int64_t>(), 20);
  EXPECT_GT(max_rel_diff(init.at("fc0/W"), got.values.at("fc0/W")), 1e-3);
  // One update op per tower; without scaling the same data moves the variables further.
  int applies = 0;
  for (int id = 0; id < t.graph().num_nodes(); ++id)
    applies += t.graph().node(id)->name().rfind("apply_grad_", 0) == 0 &&
               t.graph().node(id)->name().find('/') == std::string::npos;
  EXPECT_EQ(applies, 2);
  AsyncMultiGPUTrainer u(cpus(2), /*scale_gradient=*/false);
  auto unscaled = run(u, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2 * 1, kBatch, 46), 1,
                      init);
  AsyncMultiGPUTrainer v(cpus(2));
  auto scaled = run(v, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(2 * 1, kBatch, 46), 1,
                    init);
  EXPECT_GT(max_rel_diff(init.at("fc1/b"), unscaled.values.at("fc1/b")),
            1.5 * max_rel_diff(init.at("fc1/b"), scaled.values.at("fc1/b")));
}

TEST(MultiDeviceTrainers, SyncMultiGPUTrainerIsParameterServerOnTheCpu) {
  auto t = SyncMultiGPUTrainer(cpus(2));
  auto* ps = dynamic_cast<SyncMultiGPUTrainerParameterServer*>(t.get());
  ASSERT_NE(ps, nullptr);
  EXPECT_EQ(ps->ps_device(), PsDevice::kCpu);
}

// ---- BatchNorm with synchronized statistics ---------------------------------------------------

TEST(MultiDeviceTrainers, SyncBatchNormEqualsBatchNormOverTheWholeBatch) {
  for (const char* trainer : {"replicated", "ps"}) {
    auto init = initial_values(Opt::kMomentum, "");
    auto data = batches(kTowers * kSteps, kBatch, 47);
    SimpleTrainer simple;
    auto want = run(simple, std::make_shared<TowerModel>(Opt::kMomentum, 0.1, ""),
                    concatenated(data, kTowers), kSteps, init);
    std::unique_ptr<SingleCostTrainer> t;
    if (std::string(trainer) == "ps") t = std::make_unique<SyncMultiGPUTrainerParameterServer>(cpus(kTowers));
    else t = std::make_unique<SyncMultiGPUTrainerReplicated>(cpus(kTowers));
    auto got = run(*t, std::make_shared<TowerModel>(Opt::kMomentum, 0.1, "towers"), data, kSteps,
                   init);
    // Weights and the moving averages (updated from the synced statistics).
    expect_same_variables(want.values, got.values, 1e-10, std::string("sync bn/") + trainer);
    EXPECT_GT(max_rel_diff(init.at("bn/mean/EMA"), got.values.at("bn/mean/EMA")), 1e-3);
  }
  // Without synchronization the towers normalize with their own batches: different.
  auto init = initial_values(Opt::kMomentum, "");
  auto data = batches(kTowers * kSteps, kBatch, 47);
  SimpleTrainer simple;
  auto want = run(simple, std::make_shared<TowerModel>(Opt::kMomentum, 0.1, ""),
                  concatenated(data, kTowers), kSteps, init);
  SyncMultiGPUTrainerReplicated t(cpus(kTowers));
  auto got = run(t, std::make_shared<TowerModel>(Opt::kMomentum, 0.1, ""), data, kSteps, init);
  EXPECT_GT(max_rel_diff(want.values.at("fc0/W"), got.values.at("fc0/W")), 1e-9);
}

// A model whose BatchNorm runs only in tower 0.
class SkippingModel : public TowerModel {
 public:
  SkippingModel() : TowerModel(Opt::kSGD, 0.1, "none") {}
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    auto* ctx = get_current_tower_context();
    // No beta/gamma: the towers' gradient lists agree, only the collective is missing.
    if (ctx && ctx->index() == 0)
      h = BatchNorm("bn", h,
                    BatchNormOptions().sync_statistics(SyncStatistics::kTowers).center(false).scale(false));
    Output logits = FullyConnected("fc1", h, 3);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
};

TEST(MultiDeviceTrainers, ASyncBatchNormThatSomeTowersSkipFailsClearly) {
  SyncMultiGPUTrainerParameterServer t(cpus(2));
  expect_error([&] { run(t, std::make_shared<SkippingModel>(), batches(2, 2, 1), 1, {}); },
               {"collective instance", "bn/moments", "none on cpu:1", "every tower"});
}

TEST(MultiDeviceTrainers, SyncBatchNormWithOneTowerWarnsAndUsesLocalStatistics) {
  auto init = initial_values(Opt::kSGD, "");
  auto data = batches(kSteps, kBatch, 48);
  SimpleTrainer a, b;
  auto plain = run(a, std::make_shared<TowerModel>(Opt::kSGD, 0.1, ""), data, kSteps, init);
  auto synced = run(b, std::make_shared<TowerModel>(Opt::kSGD, 0.1, "towers"), data, kSteps, init);
  expect_same_variables(plain.values, synced.values, 0.0, "one tower");
}

// ---- input per tower ---------------------------------------------------------------------------

TEST(MultiDeviceTrainers, EveryTowerTakesItsOwnDatapointOnItsDevice) {
  Graph g;
  auto list = std::make_shared<DataFromList>(batches(6, 2, 3), false);
  FeedInput in(list);
  auto cbs = in.setup({{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}}, g, cpus(3));
  ASSERT_EQ(in.num_towers(), 3);
  EXPECT_EQ(in.get_input_tensors(0)[0].name(), "x:0");
  EXPECT_EQ(in.get_input_tensors(2)[0].name(), "input2/x:0");
  EXPECT_EQ(in.get_input_tensors(2)[0].device(), Device::cpu(2));
  expect_error([&] { in.get_input_tensors(3); }, {"tower 3 does not exist", "3 towers"});
  std::vector<Datapoint> got;
  // Two steps of three towers: datapoints 0..5 in order.
  auto dps = batches(6, 2, 3);
  Session sess(g);
  std::vector<Output> no_fetches;
  std::vector<Node*> no_targets;
  SessionRunContext ctx{sess, no_fetches, no_targets};
  in.reset_state();
  auto* cb = cbs.at(0).get();
  for (int step = 0; step < 2; ++step) {
    SessionRunArgs args = cb->before_run(ctx);
    ASSERT_EQ(args.feeds.size(), 6u);
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(args.feeds[static_cast<size_t>(2 * k)].second.to_vector<double>(),
                dps[static_cast<size_t>(step * 3 + k)][0].to_vector<double>());
  }
}

TEST(MultiDeviceTrainers, AStepTakesEveryTowersInputOrNone) {
  Graph g;
  // 5 datapoints, 2 towers, not infinite: two steps, then a stop (the fifth is not fed alone).
  FeedInput in(std::make_shared<DataFromList>(batches(5, 2, 3), false), /*infinite=*/false);
  auto cbs = in.setup({{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}}, g, cpus(2));
  in.reset_state();
  Session sess(g);
  std::vector<Output> no_fetches;
  std::vector<Node*> no_targets;
  SessionRunContext ctx{sess, no_fetches, no_targets};
  EXPECT_EQ(cbs[0]->before_run(ctx).feeds.size(), 4u);
  EXPECT_EQ(cbs[0]->before_run(ctx).feeds.size(), 4u);
  EXPECT_THROW(cbs[0]->before_run(ctx), StopTraining);
}

TEST(MultiDeviceTrainers, StagingInputTrainsLikeFeedInput) {
  auto init = initial_values(Opt::kMomentum);
  auto data = batches(kTowers * kSteps, kBatch, 49);
  SyncMultiGPUTrainerReplicated a(cpus(kTowers));
  auto want = run(a, std::make_shared<TowerModel>(Opt::kMomentum, 0.1), data, kSteps, init);
  // The same data through a StagingInput (what launch_train_with_config uses
  // for a dataflow and several towers): the same variables, every step staged.
  SyncMultiGPUTrainerReplicated b(cpus(kTowers));
  auto staging = std::make_shared<StagingInput>(
      std::make_shared<QueueInput>(std::make_shared<DataFromList>(data, false)), 2);
  TrainConfig cfg;
  cfg.model = std::make_shared<TowerModel>(Opt::kMomentum, 0.1);
  cfg.data = staging;
  cfg.max_epoch = 1;  // steps_per_epoch = 8 datapoints / 2 towers
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.session_init = std::make_shared<DictRestore>(init);
  launch_train_with_config(cfg, b);
  EXPECT_EQ(b.global_step(), kSteps);
  EXPECT_GE(staging->staged_steps(), kSteps);
  expect_same_variables(want.values, get_variable_values(b.session()), 0.0, "staging");
}

// A dataflow that fails at its `fail_at`-th datapoint (an epoch of `n`).
class FailingData : public DataFlow {
 public:
  FailingData(int n, int fail_at) : n_(n), fail_at_(fail_at), data_(batches(n, 2, 4)) {}
  bool has_size() const override { return true; }
  int64_t size() const override { return n_; }
  std::string name() const override { return "FailingData"; }

 protected:
  void begin_epoch_impl() override { i_ = 0; }
  bool next_impl(Datapoint& dp) override {
    if (i_ == fail_at_) throw_error("FailingData: broken record ", i_);
    if (i_ >= n_) return false;
    dp = data_[static_cast<size_t>(i_++)];
    return true;
  }

 private:
  int n_, fail_at_, i_ = 0;
  std::vector<Datapoint> data_;
};

TEST(MultiDeviceTrainers, StagingInputReportsDataErrorsAndTheEndOfTheData) {
  // An error of the dataflow reaches the training loop after the steps staged before it.
  {
    SyncMultiGPUTrainerReplicated t(cpus(2));
    TrainConfig cfg;
    cfg.model = std::make_shared<TowerModel>(Opt::kSGD, 0.1);
    cfg.data = std::make_shared<StagingInput>(std::make_shared<FeedInput>(std::make_shared<FailingData>(8, 5)));
    cfg.max_epoch = 1;
    cfg.monitors = std::vector<MonitorPtr>{};
    cfg.extra_callbacks = std::vector<CallbackPtr>{};
    int64_t steps_done = -1;
    try {
      launch_train_with_config(cfg, t);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken record 5"), std::string::npos) << e.what();
      steps_done = t.global_step();
    }
    EXPECT_EQ(steps_done, 2);  // datapoints 0-3 made two steps; 4 and the failing 5 none
  }
  // A finite dataflow ends training cleanly, never with half a step.
  {
    SyncMultiGPUTrainerReplicated t(cpus(2));
    TrainConfig cfg;
    cfg.model = std::make_shared<TowerModel>(Opt::kSGD, 0.1);
    cfg.data = std::make_shared<StagingInput>(std::make_shared<FeedInput>(
        std::make_shared<DataFromList>(batches(5, 2, 3), false), /*infinite=*/false));
    cfg.steps_per_epoch = 10;
    cfg.max_epoch = 1;
    cfg.monitors = std::vector<MonitorPtr>{};
    cfg.extra_callbacks = std::vector<CallbackPtr>{};
    launch_train_with_config(cfg, t);
    EXPECT_EQ(t.global_step(), 2);
  }
}

// ---- replicas, checkpoints, restore ---------------------------------------------------------

TEST(MultiDeviceTrainers, ReplicasAreCopiedFromTheMastersAtEveryEpoch) {
  auto init = initial_values(Opt::kMomentum);
  SyncMultiGPUTrainerReplicated t(cpus(2));
  // Perturb a replica after the first step; the epoch's broadcast restores it.
  auto probe = std::make_shared<LambdaCallback>();
  bool perturbed = false;
  probe->trigger_step = [&](Trainer& tr) {
    if (perturbed) return;
    perturbed = true;
    Node* rep = find_variable(tr, "tower1/fc0/W/Momentum");
    tr.session().set_variable_value(rep, Tensor::full(DType::F64, {4, 6}, 3.0));
  };
  std::map<std::string, Tensor> at_epoch_end;
  double differed = 0;
  auto check = std::make_shared<LambdaCallback>();
  check->before_run = [&](Trainer& tr) {
    if (perturbed && differed == 0)
      differed = max_rel_diff(var_value(tr, "fc0/W/Momentum"), var_value(tr, "tower1/fc0/W/Momentum"));
    return SessionRunArgs{};
  };
  auto after = std::make_shared<LambdaCallback>();
  after->trigger_epoch = [&](Trainer& tr) {
    for (const char* n : {"fc0/W/Momentum", "tower1/fc0/W/Momentum", "fc0/W", "tower1/fc0/W"})
      at_epoch_end[n] = var_value(tr, n);
  };
  run(t, std::make_shared<TowerModel>(Opt::kMomentum, 0.1), batches(4, 2, 3), 2, init,
      {probe, check, after});
  EXPECT_EQ(max_rel_diff(at_epoch_end.at("fc0/W/Momentum"), at_epoch_end.at("tower1/fc0/W/Momentum")), 0.0);
  EXPECT_EQ(max_rel_diff(at_epoch_end.at("fc0/W"), at_epoch_end.at("tower1/fc0/W")), 0.0);
  // Before the broadcast they differed (the perturbation took effect).
  EXPECT_TRUE(perturbed);
  EXPECT_GT(differed, 0.1);
  ASSERT_NE(t.sync_variables_op(), nullptr);
}

TEST(MultiDeviceTrainers, CheckpointsHoldOnlyMastersAndRestoreAcrossTrainers) {
  TempDir dir;
  auto init = initial_values(Opt::kAdam);
  auto data = batches(2 * kSteps, kBatch, 50);
  SyncMultiGPUTrainerReplicated t(cpus(2));
  auto trained = run(t, std::make_shared<TowerModel>(Opt::kAdam, 0.1), data, kSteps, init,
                     {std::make_shared<ModelSaver>()}, dir.path());
  auto saved = load_checkpoint(latest_checkpoint(dir.path()));
  for (const auto& [name, v] : saved) EXPECT_EQ(name.rfind("tower", 0), std::string::npos) << name;
  EXPECT_TRUE(saved.count("fc0/W/Adam"));
  expect_same_variables(trained.values, saved, 0.0, "checkpoint");
  // Replicated checkpoint -> SimpleTrainer: it restores every variable (no
  // warning about missing or extra names) and continues from there.
  {
    SimpleTrainer s;
    auto model = std::make_shared<TowerModel>(Opt::kAdam, 0.1);
    s.setup_graph(model->get_input_signature(),
                  std::make_shared<FeedInput>(std::make_shared<DataFromList>(data, false)),
                  [model](const std::vector<Output>& in) { return model->build_graph(in); },
                  [model] { return model->get_optimizer(); });
    s.setup_callbacks({}, {});
    auto restore = std::make_shared<CheckpointRestore>(dir.path());
    s.initialize({}, restore);
    EXPECT_TRUE(restore->warnings().empty()) << restore->warnings().front();
    expect_same_variables(saved, get_variable_values(s.session()), 0.0, "restored into simple");
  }
  // SimpleTrainer checkpoint -> replicated: every replica starts from the master.
  SyncMultiGPUTrainerReplicated r(cpus(2));
  std::map<std::string, Tensor> first_step;
  auto probe = std::make_shared<LambdaCallback>();
  probe->before_epoch = [&](Trainer& tr) {
    first_step["fc0/W"] = var_value(tr, "fc0/W");
    first_step["tower1/fc0/W"] = var_value(tr, "tower1/fc0/W");
    first_step["tower1/fc0/W/Adam"] = var_value(tr, "tower1/fc0/W/Adam");
  };
  run(r, std::make_shared<TowerModel>(Opt::kAdam, 0.1), data, 1, saved, {probe});
  EXPECT_EQ(max_rel_diff(saved.at("fc0/W"), first_step.at("tower1/fc0/W")), 0.0);
  EXPECT_EQ(max_rel_diff(saved.at("fc0/W/Adam"), first_step.at("tower1/fc0/W/Adam")), 0.0);
  EXPECT_GT(max_rel_diff(init.at("fc0/W"), first_step.at("tower1/fc0/W")), 1e-3);
}

// ---- predictors and inference on several devices ------------------------------------------------

TEST(MultiDeviceTrainers, PredictorOnADeviceUsesThatTowersVariables) {
  auto init = initial_values(Opt::kSGD);
  SyncMultiGPUTrainerReplicated t(cpus(2));
  run(t, std::make_shared<TowerModel>(Opt::kSGD, 0.1), batches(4, 2, 3), 2, init);
  auto p0 = t.get_predictor({"x", "label"}, {"cost"}, Device::cpu(0));
  auto p1 = t.get_predictor({"x", "label"}, {"cost"}, Device::cpu(1));
  auto b = batches(1, 3, 8)[0];
  double c0 = p0(b)[0].item<double>();
  EXPECT_EQ(c0, p1(b)[0].item<double>());
  // Tower 1's predictor reads tower1/ variables: changing the replica changes it.
  t.session().set_variable_value(find_variable(t, "tower1/fc1/b"), Tensor::full(DType::F64, {3}, 5.0));
  t.session().set_variable_value(find_variable(t, "tower1/fc1/W"), Tensor::full(DType::F64, {6, 3}, 0.0));
  EXPECT_NE(c0, p1(b)[0].item<double>());
  EXPECT_EQ(c0, p0(b)[0].item<double>());
  bool on_cpu1 = false;
  for (int id = 0; id < t.graph().num_nodes(); ++id) {
    const Node* n = t.graph().node(id);
    if (n->name().rfind("tower-pred-cpu-1/", 0) == 0 && n->device() == Device::cpu(1)) on_cpu1 = true;
  }
  EXPECT_TRUE(on_cpu1);
}

TEST(MultiDeviceTrainers, DataParallelInferenceRunnerGivesInferenceRunnersNumbers) {
  auto init = initial_values(Opt::kSGD);
  auto val = batches(5, 4, 77);  // odd count: the last step uses one device
  SyncMultiGPUTrainerReplicated t(cpus(2));
  auto single = std::make_shared<InferenceRunner>(
      std::make_shared<DataFromList>(val, false),
      std::vector<InferencerPtr>{std::make_shared<ScalarStats>("cost"),
                                 std::make_shared<ClassificationError>("incorrect_vector", "err")});
  auto parallel = std::make_shared<DataParallelInferenceRunner>(
      std::make_shared<DataFromList>(val, false),
      std::vector<InferencerPtr>{std::make_shared<ScalarStats>("cost", "dp"),
                                 std::make_shared<ClassificationError>("incorrect_vector", "dp_err")},
      cpus(2));
  TrainConfig cfg;
  cfg.model = std::make_shared<TowerModel>(Opt::kSGD, 0.1);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(batches(4, 2, 3), false));
  cfg.steps_per_epoch = 2;
  cfg.max_epoch = 2;
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.callbacks = {single, parallel};
  cfg.session_init = std::make_shared<DictRestore>(init);
  launch_train_with_config(cfg, t);
  bool reads_replica = false;
  for (const auto& [name, dev] : nodes_under(t.graph(), "InferenceTower1/")) {
    EXPECT_EQ(dev, Device::cpu(1)) << name;
    const Node* n = t.graph().find_node(name);
    for (const Output& in : n->inputs()) reads_replica = reads_replica || in.node->name().rfind("tower1/fc0/W", 0) == 0;
  }
  EXPECT_TRUE(reads_replica);
  auto& m = t.monitors();
  for (auto [a, b] : {std::pair<const char*, const char*>{"validation_cost", "dp_cost"},
                      {"err", "dp_err"}}) {
    auto ha = m.get_history(a), hb = m.get_history(b);
    ASSERT_EQ(ha.size(), 2u) << a;
    ASSERT_EQ(hb.size(), 2u) << b;
    for (size_t i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(ha[i].second, hb[i].second) << a;
  }
}

// ---- errors ---------------------------------------------------------------------------------------

TEST(MultiDeviceTrainers, BadDeviceListsAreClearErrors) {
  expect_error([] { SyncMultiGPUTrainerReplicated t({}); }, {"SyncMultiGPUTrainerReplicated", "empty"});
  expect_error([] { SyncMultiGPUTrainerParameterServer t({Device::cpu(1), Device::cpu(1)}); },
               {"cpu:1", "listed twice"});
  expect_error([] { parse_device_list("cpu:0,cpu:0"); }, {"cpu", "listed twice"});
  expect_error([] { parse_device_list("cpu:0,,cpu:1"); }, {"empty entry"});
  if (device_count(DeviceType::CUDA) == 0)
    expect_error([] { AsyncMultiGPUTrainer t({Device::cuda(0), Device::cuda(1)}); },
                 {"cuda:0", "does not exist"});
  EXPECT_EQ(parse_device_list("cpu:0, cpu:1").size(), 2u);
  // A CPU device the session does not have.
  SyncMultiGPUTrainerReplicated t({Device::cpu(0), Device::cpu(3)});
  TrainConfig cfg;
  cfg.model = std::make_shared<TowerModel>(Opt::kSGD, 0.1);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(batches(4, 2, 3), false));
  cfg.steps_per_epoch = 1;
  cfg.max_epoch = 1;
  cfg.monitors = std::vector<MonitorPtr>{};
  SessionOptions two;
  two.num_cpu_devices = 2;
  cfg.session_creator = new_session_creator(two);
  expect_error([&] { launch_train_with_config(cfg, t); },
               {"cpu:3", "the session has 2 CPU devices"});
  expect_error([] { parse_replicated_mode("fastest"); }, {"unknown mode"});
}

// Tower 1 makes one more trainable variable than tower 0.
class UnevenModel : public TowerModel {
 public:
  UnevenModel() : TowerModel(Opt::kSGD, 0.1, "none") {}
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    auto* ctx = get_current_tower_context();
    if (ctx && ctx->index() == 1) h = FullyConnected("extra", h, 6);
    Output logits = FullyConnected("fc1", h, 3);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
};

TEST(MultiDeviceTrainers, TowersWithDifferentGradientsAreNamed) {
  SyncMultiGPUTrainerReplicated t(cpus(2));
  expect_error([&] { run(t, std::make_shared<UnevenModel>(), batches(2, 2, 1), 1, {}); },
               {"Number of gradients from each tower is different", "tower0: 4 gradients",
                "tower1: 6 gradients", "only in this tower: extra/W, extra/b"});
  // In parameter-server mode tower 1 shares tower 0's variables: a new one breaks the tower rule.
  SyncMultiGPUTrainerParameterServer p(cpus(2));
  expect_error([&] { run(p, std::make_shared<UnevenModel>(), batches(2, 2, 1), 1, {}); },
               {"variable 'extra/W' does not exist", "tower 'tower1'"});
}


// ---- resume after SIGKILL in 2-tower mode -----------------------------------------------------

// Trains the 2-tower replicated trainer to `max_epoch` in `dir` with a
// checkpoint per epoch (auto-resumed); `kill_before_epoch` > 0 kills the
// process with SIGKILL when that epoch starts.
std::map<std::string, Tensor> train_two_towers(const std::string& dir, int max_epoch,
                                               int kill_before_epoch, int* started_at = nullptr) {
  TrainConfig cfg;
  cfg.model = std::make_shared<TowerModel>(Opt::kAdam, 0.05);
  cfg.dataflow = std::make_shared<DataFromList>(batches(8, 3, 61), false);  // 4 steps per epoch
  cfg.max_epoch = max_epoch;
  cfg.logdir = dir;
  cfg.extra_callbacks = std::vector<CallbackPtr>{};
  cfg.monitors = std::vector<MonitorPtr>{std::make_shared<JSONWriter>()};
  auto killer = std::make_shared<LambdaCallback>();
  killer->before_epoch = [kill_before_epoch](Trainer& t) {
    if (t.epoch_num() == kill_before_epoch) ::raise(SIGKILL);
  };
  // Something for stats.json to record each epoch (the resume reads its last epoch).
  killer->trigger_epoch = [](Trainer& t) { t.monitors().put_scalar("epoch_done", t.epoch_num()); };
  cfg.callbacks = {std::make_shared<ModelSaver>(), killer};
  cfg.session_init = std::make_shared<DictRestore>(initial_values(Opt::kAdam));
  cfg = AutoResumeTrainConfig(cfg);
  if (started_at) *started_at = cfg.starting_epoch;
  SyncMultiGPUTrainerReplicated t(cpus(2));
  launch_train_with_config(cfg, t);
  return get_variable_values(t.session());
}

// Run by ResumesAfterSigkill in a child process (the test binary itself).
TEST(MultiDeviceTrainers, DISABLED_KilledChild) {
  const char* dir = std::getenv("SPIRE_TEST_RESUME_DIR");
  ASSERT_NE(dir, nullptr);
  train_two_towers(dir, 4, 3);
  FAIL() << "the child was not killed";
}

TEST(MultiDeviceTrainers, ResumesAfterSigkillInTwoTowerMode) {
  TempDir straight, killed;
  auto want = train_two_towers(straight.path(), 4, 0);
  std::string out;
  const std::string cmd = "SPIRE_TEST_RESUME_DIR='" + killed.path() +
                          "' /proc/" + std::to_string(::getpid()) +
                          "/exe --gtest_also_run_disabled_tests "
                          "--gtest_filter=MultiDeviceTrainers.DISABLED_KilledChild 2>&1";
  const int rc = run_command(cmd, &out);
  // The shell reports a child killed by SIGKILL as 128 + 9.
  EXPECT_TRUE(rc == 128 + SIGKILL || rc == -1) << "the child should die of SIGKILL (rc " << rc
                                                << "); output:\n" << out;
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(killed.path()), 2) << out;
  int started = 0;
  auto got = train_two_towers(killed.path(), 4, 0, &started);
  EXPECT_EQ(started, 3);
  expect_same_variables(want, got, 1e-12, "resumed");
  EXPECT_EQ(got.at("global_step").item<int64_t>(), 16);
  EXPECT_GT(max_rel_diff(initial_values(Opt::kAdam).at("fc0/W"), got.at("fc0/W")), 1e-3);
}

}  // namespace
}  // namespace spire::testing

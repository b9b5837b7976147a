// The distributed trainers with parameter servers, every rank a thread of
// this process (LocalMessageHub; the same trainers run across MPI ranks in
// tests/dist/trainers/distributed_trainers_mpitest.cc): SGD updates equal a
// hand-computed reference (each worker's gradients applied as its own
// update), one worker equals SimpleTrainer, the servers' values equal what
// the workers read, checkpoints restore across trainers, resuming equals
// training straight through, the replicated trainer's replicas and model
// variables, and failures of a server and of a worker end every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/ops.h"
#include "dist/trainers/distributed_trainers.h"
#include "layers/layers.h"
#include "tests/support/ps_test_models.h"
#include "tests/support/step_callbacks.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tower_batches.h"
#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/input_source.h"
#include "train/model_desc.h"
#include "train/session_init.h"

namespace spire::testing {
namespace {

// x [-1, 4] -> FC(6, tanh) -> [BatchNorm] -> FC(3) -> softmax cross-entropy.
class NetModel : public ModelDesc {
 public:
  explicit NetModel(bool bn) : bn_(bn) {}
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"label", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    if (bn_) h = BatchNorm("bn", h);
    Output logits = FullyConnected("fc1", h, 3);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override { return std::make_shared<AdamOptimizer>(0.05); }

 private:
  bool bn_;
};

struct RankResult {
  std::string error;
  bool server = false;
  std::map<std::string, Tensor> values;  // a worker's variables, or a server's state
  std::map<std::string, Tensor> all;     // a worker's every variable (replicas too)
  std::map<std::string, int> placement;
};

struct Job {
  int ranks = 3;
  int num_ps = 1;
  bool replicated = false;
  std::vector<Device> devices{Device::cpu()};
  double timeout = 30;
  std::function<double(int rank)> timeout_of;  // overrides `timeout` when set
  // Per worker index: its data, and what else its config gets.
  std::function<std::vector<Datapoint>(int)> data;
  std::function<std::shared_ptr<ModelDesc>()> model;
  int64_t steps = 3;
  int max_epoch = 1;
  int starting_epoch = 1;
  std::shared_ptr<SessionInit> init;
  std::string logdir;  // the chief's
  std::function<std::vector<CallbackPtr>(int rank)> callbacks;
  std::function<bool(int rank)> skip;  // ranks that never start (a dead process)
};

std::vector<RankResult> run_job(const Job& job) {
  dist::LocalMessageHub hub(job.ranks);
  std::vector<RankResult> results(static_cast<size_t>(job.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < job.ranks; ++r) {
    if (job.skip && job.skip(r)) continue;
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<size_t>(r)];
      try {
        DistributedOptions o;
        o.num_ps = job.num_ps;
        o.timeout_seconds = job.timeout_of ? job.timeout_of(r) : job.timeout;
        o.messenger = hub.endpoint(r);
        std::unique_ptr<DistributedTrainerBase> t;
        if (job.replicated) t = std::make_unique<DistributedTrainerReplicated>(job.devices, o);
        else t = std::make_unique<DistributedTrainerParameterServer>(job.devices, o);
        out.server = t->is_ps();
        TrainConfig cfg;
        cfg.model = job.model();
        const int w = std::max(0, t->worker_index());
        cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(job.data(w), false));
        cfg.steps_per_epoch = job.steps;
        cfg.max_epoch = job.max_epoch;
        cfg.starting_epoch = job.starting_epoch;
        cfg.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<RunUpdateOps>()};
        cfg.monitors = std::vector<MonitorPtr>{};
        if (job.callbacks) cfg.callbacks = job.callbacks(r);
        cfg.session_init = job.init;
        cfg.logdir = job.logdir;
        t->graph().set_seed(100 + static_cast<uint64_t>(r));  // every rank initializes differently
        launch_train_with_config(cfg, *t);
        out.placement = t->variable_servers();
        if (t->is_ps()) {
          out.values = t->server_state();
        } else {
          out.values = get_variable_values(t->session());
          for (const Variable& v : all_variables(&t->graph()))
            out.all[v.name()] = t->session().variable_value(v.node());
        }
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  return results;
}

void expect_bit_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.num_elements(); ++i)
    ASSERT_EQ(a.element_as_double(i), b.element_as_double(i)) << what << " element " << i;
}

void expect_no_errors(const std::vector<RankResult>& rs) {
  for (size_t r = 0; r < rs.size(); ++r) ASSERT_EQ(rs[r].error, "") << "rank " << r;
}

Job linear_job(int ranks, int num_ps, int towers) {
  Job job;
  job.ranks = ranks;
  job.num_ps = num_ps;
  job.devices.clear();
  for (int t = 0; t < towers; ++t) job.devices.push_back(Device::cpu(t));
  job.data = [](int w) { return integer_batches(12, w + 1); };
  job.model = [] { return std::make_shared<LinearModel>(); };
  job.init = std::make_shared<DictRestore>(kLinearInit);
  return job;
}

TEST(DistributedTrainers, SgdUpdatesEqualTheHandComputedReference) {
  // 1 or 2 servers, 1 to 3 workers, 1 or 2 towers per worker, both trainers.
  for (auto [ranks, ps, towers] : {std::tuple{2, 1, 1}, {3, 1, 1}, {4, 2, 1}, {4, 1, 2}, {5, 2, 2}})
    for (bool replicated : {false, true}) {
      Job job = linear_job(ranks, ps, towers);
      job.replicated = replicated;
      const auto rs = run_job(job);
      expect_no_errors(rs);
      const auto want = sgd_reference(job.data, job.steps, ranks - ps, towers);
      const std::string what = str_cat(ranks, " ranks, ", ps, " ps, ", towers, " towers",
                                       replicated ? ", replicated" : "");
      for (int r = ps; r < ranks; ++r)
        for (const auto& [name, t] : want) expect_bit_equal(rs[static_cast<size_t>(r)].values.at(name), t, what + " " + name);
      if (ps == 2) {
        // Greedy by bytes: w (32 bytes) on server 0, v (24) on server 1.
        EXPECT_EQ(rs[static_cast<size_t>(ps)].placement.at("w"), 0) << what;
        EXPECT_EQ(rs[static_cast<size_t>(ps)].placement.at("v"), 1) << what;
      }
    }
}

TEST(DistributedTrainers, ValueDependentGradientsOfTwoAndThreeWorkersEqualTheHandComputedReference) {
  // TanhModel's gradients depend on w: a worker that read a stale w (not the one the servers
  // hold after the step before) would end elsewhere. The reference is computed by hand.
  for (auto [ranks, ps] : {std::pair{3, 1}, {4, 1}, {5, 2}})
    for (bool replicated : {false, true}) {
      Job job;
      job.ranks = ranks;
      job.num_ps = ps;
      job.replicated = replicated;
      job.steps = 5;
      job.data = [](int w) { return tanh_batches(5, w + 1); };
      job.model = [] { return std::make_shared<TanhModel>(); };
      job.init = std::make_shared<DictRestore>(kTanhInit);
      const auto rs = run_job(job);
      expect_no_errors(rs);
      const std::vector<double> want = tanh_sgd_reference(job.data, job.steps, ranks - ps);
      std::vector<double> start = kTanhInit.at("w").to_vector<double>();
      start.push_back(kTanhInit.at("b").to_vector<double>()[0]);
      double moved = 0;
      for (size_t j = 0; j < 5; ++j) moved = std::max(moved, std::abs(want[j] - start[j]));
      ASSERT_GT(moved, 0.05) << "the reference hardly moves: a stale read would pass";
      if (ps == 2) EXPECT_NE(rs[static_cast<size_t>(ps)].placement.at("w"), rs[static_cast<size_t>(ps)].placement.at("b"));
      for (int r = ps; r < ranks; ++r) {
        std::vector<double> got = rs[static_cast<size_t>(r)].values.at("w").to_vector<double>();
        got.push_back(rs[static_cast<size_t>(r)].values.at("b").to_vector<double>()[0]);
        for (size_t j = 0; j < 5; ++j)
          EXPECT_NEAR(got[j], want[j], 1e-12) << ranks << " ranks, " << ps << " ps" << (replicated ? ", replicated" : "")
                                              << ": rank " << r << (j < 4 ? " w[" + std::to_string(j) + "]" : " b");
      }
    }
}

TEST(DistributedTrainers, TheServersHoldWhatTheWorkersRead) {
  Job job = linear_job(4, 2, 2);
  job.model = [] { return std::make_shared<LinearModel>(/*momentum=*/true); };
  const auto rs = run_job(job);
  expect_no_errors(rs);
  for (int p = 0; p < 2; ++p) {
    ASSERT_TRUE(rs[static_cast<size_t>(p)].server);
    for (const auto& [name, t] : rs[static_cast<size_t>(p)].values) {
      for (int r = 2; r < 4; ++r) {
        // Variables: every worker read them after the last step; slots: the
        // chief fetched them before its epoch callbacks.
        if (r != 2 && name.find('/') != std::string::npos) continue;
        expect_bit_equal(rs[static_cast<size_t>(r)].values.at(name), t, str_cat(name, " on rank ", r));
      }
    }
  }
  EXPECT_TRUE(rs[0].values.count("w/Momentum") + rs[1].values.count("w/Momentum") == 1);
}

TEST(DistributedTrainers, OneWorkerEqualsSimpleTrainer) {
  for (bool replicated : {false, true}) {
    const auto data = batches(6, 4, 5);
    std::map<std::string, Tensor> init;
    {
      SimpleTrainer t;
      t.graph().set_seed(7);
      TrainConfig cfg;
      cfg.model = std::make_shared<NetModel>(true);
      cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(data, false));
      cfg.steps_per_epoch = 1;
      cfg.max_epoch = 0;
      cfg.monitors = std::vector<MonitorPtr>{};
      cfg.extra_callbacks = std::vector<CallbackPtr>{};
      launch_train_with_config(cfg, t);
      init = get_variable_values(t.session());
    }
    SimpleTrainer simple;
    TrainConfig cfg;
    cfg.model = std::make_shared<NetModel>(true);
    cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(data, false));
    cfg.steps_per_epoch = 6;
    cfg.max_epoch = 1;
    cfg.monitors = std::vector<MonitorPtr>{};
    cfg.extra_callbacks = std::vector<CallbackPtr>{std::make_shared<RunUpdateOps>()};
    cfg.session_init = std::make_shared<DictRestore>(init);
    launch_train_with_config(cfg, simple);
    const auto want = get_variable_values(simple.session());

    Job job;
    job.ranks = 3;
    job.num_ps = 2;
    job.replicated = replicated;
    job.data = [&](int) { return data; };
    job.model = [] { return std::make_shared<NetModel>(true); };
    job.steps = 6;
    job.init = std::make_shared<DictRestore>(init);
    // One worker (rank 2), two servers.
    const auto rs = run_job(job);
    expect_no_errors(rs);
    // Every variable of SimpleTrainer's (Adam's slots and beta powers, the
    // BatchNorm statistics, global_step), bit for bit, in the chief's copies.
    auto got = rs[2].values;
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      expect_bit_equal(got.at(name), t, str_cat(replicated ? "replicated " : "ps ", name));
    }
    EXPECT_EQ(got.size(), want.size());
  }
}

TEST(DistributedTrainers, CheckpointsRestoreAcrossTrainersAndResumeEqualsTrainingThrough) {
  for (bool replicated : {false, true}) {
    // Straight through: 2 epochs (3 steps over the same 3 batches each).
    Job job = linear_job(4, 2, 1);
    job.data = [](int w) { return integer_batches(3, w + 1); };
    job.model = [] { return std::make_shared<LinearModel>(/*momentum=*/true); };
    job.replicated = replicated;
    job.max_epoch = 2;
    const auto through = run_job(job);
    expect_no_errors(through);

    // Epoch 1 with the chief's ModelSaver, then epoch 2 restored from it.
    TempDir dir;
    Job first = job;
    first.max_epoch = 1;
    first.logdir = dir.path();
    first.callbacks = [](int) { return std::vector<CallbackPtr>{std::make_shared<ModelSaver>()}; };
    const auto first_run = run_job(first);
    expect_no_errors(first_run);
    const std::string ckpt = latest_checkpoint(dir.path());
    ASSERT_FALSE(ckpt.empty());
    // The checkpoint holds SimpleTrainer's names (slots included) and no replica.
    const auto saved = load_checkpoint(ckpt);
    for (const char* name : {"w", "v", "w/Momentum", "v/Momentum", "global_step", "learning_rate"})
      EXPECT_TRUE(saved.count(name)) << name;
    for (const auto& [name, t] : saved) EXPECT_EQ(name.find("tower"), std::string::npos) << name;
    // ... with the values the servers held after epoch 1.
    for (int p = 0; p < 2; ++p)
      for (const auto& [name, t] : first_run[static_cast<size_t>(p)].values)
        expect_bit_equal(saved.at(name), t, "saved " + name);

    Job second = job;
    second.starting_epoch = 2;
    second.init = std::make_shared<CheckpointRestore>(ckpt);
    const auto resumed = run_job(second);
    expect_no_errors(resumed);
    for (const auto& [name, t] : through[2].values)
      if (name != "global_step")
        expect_bit_equal(resumed[2].values.at(name), t, str_cat(replicated ? "replicated " : "ps ", name));
    EXPECT_EQ(resumed[2].values.at("global_step").item<int64_t>(), 6);

    // Into SimpleTrainer: the same values as the servers held after epoch 1.
    const auto restored = linear_values_restored_from(ckpt);
    for (const auto& [name, t] : saved) expect_bit_equal(restored.at(name), t, "SimpleTrainer " + name);
  }
}

TEST(DistributedTrainers, ReplicatedTowersGetTheShadowsAndTheChiefsModelVariablesReachTheServers) {
  Job job;
  job.ranks = 3;
  job.num_ps = 1;
  job.replicated = true;
  job.devices = {Device::cpu(0), Device::cpu(1)};
  job.data = [](int w) { return batches(8, 3, 20 + static_cast<uint64_t>(w)); };
  job.model = [] { return std::make_shared<NetModel>(true); };
  job.steps = 4;
  const auto rs = run_job(job);
  expect_no_errors(rs);
  for (int r = 1; r < 3; ++r) {
    const auto& all = rs[static_cast<size_t>(r)].all;
    for (const char* name : {"fc0/W", "fc0/b", "fc1/W", "bn/gamma"}) {
      ASSERT_TRUE(all.count(str_cat("tower1/", name))) << name;
      expect_bit_equal(all.at(str_cat("tower1/", name)), all.at(name), str_cat("rank ", r, " tower1/", name));
      expect_bit_equal(all.at(name), rs[0].values.at(name), str_cat("rank ", r, " ", name));
    }
  }
  // The chief's BatchNorm statistics are the servers' shadows after the epoch.
  for (const char* name : {"bn/mean/EMA", "bn/variance/EMA"}) {
    ASSERT_TRUE(rs[0].values.count(name)) << name;
    expect_bit_equal(rs[0].values.at(name), rs[1].values.at(name), name);
  }
}

TEST(DistributedTrainers, AWorkerThatFailsEndsEveryRankNamingIt) {
  Job job = linear_job(4, 1, 1);
  job.steps = 6;
  job.callbacks = [](int r) {
    if (r != 2) return std::vector<CallbackPtr>{};
    return std::vector<CallbackPtr>{
        std::make_shared<AtStep>(2, [](Trainer&) { throw Error("worker callback failed on purpose"); })};
  };
  const auto start = std::chrono::steady_clock::now();
  const auto rs = run_job(job);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(rs[2].error.find("failed on purpose"), std::string::npos) << rs[2].error;
  for (int r : {0, 1, 3})
    EXPECT_NE(rs[static_cast<size_t>(r)].error.find("rank 2 failed"), std::string::npos)
        << "rank " << r << ": " << rs[static_cast<size_t>(r)].error;
}

TEST(DistributedTrainers, AServerThatNeverAnswersIsNamedWithinTheTimeout) {
  Job job = linear_job(3, 1, 1);
  job.timeout = 1;
  job.skip = [](int r) { return r == 0; };  // the server's process is gone
  const auto start = std::chrono::steady_clock::now();
  const auto rs = run_job(job);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r : {1, 2})
    EXPECT_NE(rs[static_cast<size_t>(r)].error.find("parameter server rank 0"), std::string::npos)
        << rs[static_cast<size_t>(r)].error;
}

TEST(DistributedTrainers, AWorkerThatNeverArrivesIsNamedByTheServer) {
  Job job = linear_job(3, 1, 1);
  job.timeout = 1;  // (every rank's: a worker waits longer than a server)
  job.skip = [](int r) { return r == 2; };
  const auto rs = run_job(job);
  EXPECT_NE(rs[0].error.find("rank(s) 2"), std::string::npos) << rs[0].error;
  EXPECT_NE(rs[1].error.find("rank 0 failed"), std::string::npos) << rs[1].error;
}

TEST(DistributedTrainers, AStalledWorkerIsNamedByTheServerAndEveryRankEnds) {
  Job job = linear_job(4, 1, 1);
  job.steps = 6;
  job.timeout = 1;  // the same for every rank
  job.callbacks = [](int r) {
    if (r != 3) return std::vector<CallbackPtr>{};
    return std::vector<CallbackPtr>{
        std::make_shared<AtStep>(2, [](Trainer&) { std::this_thread::sleep_for(std::chrono::seconds(4)); })};
  };
  const auto start = std::chrono::steady_clock::now();
  const auto rs = run_job(job);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  for (int r = 0; r < 4; ++r)  // the server names the stalled rank; the others hear it from the server
    EXPECT_NE(rs[static_cast<size_t>(r)].error.find(r == 3 ? "rank 0 failed" : "rank(s) 3"), std::string::npos)
        << "rank " << r << ": " << rs[static_cast<size_t>(r)].error;
}

TEST(DistributedTrainers, AWorkerThatStopsEndsEveryWorkerCleanlyAtTheSameStep) {
  for (bool everyone : {false, true}) {
    Job job = linear_job(5, 2, 1);  // 2 servers, 3 workers
    job.steps = 8;
    job.callbacks = [everyone](int r) {
      if (!everyone && r != 3) return std::vector<CallbackPtr>{};
      return std::vector<CallbackPtr>{std::make_shared<AtStep>(3, [](Trainer&) { throw StopTraining("enough"); })};
    };
    const auto rs = run_job(job);
    expect_no_errors(rs);
    // Three steps were applied, no more (the others' fourth push was refused).
    Job three = job;
    three.steps = 3;
    const auto want = sgd_reference(job.data, 3, 3, 1);
    for (int r = 2; r < 5; ++r)
      for (const auto& [name, t] : want)
        expect_bit_equal(rs[static_cast<size_t>(r)].values.at(name), t, str_cat("rank ", r, " ", name));
  }
}

TEST(DistributedTrainers, TheServersTimeoutNamesTheWorkerItWaitsForNotTheFinishedOnes) {
  // Worker rank 2 stops at step 2 (rank 1 follows at its next push); rank 3 stalls there, so
  // the server times out waiting for rank 3 alone: ranks 1 and 2 finished, they are not missing.
  Job job = linear_job(4, 1, 1);
  job.steps = 6;
  // The server waits 2 s for a request; the workers 30 s (rank 3 sleeps 5 s, far past the
  // server's limit, and hears of the server's failure when it wakes).
  job.timeout_of = [](int r) { return r == 0 ? 2.0 : 30.0; };
  job.callbacks = [](int r) {
    if (r == 2) return std::vector<CallbackPtr>{std::make_shared<AtStep>(2, [](Trainer&) { throw StopTraining("enough"); })};
    if (r == 3)
      return std::vector<CallbackPtr>{
          std::make_shared<AtStep>(2, [](Trainer&) { std::this_thread::sleep_for(std::chrono::seconds(5)); })};
    return std::vector<CallbackPtr>{};
  };
  const auto rs = run_job(job);
  const std::string& e = rs[0].error;
  EXPECT_NE(e.find("from rank(s) 3"), std::string::npos) << e;
  EXPECT_NE(e.find("rank(s) 1, 2 finished training"), std::string::npos) << e;
  EXPECT_EQ(e.find("rank(s) 1, 2, 3"), std::string::npos) << e;
}

TEST(DistributedTrainers, AdamAdvancesOncePerWorkerUpdate) {
  // The linear model's gradients do not depend on the variables: 2 workers'
  // steps equal SimpleTrainer's steps over their batches interleaved
  // (Adam's slots and beta powers included, bit for bit).
  Job job = linear_job(3, 1, 1);
  job.model = [] { return std::make_shared<LinearModel>(false, /*adam=*/true); };
  job.data = [](int w) { return integer_batches(3, w + 1); };
  const auto rs = run_job(job);
  expect_no_errors(rs);
  std::vector<Datapoint> interleaved;
  for (int s = 0; s < 3; ++s)
    for (int w = 0; w < 2; ++w) interleaved.push_back(job.data(w)[static_cast<size_t>(s)]);
  SimpleTrainer simple;
  TrainConfig cfg;
  cfg.model = job.model();
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(interleaved, false));
  cfg.steps_per_epoch = 6;
  cfg.max_epoch = 1;
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.session_init = std::make_shared<DictRestore>(kLinearInit);
  launch_train_with_config(cfg, simple);
  for (const auto& [name, t] : get_variable_values(simple.session())) {
    if (name == "global_step") continue;  // (3 steps of 2 workers; 6 of one)
    ASSERT_TRUE(rs[1].values.count(name)) << name;
    expect_bit_equal(rs[1].values.at(name), t, "chief " + name);
    if (rs[0].values.count(name)) expect_bit_equal(rs[0].values.at(name), t, "server " + name);
  }
  EXPECT_TRUE(rs[0].values.count("beta1_power") && rs[0].values.count("w/Adam_1")) << "the server's state";
}

TEST(DistributedTrainers, BadRolesAreClearErrors) {
  dist::LocalMessageHub hub(2);
  DistributedOptions o;
  o.messenger = hub.endpoint(0);
  o.num_ps = 2;
  try {
    DistributedTrainerParameterServer t({Device::cpu()}, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("leave no worker among 2 rank(s)"), std::string::npos) << e.what();
  }
  o.num_ps = 0;
  EXPECT_THROW(DistributedTrainerReplicated({Device::cpu()}, o), Error);
}

}  // namespace
}  // namespace spire::testing

// Trainer loop tests: the exact hook sequence over 2 epochs x 3 steps,
// chief-only filtering, StopTraining from a callback and from run_step,
// errors reported with the callback's name, hooked vs plain sessions, the
// hooks a MultiProcessTrainer gets from the base Trainer (and the chief's
// random-stream positions it takes).
#include <optional>

#include "tests/support/op_test_util.h"
#include "train/monitor.h"
#include "layers/layers.h"
#include "train/trainer.h"

namespace spire::testing {
namespace {

// Records every hook call as "name:hook[:epoch:local_step:global_step]".
class Recorder : public Callback {
 public:
  Recorder(std::string tag, std::vector<std::string>* log, bool chief_only = false)
      : tag_(std::move(tag)), log_(log) {
    chief_only_ = chief_only;
  }
  std::string name() const override { return tag_; }

 protected:
  void rec(const std::string& hook, bool with_steps = false) {
    std::string s = tag_ + ":" + hook;
    if (with_steps)
      s += str_cat(":", trainer().epoch_num(), ":", trainer().local_step(), ":", trainer().global_step());
    log_->push_back(s);
  }
  void _setup_graph() override { rec("setup_graph"); }
  void _before_train() override { rec("before_train"); }
  void _before_epoch() override { rec("before_epoch", true); }
  void _after_epoch() override { rec("after_epoch", true); }
  SessionRunArgs _before_run(SessionRunContext&) override {
    rec("before_run", true);
    return {};
  }
  void _after_run(SessionRunContext&, const SessionRunValues&) override { rec("after_run", true); }
  void _trigger_step() override { rec("trigger_step", true); }
  void _trigger() override { rec("trigger", true); }
  void _after_train() override { rec("after_train"); }

 private:
  std::string tag_;
  std::vector<std::string>* log_;
};

// A trainer whose step increments a counter variable through the hooked session.
class CountingTrainer : public Trainer {
 public:
  CountingTrainer() {
    DefaultGraphGuard guard(graph());
    counter = ops::variable({}, DType::F64, "counter");
    init = ops::assign(counter, ops::scalar(0, DType::F64)).node;
    train_op = ops::assign_add(counter, ops::scalar(1, DType::F64)).node;
  }
  void set_chief(bool c) { is_chief_ = c; }
  Output counter;
  Node* init;
};

SessionCreator creator_with_init(Node* init) {
  return [init](Graph& g) {
    auto s = new_session_creator()(g);
    s->run_targets({init});
    return s;
  };
}

TEST(Trainer, ExactHookSequence) {
  std::vector<std::string> log;
  CountingTrainer t;
  auto a = std::make_shared<Recorder>("A", &log);
  auto b = std::make_shared<Recorder>("B", &log);
  t.train({a, b}, {}, creator_with_init(t.init), nullptr, /*steps_per_epoch=*/3, 1, 2);
  std::vector<std::string> want = {"A:setup_graph", "B:setup_graph", "A:before_train", "B:before_train"};
  int64_t gs = 0;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    want.push_back(str_cat("A:before_epoch:", epoch, ":-1:", gs));
    want.push_back(str_cat("B:before_epoch:", epoch, ":-1:", gs));
    for (int step = 0; step < 3; ++step) {
      want.push_back(str_cat("A:before_run:", epoch, ":", step, ":", gs));
      want.push_back(str_cat("B:before_run:", epoch, ":", step, ":", gs));
      ++gs;
      want.push_back(str_cat("A:after_run:", epoch, ":", step, ":", gs));
      want.push_back(str_cat("B:after_run:", epoch, ":", step, ":", gs));
      want.push_back(str_cat("A:trigger_step:", epoch, ":", step, ":", gs));
      want.push_back(str_cat("B:trigger_step:", epoch, ":", step, ":", gs));
    }
    want.push_back(str_cat("A:after_epoch:", epoch, ":3:", gs));
    want.push_back(str_cat("B:after_epoch:", epoch, ":3:", gs));
    want.push_back(str_cat("A:trigger:", epoch, ":3:", gs));
    want.push_back(str_cat("B:trigger:", epoch, ":3:", gs));
  }
  want.push_back("A:after_train");
  want.push_back("B:after_train");
  EXPECT_EQ(log, want);
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_EQ(t.epoch_num(), 2);
  EXPECT_EQ(t.sess().run({t.counter})[0].item<double>(), 6);
  EXPECT_TRUE(t.graph().finalized());
}

TEST(Trainer, ChiefOnlyCallbacksAreSkippedOnNonChief) {
  std::vector<std::string> log;
  CountingTrainer t;
  t.set_chief(false);
  t.train({std::make_shared<Recorder>("chief", &log, true), std::make_shared<Recorder>("all", &log, false)},
          {}, creator_with_init(t.init), nullptr, 1, 1, 1);
  for (const auto& s : log) EXPECT_EQ(s.rfind("all:", 0), 0u) << s;
  EXPECT_FALSE(log.empty());
}

class StopAt : public Callback {
 public:
  explicit StopAt(int64_t step) : step_(step) { chief_only_ = false; }
  bool after_train_called = false;

 protected:
  void _trigger_step() override {
    if (trainer().global_step() == step_) throw StopTraining("enough");
  }
  void _after_train() override { after_train_called = true; }

 private:
  int64_t step_;
};

TEST(Trainer, StopTrainingFromACallback) {
  CountingTrainer t;
  auto stop = std::make_shared<StopAt>(4);
  t.train({stop}, {}, creator_with_init(t.init), nullptr, 3, 1, 10);
  EXPECT_EQ(t.global_step(), 4);
  EXPECT_EQ(t.epoch_num(), 2);
  EXPECT_TRUE(stop->after_train_called);
}

class StoppingTrainer : public CountingTrainer {
 public:
  void run_step() override {
    if (global_step() == 2) throw StopTraining("from run_step");
    Trainer::run_step();
  }
};

TEST(Trainer, StopTrainingFromRunStep) {
  StoppingTrainer t;
  auto watch = std::make_shared<StopAt>(-1);
  t.train({watch}, {}, creator_with_init(t.init), nullptr, 5, 1, 3);
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_TRUE(watch->after_train_called);
}

class Failing : public Callback {
 public:
  std::string name() const override { return "FailingCallback"; }

 protected:
  void _trigger_epoch() override { throw Error("boom"); }
};

TEST(Trainer, CallbackErrorsNameTheCallbackAndStillRunAfterTrain) {
  CountingTrainer t;
  auto watch = std::make_shared<StopAt>(-1);
  expect_error([&] { t.train({std::make_shared<Failing>(), watch}, {}, creator_with_init(t.init), nullptr, 2, 1, 3); },
               {"callback FailingCallback", "trigger_epoch", "boom"});
  EXPECT_TRUE(watch->after_train_called);
  EXPECT_EQ(t.global_step(), 2);
}

TEST(Trainer, RegisterAfterSetupIsAnError) {
  CountingTrainer t;
  t.setup_callbacks({}, {});
  expect_error([&] { t.register_callback(std::make_shared<StopAt>(1)); }, {"before training starts"});
}

TEST(Trainer, PlainSessionSkipsHooks) {
  std::vector<std::string> log;
  CountingTrainer t;
  t.setup_callbacks({std::make_shared<Recorder>("A", &log)}, {});
  t.initialize(creator_with_init(t.init), nullptr);
  log.clear();
  t.sess().run({t.counter});
  EXPECT_TRUE(log.empty());
  t.hooked_sess().run({t.counter});
  EXPECT_EQ(log.size(), 2u);  // before_run + after_run
}

// ---- MultiProcessTrainer: the hooks the base Trainer calls ------------------------------------

// One process of several, as far as the base Trainer sees it: records the
// hooks it is called with; the "chief" runs steps 2 and epochs 3..3.
class ProcessTrainer : public CountingTrainer, public MultiProcessTrainer {
 public:
  explicit ProcessTrainer(std::vector<std::string>* log) : log_(log) {}
  std::string process_name() const override { return "ProcessTrainer: rank 1"; }
  int process_rank() const override { return 1; }
  std::vector<int64_t> chief = {2, 3, 3};
  bool serves = false;
  bool fail_step = false;
  /// The chief's (name hash, offset) pairs of synchronize_rng (unset: this process's own).
  std::optional<std::vector<int64_t>> chief_rng;
  /// What this process passed to synchronize_rng.
  std::vector<int64_t> sent_rng;

  void run_step() override {
    if (fail_step) throw Error("step failed");
    CountingTrainer::run_step();
  }

 protected:
  std::vector<int64_t> chief_values(const std::vector<int64_t>& values, const std::string& what) override {
    log_->push_back(str_cat("chief_values:", what, ":", values.size()));
    if (what == "synchronize_rng") sent_rng = values;
    if (chief_rng && what == "synchronize_rng (count)")
      return {static_cast<int64_t>(chief_rng->size() / 2)};
    if (chief_rng && what == "synchronize_rng") return *chief_rng;
    return what == "synchronize_loop" ? chief : values;
  }
  void after_session_init(Session&) override { log_->push_back("after_session_init"); }
  void on_failure(const std::exception& e) override { log_->push_back(str_cat("on_failure:", e.what())); }
  bool run_service() override {
    log_->push_back("run_service");
    return serves;
  }
  void on_main_loop_finished() override { log_->push_back("on_main_loop_finished"); }

 private:
  std::vector<std::string>* log_;
};

TEST(MultiProcessTrainer, TheBaseCallsTheHooksAndRunsTheChiefsLoop) {
  std::vector<std::string> log;
  ProcessTrainer t(&log);
  t.set_chief(false);
  t.set_logdir("/nonexistent/not/written");
  auto watch = std::make_shared<StopAt>(-1);
  t.train({watch}, {}, creator_with_init(t.init), nullptr, /*steps_per_epoch=*/5, 1, 10);
  // A process that is not the chief writes no log directory.
  EXPECT_EQ(t.logdir(), "");
  EXPECT_EQ(log, (std::vector<std::string>{"after_session_init", "run_service", "chief_values:synchronize_loop:3",
                                           "chief_values:synchronize_rng (count):1",
                                           "chief_values:synchronize_rng:0", "on_main_loop_finished"}));
  // The chief's loop: 2 steps of epoch 3 only.
  EXPECT_EQ(t.steps_per_epoch(), 2);
  EXPECT_EQ(t.starting_epoch(), 3);
  EXPECT_EQ(t.max_epoch(), 3);
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_TRUE(watch->after_train_called);
  EXPECT_EQ(t.broadcast_from_chief(7, "probe"), 7);
  expect_error([&] { t.broadcast_from_chief(std::vector<int64_t>{1, 2}, "synchronize_loop"); },
               {"ProcessTrainer: rank 1", "the chief sent 3 value(s), this process has 2"});
}

// Every process's random streams continue where the chief's are (the
// chief's restored from a checkpoint), matched by node name.
TEST(MultiProcessTrainer, RandomStreamsTakeTheChiefsPositions) {
  auto with_dropout = [](ProcessTrainer& t, int draws) {
    Output d;
    {
      DefaultGraphGuard guard(t.graph());
      d = ops::dropout(ops::constant(Tensor::from_vector<float>({4}, {1, 1, 1, 1})), 0.5, 0, "drop");
    }
    SessionCreator creator = [init = t.init, d, draws](Graph& g) {
      auto s = creator_with_init(init)(g);
      for (int i = 0; i < draws; ++i) s->run({d});
      return s;
    };
    return std::make_pair(d, creator);
  };
  std::vector<std::string> log;
  ProcessTrainer chief(&log);
  auto [d, chief_creator] = with_dropout(chief, 3);
  chief.train({}, {}, chief_creator, nullptr, 1, 1, 1);
  ASSERT_EQ(chief.sent_rng.size(), 2u);  // (name hash, offset) of "drop"
  EXPECT_EQ(chief.sent_rng[1], 12);
  ProcessTrainer other(&log);
  auto [d2, other_creator] = with_dropout(other, 0);
  other.chief_rng = chief.sent_rng;
  other.train({}, {}, other_creator, nullptr, 1, 1, 1);
  ASSERT_EQ(other.session().rng_offsets().size(), 1u);
  EXPECT_EQ(other.session().rng_offsets()[0].first, d2.node);
  EXPECT_EQ(other.session().rng_offsets()[0].second, 12u);
}

TEST(MultiProcessTrainer, AServiceProcessRunsNoLoop) {
  std::vector<std::string> log;
  ProcessTrainer t(&log);
  t.serves = true;
  auto watch = std::make_shared<StopAt>(-1);
  t.train({watch}, {}, creator_with_init(t.init), nullptr, 5, 1, 10);
  EXPECT_EQ(log, (std::vector<std::string>{"after_session_init", "run_service"}));
  EXPECT_EQ(t.global_step(), 0);
  EXPECT_FALSE(watch->after_train_called);
}

TEST(MultiProcessTrainer, FailuresAreAnnouncedBeforeTheyPropagate) {
  std::vector<std::string> log;
  ProcessTrainer t(&log);
  t.fail_step = true;
  auto watch = std::make_shared<StopAt>(-1);
  expect_error([&] { t.train({watch}, {}, creator_with_init(t.init), nullptr, 5, 1, 10); }, {"step failed"});
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(log[5], "on_failure:step failed");
  EXPECT_TRUE(watch->after_train_called);
  // A chief keeps its log directory; StopTraining is no failure.
  std::vector<std::string> log2;
  ProcessTrainer chief(&log2);
  chief.set_logdir("kept");
  chief.chief = {3, 1, 1};
  chief.train({std::make_shared<StopAt>(1)}, {}, creator_with_init(chief.init), nullptr, 3, 1, 1);
  EXPECT_EQ(chief.logdir(), "kept");
  EXPECT_EQ(log2.back(), "on_main_loop_finished");
}

// A failure while making the session (before any step) is announced too:
// the other processes would otherwise wait for this one until their timeout.
TEST(MultiProcessTrainer, AFailedSessionIsAnnounced) {
  std::vector<std::string> log;
  ProcessTrainer t(&log);
  SessionCreator broken = [](Graph&) -> std::unique_ptr<Session> { throw Error("no session here"); };
  expect_error([&] { t.train({}, {}, broken, nullptr, 5, 1, 10); }, {"no session here"});
  EXPECT_EQ(log, (std::vector<std::string>{"on_failure:no session here"}));
  std::vector<std::string> log2;
  ProcessTrainer null_session(&log2);
  expect_error([&] { null_session.train({}, {}, [](Graph&) { return std::unique_ptr<Session>(); }, nullptr, 5, 1, 10); },
               {"returned null"});
  ASSERT_EQ(log2.size(), 1u);
  EXPECT_NE(log2[0].find("on_failure:"), std::string::npos);
}

class PutScalars : public Callback {
 protected:
  void _trigger_epoch() override { trainer().monitors().put_scalar("metric", trainer().epoch_num() * 1.5); }
};

TEST(Trainer, MonitorsRecordScalars) {
  CountingTrainer t;
  t.train({std::make_shared<PutScalars>()}, {}, creator_with_init(t.init), nullptr, 2, 1, 3);
  EXPECT_EQ(t.monitors().get_latest("metric"), 4.5);
  auto h = t.monitors().get_history("metric");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].first, 2);
  expect_error([&] { t.monitors().get_latest("nothing"); }, {"'nothing'"});
}

}  // namespace
}  // namespace spire::testing

#include "train/dataflow.h"

namespace spire::testing {
namespace {

TEST(SingleCostTrainer, CostMustBeAScalar) {
  SimpleTrainer t;
  auto df = std::make_shared<DataFromList>(
      std::vector<Datapoint>{{Tensor::from_vector<float>({1, 2}, {1, 2})}}, false);
  std::vector<InputDesc> sig = {{"x", DType::F32, {-1, 2}}};
  auto cost_fn = [](const std::vector<Output>& in) {
    Output w = get_variable("w", {2}, DType::F32, init::ones()).value;
    return ops::mul(in[0], w, "per_example_cost");  // [?, 2]: not a scalar
  };
  auto opt_fn = [] { return std::make_shared<GradientDescentOptimizer>(0.1); };
  expect_error([&] { t.setup_graph(sig, std::make_shared<FeedInput>(df), cost_fn, opt_fn); },
               {"cost must be a scalar", "per_example_cost", "[?, 2]"});
}

TEST(SimpleTrainer, TrainsAndPredicts) {
  SimpleTrainer t;
  std::vector<Datapoint> dps;
  for (int i = 0; i < 4; ++i)
    dps.push_back({Tensor::from_vector<double>({1, 1}, {double(i)}), Tensor::from_vector<double>({1}, {2.0 * i + 1})});
  auto df = std::make_shared<DataFromList>(dps, false);
  std::vector<InputDesc> sig = {{"x", DType::F64, {-1, 1}}, {"y", DType::F64, {-1}}};
  auto cost_fn = [](const std::vector<Output>& in) {
    Output pred = ops::reshape(FullyConnected("fc", in[0], 1), {-1}, "pred");
    return ops::mean(ops::square(ops::sub(pred, in[1])), {}, false, "mse");
  };
  auto opt_fn = [] { return std::make_shared<GradientDescentOptimizer>(0.1); };
  t.setup_graph(sig, std::make_shared<FeedInput>(df), cost_fn, opt_fn);
  t.train({}, {}, new_session_creator(), nullptr, 4, 1, 150);
  auto predict = t.get_predictor({"x"}, {"pred"});
  Tensor out = predict({Tensor::from_vector<double>({2, 1}, {10, -1})})[0];
  EXPECT_NEAR(out.data<double>()[0], 21, 0.05);  // learned y = 2x + 1
  EXPECT_NEAR(out.data<double>()[1], -1, 0.05);
  EXPECT_EQ(t.global_step(), 600);
}

}  // namespace
}  // namespace spire::testing

#include <atomic>
#include <thread>

namespace spire::testing {
namespace {

// Starts a thread in before_train that calls a predictor until after_train.
class PredictWhileTraining : public Callback {
 public:
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> predict;
  std::atomic<int> calls{0};
  std::atomic<int> bad{0};
  std::string error;

 protected:
  void _before_train() override {
    predict = dynamic_cast<TowerTrainer&>(trainer()).get_predictor({"x"}, {"pred"});
    thread_ = std::thread([this] {
      try {
        while (!stop_.load()) {
          Tensor out = predict({Tensor::from_vector<double>({2, 1}, {0, 1})})[0];
          const double b = out.data<double>()[0], wb = out.data<double>()[1];
          if (!std::isfinite(b) || !std::isfinite(wb)) ++bad;
          ++calls;
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  void _after_train() override {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(SimpleTrainer, PredictorRunsOnAnotherThreadDuringTrainingAndOutlivesTheTrainer) {
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> predict;
  {
    SimpleTrainer t;
    std::vector<Datapoint> dps;
    for (int i = 0; i < 4; ++i)
      dps.push_back({Tensor::from_vector<double>({1, 1}, {double(i)}), Tensor::from_vector<double>({1}, {2.0 * i + 1})});
    std::vector<InputDesc> sig = {{"x", DType::F64, {-1, 1}}, {"y", DType::F64, {-1}}};
    auto cost_fn = [](const std::vector<Output>& in) {
      Output pred = ops::reshape(FullyConnected("fc", in[0], 1), {-1}, "pred");
      return ops::mean(ops::square(ops::sub(pred, in[1])), {}, false, "mse");
    };
    auto opt_fn = [] { return std::make_shared<GradientDescentOptimizer>(0.1); };
    t.setup_graph(sig, std::make_shared<FeedInput>(std::make_shared<DataFromList>(dps, false)), cost_fn, opt_fn);
    auto cb = std::make_shared<PredictWhileTraining>();
    t.train({cb}, {}, new_session_creator(), nullptr, 4, 1, 150);
    EXPECT_TRUE(cb->error.empty()) << cb->error;
    EXPECT_GT(cb->calls.load(), 0);
    EXPECT_EQ(cb->bad.load(), 0);
    predict = cb->predict;
  }
  // The trainer is gone; the predictor still holds its graph and session.
  Tensor out = predict({Tensor::from_vector<double>({2, 1}, {10, -1})})[0];
  EXPECT_NEAR(out.data<double>()[0], 21, 0.05);
  EXPECT_NEAR(out.data<double>()[1], -1, 0.05);
}

}  // namespace
}  // namespace spire::testing

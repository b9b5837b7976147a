// Tests of train/callbacks/lr_schedule.h: nanoGPT's get_lr at its
// boundaries (it = 0, warmup - 1, warmup, the middle, the decay end and
// beyond), and HyperParamSetterWithStepFunc in a trainer: the learning rate
// each run sees, per step and with steps_per_iteration (accumulation).
#include <cmath>

#include "tests/support/op_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/train/train_test_util.h"
#include "train/callbacks/lr_schedule.h"

namespace spire::testing {
namespace {

TEST(CosineWarmupSchedule, NanoGptBoundaries) {
  // The baby Shakespeare run: lr 1e-3, min_lr 1e-4, warmup 100, decay 2000.
  CosineWarmupSchedule s{1e-3, 1e-4, 100, 2000};
  EXPECT_DOUBLE_EQ(s(0), 1e-3 * 1 / 101);       // not 0: (it + 1) / (warmup + 1)
  EXPECT_DOUBLE_EQ(s(99), 1e-3 * 100 / 101);    // warmup - 1
  EXPECT_DOUBLE_EQ(s(100), 1e-3);               // warmup: cosine at 0
  EXPECT_DOUBLE_EQ(s(1050), 1e-4 + 0.5 * 9e-4);  // half way: coefficient 0.5
  EXPECT_NEAR(s(2000), 1e-4, 1e-19);            // the decay end: cos(pi) = -1
  EXPECT_DOUBLE_EQ(s(2001), 1e-4);              // beyond: min_lr
  EXPECT_DOUBLE_EQ(s(1000000), 1e-4);
  // One step into the decay, by nanoGPT's formula.
  const double r = 1.0 / 1900.0;
  EXPECT_DOUBLE_EQ(s(101), 1e-4 + 0.5 * (1.0 + std::cos(3.141592653589793 * r)) * 9e-4);
  // Monotone: up during warmup, down after.
  for (int64_t it = 1; it < 100; ++it) EXPECT_GT(s(it), s(it - 1));
  for (int64_t it = 101; it <= 2000; ++it) EXPECT_LT(s(it), s(it - 1));
  // No warmup.
  CosineWarmupSchedule nw{1.0, 0.0, 0, 10};
  EXPECT_DOUBLE_EQ(nw(0), 1.0);
  EXPECT_DOUBLE_EQ(nw(5), 0.5);
  expect_error([] { CosineWarmupSchedule{1.0, 0.1, 10, 10}(0); }, {"lr_decay_iters (10)", "> warmup_iters (10)"});
  expect_error([] { CosineWarmupSchedule{1.0, 0.1, -1, 10}(0); }, {"warmup_iters must be >= 0"});
  expect_error([&] { s(-1); }, {"iteration must be >= 0"});
}

// The learning rate each hooked run sees (before the run).
std::vector<double> lr_per_run(CallbackPtr setter, int max_epoch, SimpleTrainer* out = nullptr) {
  TempDir dir;
  TrainConfig cfg = tiny_config(dir.path(), max_epoch);  // 4 steps per epoch, lr starts at 0.1
  std::vector<double> seen;
  auto probe = std::make_shared<LambdaCallback>();
  probe->before_run = [&seen](Trainer& t) {
    seen.push_back(var_value(t, "learning_rate").item<double>());
    return SessionRunArgs{};
  };
  cfg.callbacks = {setter, probe};
  SimpleTrainer local;
  launch_train_with_config(cfg, out ? *out : local);
  return seen;
}

TEST(HyperParamSetterWithStepFunc, SetsTheScheduleBeforeEveryRun) {
  CosineWarmupSchedule s{1.0, 0.1, 2, 6};
  SimpleTrainer t;
  std::vector<double> seen =
      lr_per_run(std::make_shared<HyperParamSetterWithStepFunc>("learning_rate", s), 2, &t);
  ASSERT_EQ(seen.size(), 8u);
  for (int64_t step = 0; step < 8; ++step)
    EXPECT_NEAR(seen[static_cast<size_t>(step)], s(step), 1e-7) << "run " << step;  // f32 variable
  // Put to the monitors when it changes: steps 0..6 differ, 7 (past the end) equals 6.
  EXPECT_EQ(t.monitors().get_history("learning_rate").size(), 7u);
}

TEST(HyperParamSetterWithStepFunc, StepsPerIterationForAccumulation) {
  CosineWarmupSchedule s{1.0, 0.1, 1, 3};
  std::vector<double> seen =
      lr_per_run(std::make_shared<HyperParamSetterWithStepFunc>("learning_rate", s, 2), 2);
  ASSERT_EQ(seen.size(), 8u);
  for (int64_t step = 0; step < 8; ++step)
    EXPECT_NEAR(seen[static_cast<size_t>(step)], s(step / 2), 1e-7) << "run " << step;
  expect_error([&] { HyperParamSetterWithStepFunc("learning_rate", s, 0); }, {"steps_per_iteration must be >= 1"});
  expect_error([] { HyperParamSetterWithStepFunc("learning_rate", nullptr); }, {"empty function"});
}

}  // namespace
}  // namespace spire::testing

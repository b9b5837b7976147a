// Per-step learning-rate schedules: nanoGPT's linear warmup + cosine decay
// (train.py get_lr) as a plain function of the iteration, and
// HyperParamSetterWithStepFunc, a HyperParamSetter (train/callbacks/param.h)
// that sets a parameter (normally the optimizer's "learning_rate"
// variable) from a function of the iteration before every step, as
// nanoGPT sets the lr of every param group at the top of each iteration.
//
// Timing: before_train sets func(it) for the (restored) global step, and
// after each step the value for the next one, so the run with global_step
// == s uses func(s / steps_per_iteration). With gradient accumulation
// (layers/accum_grad_optimizer.h) the global step counts micro-steps: pass
// steps_per_iteration = k, so iteration it is micro-steps it*k .. it*k+k-1
// and the update (on the last of them) uses func(it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "train/callbacks/param.h"

namespace spire {

/// nanoGPT's learning rate schedule (train.py, since 2024-12):
///   it < warmup_iters:    learning_rate * (it + 1) / (warmup_iters + 1)
///   it > lr_decay_iters:  min_lr
///   otherwise:            min_lr + 0.5 * (1 + cos(pi * r)) * (learning_rate - min_lr),
///                         r = (it - warmup_iters) / (lr_decay_iters - warmup_iters).
struct CosineWarmupSchedule {
  double learning_rate = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_iters = 2000;
  int64_t lr_decay_iters = 600000;

  /// Throws unless warmup_iters >= 0, lr_decay_iters > warmup_iters, and
  /// both rates are finite.
  void check() const;
  /// The learning rate of iteration `it` (>= 0), computed in double as nanoGPT does.
  double operator()(int64_t it) const;
};

/// Sets the parameter to func(global_step / steps_per_iteration) before
/// every step (see the file comment). Logs a change at most once per
/// epoch; puts the value to the monitors when it changes.
class HyperParamSetterWithStepFunc : public HyperParamSetter {
 public:
  using Func = std::function<double(int64_t iteration)>;
  HyperParamSetterWithStepFunc(std::shared_ptr<HyperParam> param, Func func,
                               int64_t steps_per_iteration = 1);
  HyperParamSetterWithStepFunc(const std::string& var_name, Func func,
                               int64_t steps_per_iteration = 1);

 protected:
  std::optional<double> _get_value_to_set() override;
  void _trigger_step() override;
  void _trigger_epoch() override {}

 private:
  void check() const;
  Func func_;
  int64_t steps_per_iteration_;
};

}  // namespace spire

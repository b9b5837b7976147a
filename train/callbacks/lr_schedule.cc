// CosineWarmupSchedule and HyperParamSetterWithStepFunc (see lr_schedule.h).
#include "train/callbacks/lr_schedule.h"

#include <cmath>

#include "core/error.h"
#include "train/trainer.h"

namespace spire {

void CosineWarmupSchedule::check() const {
  SPIRE_CHECK(std::isfinite(learning_rate) && std::isfinite(min_lr),
              "CosineWarmupSchedule: learning_rate and min_lr must be finite, got ", learning_rate,
              " and ", min_lr);
  SPIRE_CHECK(warmup_iters >= 0, "CosineWarmupSchedule: warmup_iters must be >= 0, got ",
              warmup_iters);
  SPIRE_CHECK(lr_decay_iters > warmup_iters, "CosineWarmupSchedule: lr_decay_iters (",
              lr_decay_iters, ") must be > warmup_iters (", warmup_iters, ")");
}

double CosineWarmupSchedule::operator()(int64_t it) const {
  constexpr double kPi = 3.14159265358979323846;  // Python's math.pi
  check();
  SPIRE_CHECK(it >= 0, "CosineWarmupSchedule: the iteration must be >= 0, got ", it);
  if (it < warmup_iters)
    return learning_rate * static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio = static_cast<double>(it - warmup_iters) /
                             static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(kPi * decay_ratio));
  return min_lr + coeff * (learning_rate - min_lr);
}

HyperParamSetterWithStepFunc::HyperParamSetterWithStepFunc(std::shared_ptr<HyperParam> param,
                                                           Func func, int64_t steps_per_iteration)
    : HyperParamSetter(std::move(param)),
      func_(std::move(func)),
      steps_per_iteration_(steps_per_iteration) {
  check();
}

HyperParamSetterWithStepFunc::HyperParamSetterWithStepFunc(const std::string& var_name, Func func,
                                                           int64_t steps_per_iteration)
    : HyperParamSetter(var_name), func_(std::move(func)), steps_per_iteration_(steps_per_iteration) {
  check();
}

void HyperParamSetterWithStepFunc::check() const {
  SPIRE_CHECK(static_cast<bool>(func_), "HyperParamSetterWithStepFunc: empty function");
  SPIRE_CHECK(steps_per_iteration_ >= 1,
              "HyperParamSetterWithStepFunc: steps_per_iteration must be >= 1, got ",
              steps_per_iteration_);
}

std::optional<double> HyperParamSetterWithStepFunc::_get_value_to_set() {
  const double v = func_(trainer().global_step() / steps_per_iteration_);
  if (last_value_ && *last_value_ == v) return std::nullopt;  // unchanged: nothing to set
  return v;
}

void HyperParamSetterWithStepFunc::_trigger_step() { set_param(); }

}  // namespace spire

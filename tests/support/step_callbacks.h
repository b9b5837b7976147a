// Test support: a callback that acts at one global step on every process
// (not chief-only), e.g. raises, stops or stalls a rank of a distributed job.
#pragma once

#include <functional>
#include <utility>

#include "train/callback.h"
#include "train/trainer.h"

namespace spire::testing {

/// Calls `fn(trainer)` in trigger_step when the trainer's global step is `step`.
class AtStep : public Callback {
 public:
  AtStep(int64_t step, std::function<void(Trainer&)> fn) : step_(step), fn_(std::move(fn)) { chief_only_ = false; }

 protected:
  void _trigger_step() override {
    if (trainer().global_step() == step_) fn_(trainer());
  }

 private:
  int64_t step_;
  std::function<void(Trainer&)> fn_;
};

}  // namespace spire::testing

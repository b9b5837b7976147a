// AccumGradOptimizer: gradient accumulation over k runs of the train op
// (tensorpack's tfutils/optimizer.AccumGradOptimizer, and nanoGPT's
// gradient_accumulation_steps), with the two semantics by name: kSum
// (tensorpack: the inner optimizer gets the sum of the k gradients) and
// kMean (nanoGPT: the mean, so k micro-steps of batch b equal one step of
// batch k*b for a loss that is a mean over the batch).
//
// Graph built by apply_gradients, every run (Spire's graphs have no
// conditional execution, so the inner update is gated, not skipped):
//   c = assign_add(counter, 1)                       "<name>_counter", i64
//   acc_v = assign(acc_v, c == 1 ? g_v : acc_v + g_v) slot "<var>/AccumGrad"
//           (g_v scaled by 1/k first in kMean, like nanoGPT's loss / k)
//   inner->apply_gradients_if(c >= k, {(acc_v, v)})  the inner optimizer's
//           update of the variables and of its own state (slots, beta powers)
//           takes effect only on every k-th run
//   counter = c >= k ? 0 : c                           (after the update)
// So the counter holds the number of runs accumulated since the last
// update, the accumulators and the counter are non-trainable global
// variables (saved in checkpoints, so a resumed run continues its window),
// and the learning rate is read on the applying run. The global step (the
// trainer's, or `global_step` here) counts runs, i.e. micro-steps, as in
// tensorpack; a schedule per optimizer step uses global_step / k
// (train/callbacks/lr_schedule.h has steps_per_iteration for that).
//
// Gradient processors: to clip the accumulated gradient (nanoGPT clips
// after accumulating) wrap the inner optimizer,
// AccumGradOptimizer(apply_grad_processors(adamw, {GlobalNormClip(1.0)}), k);
// processors around the AccumGradOptimizer see each micro-step's gradient.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "layers/optimizers.h"

namespace spire {

/// How AccumGradOptimizer combines the k gradients it accumulates.
enum class AccumMode {
  /// tensorpack's AccumGradOptimizer: the SUM of the k gradients (for SGD,
  /// like k times the batch with k times the learning rate).
  kSum,
  /// nanoGPT: the MEAN (each gradient scaled by 1/k before it is added): k
  /// micro-steps of batch b equal one step of batch k*b.
  kMean,
};

/// Accumulates gradients over `niter` runs of its train op and lets `opt`
/// apply them on every niter-th run (see the file comment). Shares opt's
/// learning rate; get_slot gives opt's slots and its own "AccumGrad" slot.
/// niter = 1 builds opt's plain update (no accumulator, no counter). Each
/// variable may be in one apply_gradients call (replicas with their own
/// variables each get their own call and counter; the per-tower updates of
/// shared variables of AsyncMultiGPUTrainer are refused).
class AccumGradOptimizer : public Optimizer {
 public:
  /// Throws for a null `opt` or niter < 1.
  AccumGradOptimizer(std::shared_ptr<Optimizer> opt, int niter, AccumMode mode = AccumMode::kSum,
                     const std::string& name = "AccumGrad");

  GradsAndVars compute_gradients(const Output& loss,
                                 const std::vector<Output>& var_list = {}) override;
  /// Builds the accumulating train op (file comment). Pairs without a
  /// gradient are left out (tensorpack's FilterNoneGrad); an error when none
  /// has one. `global_step`, when given, is incremented on every run.
  Node* apply_gradients(const GradsAndVars& grads_and_vars, const Output& global_step = {},
                        const std::string& name = "") override;
  /// Not supported (an accumulation cannot itself be gated): throws.
  Node* apply_gradients_if(const Output& apply_if, const GradsAndVars& grads_and_vars,
                           const Output& global_step = {}, const std::string& name = "") override;
  Output get_slot(const Output& var, const std::string& slot_name) const override;
  std::vector<std::string> get_slot_names() const override;
  void set_use_fused_ops(bool on) override;

  int niter() const { return niter_; }
  AccumMode mode() const { return mode_; }
  /// The i64 counter variable of the last apply_gradients call ("<name>_counter",
  /// "<name>_counter_1", ... for later calls: each train op counts its own
  /// runs); invalid before the first call or with niter = 1.
  Output counter() const { return counter_; }
  const std::shared_ptr<Optimizer>& inner() const { return opt_; }

 protected:
  Node* apply_dense(const Output& grad, const Output& var) override;

 private:
  std::shared_ptr<Optimizer> opt_;
  int niter_;
  AccumMode mode_;
  Output counter_;
  std::set<const Node*> accumulated_;
};

}  // namespace spire

// Dynamic loss scaling for f16 mixed precision (PyTorch's torch.amp.GradScaler
// semantics and constants, as an optimizer wrapper like tensorpack's and
// Keras' LossScaleOptimizer), and all_finite, the "no inf or NaN" test it
// gates on.
//
// LossScaleOptimizer wraps any Optimizer. compute_gradients differentiates
// loss * scale and multiplies each gradient by 1 / scale (PyTorch's
// scale() + unscale_()), so gradient processors (GlobalNormClip) and
// average_grads see unscaled gradients. apply_gradients checks that every
// gradient is finite and builds the wrapped optimizer's step; when a
// gradient holds an inf or NaN the step is skipped entirely: the
// variables, their slots and the optimizer's own state (Adam's beta
// powers) keep their bits. The graph has no control flow, so the step is
// undone by selection: each state tensor is read before the step and,
// after it, assigned select(all_finite, new, old). Then the scale is
// updated as GradScaler.update(): an inf/NaN step multiplies it by
// backoff_factor and resets the growth tracker; growth_interval
// consecutive finite steps multiply it by growth_factor. The state is
// three non-trainable variables (checkpointed with the model):
// "loss_scale" (f32), "loss_scale_growth_tracker" (i64, PyTorch's
// _growth_tracker) and "loss_scale_skipped_steps" (i64); the scale and the
// skip count are SUMMARIES, so MergeAllSummaries puts them as the monitor
// scalars "loss_scale" and "loss_scale_skipped_steps". global_step (when
// given) counts every step, skipped or not (the trainer's iteration).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/optimizers.h"

namespace spire {

/// A scalar bool: true when every element of every valid tensor is finite
/// (no inf, no NaN). Built from existing ops: sum over all tensors of
/// sum(t * 0) is 0 exactly when all are finite, NaN otherwise.
Output all_finite(const std::vector<Output>& tensors, const std::string& name = "all_finite");

/// GradScaler's settings (PyTorch's defaults).
struct LossScaleOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

/// See the file comment. Shares the wrapped optimizer's learning rate,
/// slots and state.
class LossScaleOptimizer : public Optimizer {
 public:
  /// Makes the state variables in the graph of opt's learning rate. Throws
  /// spire::Error for a null optimizer, init_scale <= 0, growth_factor <= 1,
  /// backoff_factor outside (0, 1) or growth_interval < 1.
  explicit LossScaleOptimizer(std::shared_ptr<Optimizer> opt, LossScaleOptions options = {});

  /// Gradients of loss * loss_scale, each multiplied by 1 / loss_scale.
  GradsAndVars compute_gradients(const Output& loss,
                                 const std::vector<Output>& var_list = {}) override;
  /// The wrapped optimizer's step where all gradients are finite, no change
  /// of its variables and state otherwise; then the scale update.
  Node* apply_gradients(const GradsAndVars& grads_and_vars, const Output& global_step = {},
                        const std::string& name = "") override;

  Output get_slot(const Output& var, const std::string& slot_name) const override;
  std::vector<std::string> get_slot_names() const override;
  std::vector<Output> non_slot_variables() const override;
  std::vector<Output> state_variables(const std::vector<Output>& vars) override;
  void set_use_fused_ops(bool on) override;

  /// The scale variable (f32 scalar).
  Output loss_scale() const { return scale_; }
  /// Consecutive finite steps since the last change of the scale (i64).
  Output growth_tracker() const { return growth_tracker_; }
  /// Steps skipped for an inf or NaN gradient so far (i64).
  Output skipped_steps() const { return skipped_; }
  const LossScaleOptions& options() const { return options_; }
  const std::shared_ptr<Optimizer>& inner() const { return opt_; }

 protected:
  Node* apply_dense(const Output&, const Output&) override;

 private:
  std::shared_ptr<Optimizer> opt_;
  LossScaleOptions options_;
  Output scale_, growth_tracker_, skipped_;
};

}  // namespace spire

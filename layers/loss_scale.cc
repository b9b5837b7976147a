// all_finite and LossScaleOptimizer (see loss_scale.h).
#include "layers/loss_scale.h"

#include <cmath>
#include <utility>

#include "core/ops.h"

namespace spire {

Output all_finite(const std::vector<Output>& tensors, const std::string& name) {
  Graph* g = nullptr;
  std::vector<Output> sums;
  for (const Output& t : tensors) {
    if (!t.valid()) continue;
    SPIRE_CHECK(is_floating(t.dtype()), "all_finite: ", t.name(), " (", dtype_name(t.dtype()),
                t.shape().to_string(), ") is not floating-point");
    if (!g) g = t.graph();
    SPIRE_CHECK(t.graph() == g, "all_finite: ", t.name(), " is in another graph than ",
                sums.empty() ? std::string("the first tensor") : sums[0].name());
    // t * 0 is 0 for finite elements and NaN for inf and NaN; the sum keeps the NaN.
    Output zeroed = ops::mul(t, ops::scalar_like(0.0, t));
    sums.push_back(ops::cast(ops::sum(zeroed), DType::F32));
  }
  SPIRE_CHECK(g, "all_finite: no valid tensor given");
  Output total = ops::add_n(sums);
  return ops::equal(total, ops::scalar(0.0, DType::F32, g), name);
}

namespace {
const std::shared_ptr<Optimizer>& not_null(const std::shared_ptr<Optimizer>& opt) {
  SPIRE_CHECK(opt != nullptr, "LossScaleOptimizer: the optimizer is null");
  return opt;
}
}  // namespace

LossScaleOptimizer::LossScaleOptimizer(std::shared_ptr<Optimizer> opt, LossScaleOptions options)
    : Optimizer(not_null(opt)->learning_rate(), not_null(opt)->name()),
      opt_(std::move(opt)),
      options_(options) {
  const LossScaleOptions& o = options_;
  SPIRE_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0,
              "LossScaleOptimizer: init_scale must be > 0, got ", o.init_scale);
  SPIRE_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1,
              "LossScaleOptimizer: growth_factor must be > 1, got ", o.growth_factor);
  SPIRE_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1,
              "LossScaleOptimizer: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  SPIRE_CHECK(o.growth_interval >= 1, "LossScaleOptimizer: growth_interval must be >= 1, got ",
              o.growth_interval);
  Graph& g = *opt_->learning_rate().graph();
  scale_ = make_non_slot_variable(g, "loss_scale", Shape{}, DType::F32, o.init_scale);
  growth_tracker_ =
      make_non_slot_variable(g, "loss_scale_growth_tracker", Shape{}, DType::I64, 0);
  skipped_ = make_non_slot_variable(g, "loss_scale_skipped_steps", Shape{}, DType::I64, 0);
  DefaultGraphGuard dg(g);
  NameScope ns(g, "");
  g.add_to_collection(GraphKeys::SUMMARIES, ops::identity(scale_, "loss_scale-summary"));
  g.add_to_collection(GraphKeys::SUMMARIES,
                      ops::identity(skipped_, "loss_scale_skipped_steps-summary"));
}

GradsAndVars LossScaleOptimizer::compute_gradients(const Output& loss,
                                                   const std::vector<Output>& var_list) {
  SPIRE_CHECK(loss.valid(), "LossScaleOptimizer '", name(), "': compute_gradients got an invalid loss");
  SPIRE_CHECK(loss.graph() == scale_.graph(), "LossScaleOptimizer '", name(),
              "': the loss is in another graph than the optimizer's learning rate");
  Graph& g = *loss.graph();
  Output scaled;
  {
    NameScope ns(g, "loss_scale");
    scaled = ops::mul(loss, ops::cast(scale_, loss.dtype()), "scaled_loss");
  }
  GradsAndVars gv = opt_->compute_gradients(scaled, var_list);
  NameScope ns(g, "unscale");
  for (auto& [grad, var] : gv) {
    if (!grad.valid()) continue;
    // 1 / scale in f32 (exact for the power-of-two scales of the defaults), as unscale_.
    Output inv = ops::div(ops::scalar(1.0, DType::F32, &g), scale_);
    grad = ops::mul(grad, ops::cast(inv, grad.dtype()));
  }
  return gv;
}

Node* LossScaleOptimizer::apply_gradients(const GradsAndVars& grads_and_vars,
                                          const Output& global_step, const std::string& name) {
  std::vector<Output> grads, vars;
  for (const auto& [grad, var] : grads_and_vars) {
    if (!grad.valid()) continue;
    grads.push_back(grad);
    vars.push_back(var);
  }
  SPIRE_CHECK(!vars.empty(), "LossScaleOptimizer '", this->name(),
              "': apply_gradients got no valid gradient");
  Graph& g = *vars[0].graph();
  SPIRE_CHECK(&g == scale_.graph(), "LossScaleOptimizer '", this->name(),
              "': the variables are in another graph than the optimizer's learning rate");
  // Everything the wrapped step may change (its slots made now, outside scopes).
  std::vector<Output> state = vars;
  for (const Output& s : opt_->state_variables(vars)) state.push_back(s);

  Node* train = ops::no_op(name.empty() ? this->name() : name, &g);
  const std::string scope = train->name() + "/";
  Output finite;
  std::vector<Output> before;
  GradsAndVars gated;
  {
    NameScope ns(g, scope);
    finite = all_finite(grads);
    std::vector<Node*> reads;
    for (const Output& s : state) {
      DeviceScope ds(g, s.node->device());
      before.push_back(ops::identity(s, "before"));
      reads.push_back(before.back().node);
    }
    // The wrapped step waits for its gradients, so gradients that wait for the reads make
    // the reads see the values before the step.
    ControlDependencies after_reads(g, reads);
    for (const auto& [grad, var] : grads_and_vars)
      gated.emplace_back(grad.valid() ? ops::identity(grad, "grad") : grad, var);
  }
  Node* step = opt_->apply_gradients(gated, global_step);

  NameScope ns(g, scope);
  ControlDependencies after_step(g, {step});
  for (size_t i = 0; i < state.size(); ++i) {
    DeviceScope ds(g, state[i].node->device());
    Output kept = ops::where(finite, state[i], before[i]);
    train->add_control_input(ops::assign(state[i], kept, "keep_if_finite").node);
  }
  // GradScaler.update().
  const LossScaleOptions& o = options_;
  Output zero = ops::scalar(0, DType::I64, &g), one = ops::scalar(1, DType::I64, &g);
  Output tracker = ops::where(finite, ops::add(growth_tracker_, one), zero);
  Output grow = ops::greater_equal(tracker, ops::scalar(static_cast<double>(o.growth_interval),
                                                        DType::I64, &g));
  Output grown = ops::where(grow, ops::mul(scale_, ops::scalar(o.growth_factor, DType::F32, &g)),
                            scale_);
  Output new_scale =
      ops::where(finite, grown, ops::mul(scale_, ops::scalar(o.backoff_factor, DType::F32, &g)));
  train->add_control_input(ops::assign(scale_, new_scale, "update_scale").node);
  train->add_control_input(
      ops::assign(growth_tracker_, ops::where(grow, zero, tracker), "update_growth_tracker").node);
  train->add_control_input(
      ops::assign_add(skipped_, ops::where(finite, zero, one), "count_skipped").node);
  return train;
}

Output LossScaleOptimizer::get_slot(const Output& var, const std::string& slot_name) const {
  return opt_->get_slot(var, slot_name);
}
std::vector<std::string> LossScaleOptimizer::get_slot_names() const {
  return opt_->get_slot_names();
}
std::vector<Output> LossScaleOptimizer::non_slot_variables() const {
  return opt_->non_slot_variables();
}
std::vector<Output> LossScaleOptimizer::state_variables(const std::vector<Output>& vars) {
  return opt_->state_variables(vars);
}
void LossScaleOptimizer::set_use_fused_ops(bool on) {
  Optimizer::set_use_fused_ops(on);
  opt_->set_use_fused_ops(on);
}

Node* LossScaleOptimizer::apply_dense(const Output&, const Output&) {
  throw_error("internal error: LossScaleOptimizer::apply_dense called");
}

}  // namespace spire

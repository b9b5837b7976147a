// AccumGradOptimizer (see accum_grad_optimizer.h): the accumulator slots,
// the run counter and the gated inner update.
#include "layers/accum_grad_optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/op_registry.h"
#include "core/ops.h"

namespace spire {

namespace {
std::shared_ptr<Optimizer> checked(std::shared_ptr<Optimizer> opt) {
  SPIRE_CHECK(opt != nullptr, "AccumGradOptimizer: the inner optimizer is null");
  return opt;
}
}  // namespace

AccumGradOptimizer::AccumGradOptimizer(std::shared_ptr<Optimizer> opt, int niter, AccumMode mode,
                                       const std::string& name)
    : Optimizer(checked(opt)->learning_rate(), name),
      opt_(std::move(opt)),
      niter_(niter),
      mode_(mode) {
  SPIRE_CHECK(niter >= 1, "AccumGradOptimizer '", name, "': niter must be >= 1, got ", niter);
}

GradsAndVars AccumGradOptimizer::compute_gradients(const Output& loss,
                                                   const std::vector<Output>& var_list) {
  return opt_->compute_gradients(loss, var_list);
}

Node* AccumGradOptimizer::apply_gradients(const GradsAndVars& grads_and_vars,
                                          const Output& global_step, const std::string& name) {
  if (niter_ == 1) return opt_->apply_gradients(grads_and_vars, global_step, name);
  GradsAndVars pairs;
  for (const auto& p : grads_and_vars)
    if (p.first.valid()) pairs.push_back(p);
  SPIRE_CHECK(!pairs.empty(), "AccumGradOptimizer '", this->name(),
              "': no gradients provided for any variable");
  Graph& g = *pairs[0].second.graph();
  for (const auto& [grad, var] : pairs) {
    SPIRE_CHECK(var.valid() && var.node->op_def().is_variable() && var.graph() == &g,
                "AccumGradOptimizer '", this->name(), "': '",
                var.valid() ? var.node->name() : std::string("<invalid>"),
                "' is not a variable of the graph of '", pairs[0].second.node->name(), "'");
    SPIRE_CHECK(is_floating(var.dtype()) && grad.dtype() == var.dtype() &&
                    grad.graph() == &g,
                "AccumGradOptimizer '", this->name(), "': the gradient '", grad.name(), "' (",
                dtype_name(grad.dtype()), ") does not fit variable '", var.node->name(), "' (",
                dtype_name(var.dtype()), ")");
  }
  for (const auto& p : pairs)
    SPIRE_CHECK(accumulated_.insert(p.second.node).second, "AccumGradOptimizer '", this->name(),
                "': variable '", p.second.node->name(),
                "' is already accumulated by an earlier apply_gradients of this optimizer; each "
                "variable takes one accumulating train op (not AsyncMultiGPUTrainer's per-tower "
                "updates of shared variables)");
  // State first, outside the step's name scope.
  std::vector<Output> accs;
  for (const auto& p : pairs) accs.push_back(zeros_slot(p.second, "AccumGrad"));
  {
    // One counter per train op (tensorpack makes one per apply_gradients call):
    // replicas' updates built by separate calls each count their own runs.
    DeviceScope ds(g, pairs[0].second.node->device());  // as Adam's beta powers
    counter_ = make_non_slot_variable(g, this->name() + "_counter", Shape{}, DType::I64, 0.0);
  }

  Node* train = ops::no_op(name.empty() ? this->name() : name, &g);
  NameScope ns(g, train->name() + "/");
  Output count, first, apply;
  {
    DeviceScope ds(g, counter_.node->device());
    count = ops::assign_add(counter_, ops::scalar(1, DType::I64, &g), "update_counter");
    first = ops::equal(count, ops::scalar(1, DType::I64, &g), "first");
    // >= rather than ==: a counter restored from a run with a larger k applies at once.
    apply = ops::greater_equal(count, ops::scalar(niter_, DType::I64, &g), "apply_now");
  }
  GradsAndVars accumulated;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [grad, var] = pairs[i];
    DeviceScope ds(g, var.node->device());
    NameScope vs(g, "accum_" + var.node->name());
    Output gi = mode_ == AccumMode::kMean ? grad * (1.0 / niter_) : grad;
    Output sum = ops::where(first, gi, accs[i] + gi);
    accumulated.emplace_back(ops::assign(accs[i], sum, "accum"), var);
  }
  Node* update = opt_->apply_gradients_if(apply, accumulated, {}, "apply");
  Node* reset = nullptr;
  {
    ControlDependencies after(g, {update});
    DeviceScope ds(g, counter_.node->device());
    reset = ops::assign(counter_, ops::where(apply, ops::scalar(0, DType::I64, &g), count),
                        "reset_counter")
                .node;
  }
  if (global_step.valid()) {
    SPIRE_CHECK(global_step.node->op_def().is_variable() && global_step.graph() == &g &&
                    global_step.shape().rank() == 0 && global_step.dtype() != DType::Bool,
                "AccumGradOptimizer '", this->name(),
                "': global_step must be a scalar numeric variable of the variables' graph");
    ControlDependencies after(g, {reset});
    train->add_control_input(ops::assign_add(global_step, ops::scalar(1, global_step.dtype(), &g),
                                             "increment_global_step")
                                 .node);
  } else {
    train->add_control_input(reset);
  }
  return train;
}

Node* AccumGradOptimizer::apply_gradients_if(const Output&, const GradsAndVars&, const Output&,
                                             const std::string&) {
  throw_error("AccumGradOptimizer '", name(),
              "': apply_gradients_if is not supported (an accumulation cannot be gated)");
}

Output AccumGradOptimizer::get_slot(const Output& var, const std::string& slot_name) const {
  if (slot_name == "AccumGrad") return Optimizer::get_slot(var, slot_name);
  return opt_->get_slot(var, slot_name);
}

std::vector<std::string> AccumGradOptimizer::get_slot_names() const {
  std::vector<std::string> names = opt_->get_slot_names();
  names.push_back("AccumGrad");
  return names;
}

void AccumGradOptimizer::set_use_fused_ops(bool on) {
  Optimizer::set_use_fused_ops(on);
  opt_->set_use_fused_ops(on);
}

Node* AccumGradOptimizer::apply_dense(const Output&, const Output&) {
  throw_error("internal error: AccumGradOptimizer::apply_dense called");
}

}  // namespace spire

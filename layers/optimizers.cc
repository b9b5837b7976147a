// Optimizers (see optimizers.h): the shared compute/apply machinery of the
// Optimizer base, the GradientDescent/Momentum/Adam/AdamW updates as fused
// update ops (one per dtype/device group) or per-variable graphs of small
// ops, global-norm clipping, gradient processors and tower averaging.
#include "layers/optimizers.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "autograd/gradients.h"
#include "core/error.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "layers/initializers.h"

namespace spire {

namespace {

std::string describe_output(const Output& o) {
  if (!o.valid()) return "<invalid>";
  return str_cat("'", o.name(), "' (", dtype_name(o.dtype()), o.shape().to_string(), ")");
}

bool is_variable(const Output& o) { return o.valid() && o.node->op_def().is_variable(); }

void check_lr(const Output& lr, const std::string& opt) {
  SPIRE_CHECK(lr.valid(), "Optimizer '", opt, "': the learning rate is an invalid Output");
  SPIRE_CHECK(is_floating(lr.dtype()) && lr.dtype() != DType::F16 && lr.dtype() != DType::BF16,
              "Optimizer '", opt, "': the learning rate must be a f32 or f64 scalar, got ",
              describe_output(lr));
  SPIRE_CHECK(lr.shape().rank() == 0, "Optimizer '", opt,
              "': the learning rate must be a scalar, got ", describe_output(lr));
}

// True when a gradient of static shape `g` fits a variable of shape `v`.
bool grad_shape_fits(const Shape& g, const Shape& v) {
  if (g.rank() != v.rank()) return false;
  for (int i = 0; i < g.rank(); ++i)
    if (g[i] >= 0 && g[i] != v[i]) return false;
  return true;
}

}  // namespace

// ---- Optimizer ----------------------------------------------------------------

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(double lr, std::string name) : name_(std::move(name)) {
  SPIRE_CHECK(std::isfinite(lr), "Optimizer '", name_, "': the learning rate must be finite, got ",
              lr);
  Graph& g = default_graph();  // get_variable's graph
  // tensorpack: tf.get_variable('learning_rate', initializer=lr, trainable=False);
  // reuse the variable when it already exists in the current variable scope.
  const VariableScope vs = current_variable_scope(&g);
  const std::string full = vs.name.empty() ? "learning_rate" : vs.name + "/learning_rate";
  for (const Variable& v : all_variables(&g))
    if (v.name() == full) {
      lr_ = v.value;
      break;
    }
  if (!lr_.valid())
    lr_ = get_variable("learning_rate", Shape{}, DType::F32, init::constant(lr), false).value;
  check_lr(lr_, name_);
}

Optimizer::Optimizer(const Output& lr, std::string name) : name_(std::move(name)), lr_(lr) {
  check_lr(lr_, name_);
}

GradsAndVars Optimizer::compute_gradients(const Output& loss, const std::vector<Output>& var_list) {
  SPIRE_CHECK(loss.valid(), "Optimizer '", name_, "': compute_gradients got an invalid loss");
  SPIRE_CHECK(loss.shape().rank() == 0, "Optimizer '", name_, "': the loss must be a scalar, got ",
              describe_output(loss));
  SPIRE_CHECK(is_floating(loss.dtype()), "Optimizer '", name_,
              "': the loss must be floating-point, got ", describe_output(loss));
  Graph* g = loss.graph();
  std::vector<Output> vars = var_list.empty() ? trainable_variables("", g) : var_list;
  SPIRE_CHECK(!vars.empty(), "Optimizer '", name_, "': no variables to optimize for loss ",
              describe_output(loss), " (TRAINABLE_VARIABLES is empty)");
  for (const Output& v : vars) {
    SPIRE_CHECK(is_variable(v), "Optimizer '", name_, "': ", describe_output(v),
                " in var_list is not a variable");
    SPIRE_CHECK(v.graph() == g, "Optimizer '", name_, "': variable '", v.node->name(),
                "' is not in the graph of the loss ", describe_output(loss));
    SPIRE_CHECK(is_floating(v.dtype()), "Optimizer '", name_, "': variable ", describe_output(v),
                " is not floating-point; only float variables can be optimized");
  }
  std::vector<Output> grads = gradients({loss}, vars);
  GradsAndVars out;
  for (size_t i = 0; i < vars.size(); ++i)
    if (grads[i].valid()) out.emplace_back(grads[i], vars[i]);
  if (out.empty()) {
    std::string names;
    for (const Output& v : vars) names += (names.empty() ? "'" : ", '") + v.node->name() + "'";
    throw_error("Optimizer '", name_, "': no gradients provided for any variable: the loss ",
                describe_output(loss), " depends on none of ", names);
  }
  return out;
}

Node* Optimizer::apply_gradients(const GradsAndVars& grads_and_vars, const Output& global_step,
                                 const std::string& name) {
  return build_apply(grads_and_vars, Output(), global_step, name);
}

Node* Optimizer::apply_gradients_if(const Output& apply_if, const GradsAndVars& grads_and_vars,
                                    const Output& global_step, const std::string& name) {
  SPIRE_CHECK(apply_if.valid() && apply_if.dtype() == DType::Bool && apply_if.shape().rank() == 0,
              "Optimizer '", name_, "': apply_if must be a scalar bool, got ",
              describe_output(apply_if));
  return build_apply(grads_and_vars, apply_if, global_step, name);
}

Node* Optimizer::build_apply(const GradsAndVars& grads_and_vars, const Output& apply_if,
                             const Output& global_step, const std::string& name) {
  SPIRE_CHECK(!grads_and_vars.empty(), "Optimizer '", name_,
              "': apply_gradients got no (gradient, variable) pairs");
  Graph* g = nullptr;
  GradsAndVars pairs;
  std::set<const Node*> seen;
  std::string names;
  for (const auto& [grad, var] : grads_and_vars) {
    SPIRE_CHECK(is_variable(var), "Optimizer '", name_, "': ", describe_output(var),
                " is not a variable");
    if (!g) g = var.graph();
    SPIRE_CHECK(var.graph() == g, "Optimizer '", name_, "': variable '", var.node->name(),
                "' is in another graph than '", grads_and_vars[0].second.node->name(), "'");
    SPIRE_CHECK(is_floating(var.dtype()), "Optimizer '", name_, "': variable ",
                describe_output(var), " is not floating-point; only float variables can be optimized");
    SPIRE_CHECK(seen.insert(var.node).second, "Optimizer '", name_, "': variable '",
                var.node->name(), "' is listed twice in grads_and_vars");
    names += (names.empty() ? "'" : ", '") + var.node->name() + "'";
    if (!grad.valid()) continue;  // TF: a None gradient leaves the variable alone
    SPIRE_CHECK(grad.graph() == g, "Optimizer '", name_, "': the gradient of '", var.node->name(),
                "' is in another graph");
    SPIRE_CHECK(grad.dtype() == var.dtype(), "Optimizer '", name_, "': gradient ",
                describe_output(grad), " does not match the dtype of variable ",
                describe_output(var));
    SPIRE_CHECK(grad_shape_fits(grad.shape(), var.shape()), "Optimizer '", name_, "': gradient ",
                describe_output(grad), " does not match the shape of variable ",
                describe_output(var));
    pairs.emplace_back(grad, var);
  }
  SPIRE_CHECK(!pairs.empty(), "Optimizer '", name_, "': no gradients provided for any variable (",
              names, ")");
  SPIRE_CHECK(lr_.graph() == g, "Optimizer '", name_, "': the learning rate ",
              describe_output(lr_), " is in another graph than the variables");
  SPIRE_CHECK(!apply_if.valid() || apply_if.graph() == g, "Optimizer '", name_, "': apply_if ",
              describe_output(apply_if), " is in another graph than the variables");
  if (global_step.valid()) {
    SPIRE_CHECK(is_variable(global_step) && global_step.graph() == g &&
                    global_step.shape().rank() == 0 && global_step.dtype() != DType::Bool,
                "Optimizer '", name_, "': global_step must be a scalar numeric variable of the ",
                "variables' graph, got ", describe_output(global_step));
  }

  std::vector<Output> vars;
  std::vector<Node*> grad_nodes;
  for (const auto& [grad, var] : pairs) {
    vars.push_back(var);
    if (std::find(grad_nodes.begin(), grad_nodes.end(), grad.node) == grad_nodes.end())
      grad_nodes.push_back(grad.node);
  }
  // Slots and other state first: outside the update's scope and control deps.
  create_slots(vars);

  Node* train = ops::no_op(name.empty() ? name_ : name, g);
  const std::string scope = train->name() + "/";
  std::vector<Node*> done;
  {
    NameScope ns(*g, scope);
    // Every update waits for every gradient: a gradient may read any variable.
    ControlDependencies after_grads(*g, grad_nodes);
    lr_cast_.clear();
    gate_cast_.clear();
    apply_if_ = apply_if;
    prepare(vars);
    // One fused update per (dtype, device) group of f32/f64 variables, in
    // the order the groups first appear; per-variable updates otherwise.
    std::vector<std::pair<DType, Device>> keys;
    std::vector<GradsAndVars> groups;
    for (const auto& p : pairs) {
      std::pair<DType, Device> key{p.second.dtype(), p.second.node->device()};
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end()) {
        keys.push_back(key);
        groups.emplace_back();
        it = keys.end() - 1;
      }
      groups[static_cast<size_t>(it - keys.begin())].push_back(p);
    }
    std::vector<Node*> updates;
    for (size_t k = 0; k < groups.size(); ++k) {
      Node* fused = nullptr;
      if (use_fused_ops_ && (keys[k].first == DType::F32 || keys[k].first == DType::F64)) {
        std::vector<Output> group_grads, group_vars;
        for (const auto& [grad, var] : groups[k]) {
          group_grads.push_back(grad);
          group_vars.push_back(var);
        }
        DeviceScope ds(*g, keys[k].second);
        fused = apply_fused(group_grads, group_vars);
      }
      if (fused) {
        updates.push_back(fused);
        continue;
      }
      for (const auto& [grad, var] : groups[k]) {
        NameScope us(*g, "update_" + var.node->name());
        DeviceScope ds(*g, var.node->device());
        updates.push_back(apply_dense(grad, var));
      }
    }
    done = finish(updates);
    apply_if_ = Output();
    gate_cast_.clear();
  }
  if (global_step.valid()) {
    NameScope ns(*g, scope);
    Node* update = ops::group(done, "update", g);
    ControlDependencies after_update(*g, {update});
    Output inc = ops::assign_add(global_step, ops::scalar(1, global_step.dtype(), g),
                                 "increment_global_step");
    train->add_control_input(inc.node);
  } else {
    for (Node* n : done) train->add_control_input(n);
  }
  lr_cast_.clear();
  return train;
}

Node* Optimizer::minimize(const Output& loss, const Output& global_step,
                          const std::vector<Output>& var_list, const std::string& name) {
  return apply_gradients(compute_gradients(loss, var_list), global_step, name);
}

Output Optimizer::get_slot(const Output& var, const std::string& slot_name) const {
  auto it = slots_.find({var.node, slot_name});
  return it == slots_.end() ? Output() : it->second;
}

std::vector<Output> Optimizer::state_variables(const std::vector<Output>& vars) {
  std::vector<Output> out;
  if (vars.empty()) return out;
  create_slots(vars);
  for (const Output& v : vars)
    for (const std::string& slot : get_slot_names()) {
      Output s = get_slot(v, slot);
      if (s.valid()) out.push_back(s);
    }
  for (const Output& s : non_slot_variables()) out.push_back(s);
  return out;
}

Output Optimizer::make_non_slot_variable(Graph& g, const std::string& name, const Shape& shape,
                                         DType dtype, double initial_value) {
  std::string unique = name;
  for (int i = 1; g.find_node(unique); ++i) unique = name + "_" + std::to_string(i);
  // Absolute name: leave the caller's variable scope and name scope.
  DefaultGraphGuard dg(g);  // get_variable builds in the default graph
  VariableScopeGuard top(VariableScope{}, Reuse::kNoReuse, &g);
  NameScope ns(g, "");
  Initializer init = initial_value == 0.0 ? init::zeros() : init::constant(initial_value);
  return get_variable(unique, shape, dtype, init, /*trainable=*/false).value;
}

Output Optimizer::zeros_slot(const Output& var, const std::string& slot_name) {
  auto key = std::make_pair(static_cast<const Node*>(var.node), slot_name);
  auto it = slots_.find(key);
  if (it != slots_.end()) return it->second;
  Graph& g = *var.graph();
  SPIRE_CHECK(var.shape().is_fully_defined(), "Optimizer '", name_, "': variable ",
              describe_output(var), " has no fully defined shape for its slot '", slot_name, "'");
  DeviceScope ds(g, var.node->device());  // TF colocates slots with their variable
  VariablePlacementGuard colocated(g, nullptr);
  // A replica's slots are replicas too (tower1/W/Momentum is local like tower1/W).
  LocalVariableGuard local(g, is_local_variable(var));
  Output slot = make_non_slot_variable(g, var.node->name() + "/" + slot_name, var.shape(),
                                       var.dtype(), 0.0);
  slots_[key] = slot;
  return slot;
}

Output Optimizer::gate_as(DType dtype) {
  if (!apply_if_.valid()) return Output();
  auto it = gate_cast_.find(dtype);
  if (it != gate_cast_.end()) return it->second;
  Output c = ops::cast(apply_if_, dtype, "apply_if_cast");
  gate_cast_[dtype] = c;
  return c;
}

Output Optimizer::gated_assign(const Output& var, const Output& value, const std::string& name) {
  if (!apply_if_.valid()) return ops::assign(var, value, name);
  return ops::assign(var, ops::where(apply_if_, value, var), name);
}

Output Optimizer::gated_assign_sub(const Output& var, const Output& delta,
                                   const std::string& name) {
  if (!apply_if_.valid()) return ops::assign_sub(var, delta, name);
  return ops::assign(var, ops::where(apply_if_, var - delta, var), name);
}

Output Optimizer::lr_as(DType dtype) {
  if (lr_.dtype() == dtype) return lr_;
  auto it = lr_cast_.find(dtype);
  if (it != lr_cast_.end()) return it->second;
  Output c = ops::cast(lr_, dtype, "learning_rate_cast");
  lr_cast_[dtype] = c;
  return c;
}

// ---- GradientDescent -------------------------------------------------------------

GradientDescentOptimizer::GradientDescentOptimizer(double lr, const std::string& name)
    : Optimizer(lr, name) {}
GradientDescentOptimizer::GradientDescentOptimizer(const Output& lr, const std::string& name)
    : Optimizer(lr, name) {}

Node* GradientDescentOptimizer::apply_dense(const Output& grad, const Output& var) {
  return gated_assign_sub(var, lr_as(var.dtype()) * grad, "apply").node;
}

Node* GradientDescentOptimizer::apply_fused(const std::vector<Output>& grads,
                                            const std::vector<Output>& vars) {
  return ops::fused_apply_gradient_descent(vars, grads, lr_as(vars[0].dtype()), "apply",
                                           gate_as(vars[0].dtype()));
}

// ---- Momentum ----------------------------------------------------------------------

MomentumOptimizer::MomentumOptimizer(double lr, double momentum, bool use_nesterov,
                                     const std::string& name)
    : Optimizer(lr, name), momentum_(momentum), nesterov_(use_nesterov) {}
MomentumOptimizer::MomentumOptimizer(const Output& lr, double momentum, bool use_nesterov,
                                     const std::string& name)
    : Optimizer(lr, name), momentum_(momentum), nesterov_(use_nesterov) {}

void MomentumOptimizer::create_slots(const std::vector<Output>& vars) {
  for (const Output& v : vars) zeros_slot(v, "Momentum");
}

Node* MomentumOptimizer::apply_dense(const Output& grad, const Output& var) {
  Output lr = lr_as(var.dtype());
  Output accum = get_slot(var, "Momentum");
  Output acc = gated_assign(accum, accum * momentum_ + grad, "accum");
  Output step = nesterov_ ? lr * (grad + acc * momentum_) : lr * acc;
  return gated_assign_sub(var, step, "apply").node;
}

Node* MomentumOptimizer::apply_fused(const std::vector<Output>& grads,
                                     const std::vector<Output>& vars) {
  std::vector<Output> accums;
  for (const Output& v : vars) accums.push_back(get_slot(v, "Momentum"));
  return ops::fused_apply_momentum(vars, grads, accums, lr_as(vars[0].dtype()), momentum_,
                                   nesterov_, "apply", gate_as(vars[0].dtype()));
}

// ---- Adam ----------------------------------------------------------------------------

namespace {
void check_adam_params(const std::string& name, double beta1, double beta2, double epsilon) {
  SPIRE_CHECK(beta1 >= 0 && beta1 < 1, "Optimizer '", name, "': beta1 must be in [0, 1), got ",
              beta1);
  SPIRE_CHECK(beta2 >= 0 && beta2 < 1, "Optimizer '", name, "': beta2 must be in [0, 1), got ",
              beta2);
  SPIRE_CHECK(epsilon >= 0, "Optimizer '", name, "': epsilon must be >= 0, got ", epsilon);
}

// The first- and second-moment slots ("Adam", "Adam_1") of each of `vars`.
std::pair<std::vector<Output>, std::vector<Output>> adam_slots(const Optimizer& opt,
                                                               const std::vector<Output>& vars) {
  std::pair<std::vector<Output>, std::vector<Output>> mv;
  for (const Output& var : vars) {
    mv.first.push_back(opt.get_slot(var, "Adam"));
    mv.second.push_back(opt.get_slot(var, "Adam_1"));
  }
  return mv;
}

// The new moments of one variable: m_t = beta1 * m + grad * (1 - beta1) and
// v_t = beta2 * v + grad^2 * (1 - beta2) (to be assigned to the slots m, v).
struct AdamMoments {
  Output m, v, m_t, v_t;
};
AdamMoments adam_moments(const Optimizer& opt, const Output& grad, const Output& var,
                         double beta1, double beta2) {
  AdamMoments r;
  r.m = opt.get_slot(var, "Adam");
  r.v = opt.get_slot(var, "Adam_1");
  r.m_t = r.m * beta1 + grad * (1.0 - beta1);
  r.v_t = r.v * beta2 + ops::square(grad) * (1.0 - beta2);
  return r;
}
}  // namespace

AdamOptimizer::AdamOptimizer(double lr, double beta1, double beta2, double epsilon,
                             const std::string& name)
    : Optimizer(lr, name), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {
  check_adam_params(this->name(), beta1, beta2, epsilon);
}
AdamOptimizer::AdamOptimizer(const Output& lr, double beta1, double beta2, double epsilon,
                             const std::string& name)
    : Optimizer(lr, name), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {
  check_adam_params(this->name(), beta1, beta2, epsilon);
}

void AdamOptimizer::create_slots(const std::vector<Output>& vars) {
  if (!beta1_power_.valid()) {
    // TF1: non-slot variables in the dtype of the first variable, colocated with it.
    Graph& g = *vars[0].graph();
    DeviceScope ds(g, vars[0].node->device());
    beta1_power_ = make_non_slot_variable(g, "beta1_power", Shape{}, vars[0].dtype(), beta1_);
    beta2_power_ = make_non_slot_variable(g, "beta2_power", Shape{}, vars[0].dtype(), beta2_);
  }
  SPIRE_CHECK(beta1_power_.graph() == vars[0].graph(), "Optimizer '", name(),
              "': used on variables of two graphs");
  for (const Output& v : vars) {
    zeros_slot(v, "Adam");
    zeros_slot(v, "Adam_1");
  }
}

std::vector<Output> AdamOptimizer::non_slot_variables() const {
  if (!beta1_power_.valid()) return {};
  return {beta1_power_, beta2_power_};
}

void AdamOptimizer::prepare(const std::vector<Output>& vars) {
  (void)vars;
  powers_cast_.clear();
}

std::pair<Output, Output> AdamOptimizer::powers_as(DType dtype) {
  if (beta1_power_.dtype() == dtype) return {beta1_power_, beta2_power_};
  auto it = powers_cast_.find(dtype);
  if (it != powers_cast_.end()) return it->second;
  std::pair<Output, Output> p{ops::cast(beta1_power_, dtype, "beta1_power_cast"),
                              ops::cast(beta2_power_, dtype, "beta2_power_cast")};
  powers_cast_[dtype] = p;
  return p;
}

Node* AdamOptimizer::apply_dense(const Output& grad, const Output& var) {
  auto [b1p, b2p] = powers_as(var.dtype());
  Output lr = lr_as(var.dtype());
  Output lr_t = lr * ops::sqrt(1.0 - b2p) / (1.0 - b1p);
  AdamMoments mo = adam_moments(*this, grad, var, beta1_, beta2_);
  Output m_t = gated_assign(mo.m, mo.m_t, "m");
  Output v_t = gated_assign(mo.v, mo.v_t, "v");
  return gated_assign_sub(var, lr_t * m_t / (ops::sqrt(v_t) + epsilon_), "apply").node;
}

Node* AdamOptimizer::apply_fused(const std::vector<Output>& grads,
                                 const std::vector<Output>& vars) {
  const DType dt = vars[0].dtype();
  auto [b1p, b2p] = powers_as(dt);
  auto [m, v] = adam_slots(*this, vars);
  return ops::fused_apply_adam(vars, grads, m, v, lr_as(dt), b1p, b2p, beta1_, beta2_, epsilon_,
                               "apply", gate_as(dt));
}

std::vector<Node*> AdamOptimizer::finish(const std::vector<Node*>& updates) {
  Graph& g = *beta1_power_.graph();
  std::vector<Node*> out = updates;
  ControlDependencies after(g, updates);
  DeviceScope ds(g, beta1_power_.node->device());
  out.push_back(gated_assign(beta1_power_, beta1_power_ * beta1_, "update_beta1_power").node);
  out.push_back(gated_assign(beta2_power_, beta2_power_ * beta2_, "update_beta2_power").node);
  return out;
}

// ---- AdamW ---------------------------------------------------------------------------

WeightDecayFilter decay_all() {
  return [](const Output&) { return true; };
}

WeightDecayFilter decay_if_rank_at_least(int min_rank) {
  return [min_rank](const Output& var) { return var.shape().rank() >= min_rank; };
}

namespace {
std::vector<std::regex> compile_regexes(const std::vector<std::string>& regexes,
                                        const char* who) {
  SPIRE_CHECK(!regexes.empty(), who, ": no regex given");
  std::vector<std::regex> out;
  for (const std::string& r : regexes) {
    SPIRE_CHECK(!r.empty(), who, ": a regex is empty");
    try {
      out.emplace_back(r);
    } catch (const std::regex_error& e) {
      throw_error(who, ": invalid regex '", r, "': ", e.what());
    }
  }
  return out;
}
bool any_match(const std::vector<std::regex>& res, const std::string& name) {
  for (const std::regex& re : res)
    if (std::regex_search(name, re)) return true;
  return false;
}
}  // namespace

WeightDecayFilter decay_if_name_matches(const std::vector<std::string>& regexes) {
  auto res = compile_regexes(regexes, "decay_if_name_matches");
  return [res](const Output& var) { return any_match(res, var.node->name()); };
}

WeightDecayFilter decay_unless_name_matches(const std::vector<std::string>& regexes) {
  auto res = compile_regexes(regexes, "decay_unless_name_matches");
  return [res](const Output& var) { return !any_match(res, var.node->name()); };
}

AdamWOptimizer::AdamWOptimizer(double lr, double weight_decay, double beta1, double beta2,
                               double epsilon, const std::string& name)
    : AdamOptimizer(lr, beta1, beta2, epsilon, name),
      weight_decay_(weight_decay),
      decay_filter_(decay_all()) {
  SPIRE_CHECK(weight_decay >= 0, "Optimizer '", this->name(),
              "': weight_decay must be >= 0, got ", weight_decay);
}
AdamWOptimizer::AdamWOptimizer(const Output& lr, double weight_decay, double beta1, double beta2,
                               double epsilon, const std::string& name)
    : AdamOptimizer(lr, beta1, beta2, epsilon, name),
      weight_decay_(weight_decay),
      decay_filter_(decay_all()) {
  SPIRE_CHECK(weight_decay >= 0, "Optimizer '", this->name(),
              "': weight_decay must be >= 0, got ", weight_decay);
}

void AdamWOptimizer::set_weight_decay_filter(WeightDecayFilter filter) {
  SPIRE_CHECK(filter != nullptr, "Optimizer '", name(), "': the weight-decay filter is null");
  decay_filter_ = std::move(filter);
}

double AdamWOptimizer::weight_decay_for(const Output& var) const {
  return decay_filter_(var) ? weight_decay_ : 0.0;
}

Node* AdamWOptimizer::apply_dense(const Output& grad, const Output& var) {
  auto [b1p, b2p] = powers_as(var.dtype());
  Output lr = lr_as(var.dtype());
  AdamMoments mo = adam_moments(*this, grad, var, beta1_, beta2_);
  Output m_t = gated_assign(mo.m, mo.m_t, "m");
  Output v_t = gated_assign(mo.v, mo.v_t, "v");
  // torch.optim.AdamW: p *= 1 - lr * wd; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
  Output step_size = lr / (1.0 - b1p);
  Output denom = ops::sqrt(v_t) / ops::sqrt(1.0 - b2p) + epsilon_;
  Output decayed = var * (1.0 - lr * weight_decay_for(var));
  return gated_assign(var, decayed - step_size * (m_t / denom), "apply").node;
}

Node* AdamWOptimizer::apply_fused(const std::vector<Output>& grads,
                                  const std::vector<Output>& vars) {
  const DType dt = vars[0].dtype();
  auto [b1p, b2p] = powers_as(dt);
  // One fused op per parameter group (decayed first), as torch's loop over param_groups.
  std::vector<Node*> groups;
  for (bool decayed : {true, false}) {
    std::vector<Output> gv, vv;
    for (size_t i = 0; i < vars.size(); ++i)
      if (decay_filter_(vars[i]) == decayed) {
        gv.push_back(grads[i]);
        vv.push_back(vars[i]);
      }
    if (vv.empty()) continue;
    auto [m, v] = adam_slots(*this, vv);
    groups.push_back(ops::fused_apply_adamw(vv, gv, m, v, lr_as(dt), b1p, b2p, beta1_, beta2_,
                                            epsilon_, decayed ? weight_decay_ : 0.0,
                                            decayed ? "apply" : "apply_no_decay", gate_as(dt)));
  }
  return groups.size() == 1 ? groups[0] : ops::group(groups, "apply_groups", vars[0].graph());
}

// ---- clipping ------------------------------------------------------------------------

Output global_norm(const std::vector<Output>& tensors, const std::string& name) {
  Graph* g = nullptr;
  DType acc = DType::F32;
  for (const Output& t : tensors) {
    if (!t.valid()) continue;
    SPIRE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64,
                "global_norm: tensor ", describe_output(t), " is not f32 or f64");
    if (!g) g = t.graph();
    SPIRE_CHECK(t.graph() == g, "global_norm: tensor ", describe_output(t),
                " is in another graph");
    if (t.dtype() == DType::F64) acc = DType::F64;
  }
  SPIRE_CHECK(g, "global_norm: no valid tensor given");
  NameScope ns(*g, name);
  // As tf.global_norm: sqrt(2 * sum of l2_loss(t)), one pass over each tensor.
  std::vector<Output> half_squares;
  for (const Output& t : tensors) {
    if (!t.valid()) continue;
    Output s = ops::l2_loss(t);
    half_squares.push_back(s.dtype() == acc ? s : ops::cast(s, acc));
  }
  Output total = half_squares.size() == 1 ? half_squares[0] : ops::add_n(half_squares);
  return ops::sqrt(total * 2.0, "global_norm");
}

std::pair<std::vector<Output>, Output> clip_by_global_norm(const std::vector<Output>& tensors,
                                                           double clip_norm,
                                                           const std::string& name,
                                                           ClipNormSemantics semantics) {
  SPIRE_CHECK(std::isfinite(clip_norm) && clip_norm > 0,
              "clip_by_global_norm: clip_norm must be a finite number > 0, got ", clip_norm);
  Graph* g = nullptr;
  for (const Output& t : tensors)
    if (t.valid()) {
      g = t.graph();
      break;
    }
  SPIRE_CHECK(g, "clip_by_global_norm: no valid tensor given");
  NameScope ns(*g, name);
  Output norm = global_norm(tensors);
  Output c = ops::scalar(clip_norm, norm.dtype(), g);
  Output scale =
      semantics == ClipNormSemantics::kTorch
          // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.0
          ? ops::minimum(c / (norm + 1e-6), ops::scalar(1.0, norm.dtype(), g))
          : c / ops::maximum(norm, c);  // TF: clip_norm * min(1/norm, 1/clip_norm)
  std::vector<Output> out;
  for (const Output& t : tensors) {
    if (!t.valid()) {
      out.emplace_back();
      continue;
    }
    Output s = t.dtype() == scale.dtype() ? scale : ops::cast(scale, t.dtype());
    out.push_back(t * s);
  }
  return {out, norm};
}

// ---- gradient processors ---------------------------------------------------------------

namespace {
Graph* graph_of(const GradsAndVars& gv) {
  for (const auto& p : gv) {
    if (p.first.valid()) return p.first.graph();
    if (p.second.valid()) return p.second.graph();
  }
  return nullptr;
}

// tensorpack's ProxyOptimizer + apply_grad_processors.
class GradProcOptimizer : public Optimizer {
 public:
  GradProcOptimizer(std::shared_ptr<Optimizer> opt, std::vector<GradientProcessor> procs)
      : Optimizer(opt->learning_rate(), opt->name()),
        opt_(std::move(opt)),
        procs_(std::move(procs)) {}

  GradsAndVars compute_gradients(const Output& loss, const std::vector<Output>& var_list) override {
    return opt_->compute_gradients(loss, var_list);
  }
  Node* apply_gradients(const GradsAndVars& grads_and_vars, const Output& global_step,
                        const std::string& name) override {
    return opt_->apply_gradients(process(grads_and_vars), global_step, name);
  }
  Node* apply_gradients_if(const Output& apply_if, const GradsAndVars& grads_and_vars,
                           const Output& global_step, const std::string& name) override {
    return opt_->apply_gradients_if(apply_if, process(grads_and_vars), global_step, name);
  }
  Output get_slot(const Output& var, const std::string& slot_name) const override {
    return opt_->get_slot(var, slot_name);
  }
  std::vector<std::string> get_slot_names() const override { return opt_->get_slot_names(); }
  std::vector<Output> non_slot_variables() const override { return opt_->non_slot_variables(); }
  std::vector<Output> state_variables(const std::vector<Output>& vars) override {
    return opt_->state_variables(vars);
  }
  void set_use_fused_ops(bool on) override {
    Optimizer::set_use_fused_ops(on);
    opt_->set_use_fused_ops(on);
  }

 protected:
  Node* apply_dense(const Output&, const Output&) override {
    throw_error("internal error: GradProcOptimizer::apply_dense called");
  }

 private:
  GradsAndVars process(const GradsAndVars& grads_and_vars) const {
    GradsAndVars gv = grads_and_vars;
    for (const GradientProcessor& p : procs_) {
      gv = p(gv);
      SPIRE_CHECK(!gv.empty(), "apply_grad_processors: a gradient processor returned no gradients");
    }
    return gv;
  }
  std::shared_ptr<Optimizer> opt_;
  std::vector<GradientProcessor> procs_;
};
}  // namespace

GradientProcessor GlobalNormClip(double norm, ClipNormSemantics semantics) {
  SPIRE_CHECK(std::isfinite(norm) && norm > 0, "GlobalNormClip: the norm must be > 0, got ", norm);
  return [norm, semantics](const GradsAndVars& gv) {
    Graph* g = graph_of(gv);
    SPIRE_CHECK(g, "GlobalNormClip: no gradients given");
    NameScope ns(*g, "GlobalNormClip");
    std::vector<Output> grads;
    for (const auto& p : gv) grads.push_back(p.first);
    std::vector<Output> clipped =
        clip_by_global_norm(grads, norm, "clip_by_global_norm", semantics).first;
    GradsAndVars out;
    for (size_t i = 0; i < gv.size(); ++i) out.emplace_back(clipped[i], gv[i].second);
    return out;
  };
}

GradientProcessor MapGradient(std::function<Output(const Output& grad, const Output& var)> fn) {
  SPIRE_CHECK(fn != nullptr, "MapGradient: the function is null");
  return [fn](const GradsAndVars& gv) {
    Graph* g = graph_of(gv);
    SPIRE_CHECK(g, "MapGradient: no gradients given");
    NameScope ns(*g, "MapGradient");
    GradsAndVars out;
    for (const auto& [grad, var] : gv)
      out.emplace_back(grad.valid() ? fn(grad, var) : grad, var);
    return out;
  };
}

std::shared_ptr<Optimizer> apply_grad_processors(std::shared_ptr<Optimizer> opt,
                                                 std::vector<GradientProcessor> processors) {
  SPIRE_CHECK(opt != nullptr, "apply_grad_processors: the optimizer is null");
  for (const GradientProcessor& p : processors)
    SPIRE_CHECK(p != nullptr, "apply_grad_processors: a gradient processor is null");
  return std::make_shared<GradProcOptimizer>(std::move(opt), std::move(processors));
}

// ---- towers ----------------------------------------------------------------------------

GradsAndVars average_grads(const std::vector<GradsAndVars>& tower_grads, bool average) {
  SPIRE_CHECK(!tower_grads.empty(), "average_grads: no towers given");
  const size_t n = tower_grads.size();
  if (n == 1) return tower_grads[0];
  const GradsAndVars& first = tower_grads[0];
  for (size_t t = 1; t < n; ++t)
    SPIRE_CHECK(tower_grads[t].size() == first.size(), "average_grads: tower ", t, " has ",
                tower_grads[t].size(), " (gradient, variable) pairs, tower 0 has ", first.size());
  Graph* g = graph_of(first);
  SPIRE_CHECK(g || first.empty(), "average_grads: tower 0 has no valid gradient or variable");
  GradsAndVars out;
  if (first.empty()) return out;
  NameScope ns(*g, "AvgGrad");
  for (size_t k = 0; k < first.size(); ++k) {
    const Output& var = first[k].second;
    std::vector<Output> grads;
    for (size_t t = 0; t < n; ++t) {
      const auto& [grad, v] = tower_grads[t][k];
      SPIRE_CHECK(v == var, "average_grads: pair ", k, " of tower ", t, " is for variable ",
                  describe_output(v), ", tower 0's for ", describe_output(var),
                  " (towers must list the same variables in the same order)");
      SPIRE_CHECK(grad.valid(), "average_grads: tower ", t, " has no gradient for variable ",
                  describe_output(var));
      grads.push_back(grad);
    }
    Output sum = ops::add_n(grads);
    out.emplace_back(average ? sum * (1.0 / static_cast<double>(n)) : sum, var);
  }
  return out;
}

}  // namespace spire

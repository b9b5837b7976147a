// Optimizers with TF1 tf.train.*Optimizer semantics (tensorpack's usage):
// compute_gradients / apply_gradients / minimize build the whole training
// step as graph ops, so one Session::run of the returned train op performs
// it. Slot variables ("<var>/Momentum", "<var>/Adam", "<var>/Adam_1") and
// Adam's "beta1_power"/"beta2_power" are non-trainable GLOBAL_VARIABLES
// made with get_variable (so global_variables_initializer() zeroes them).
// The built-in optimizers update all variables of one dtype and device
// with one fused op (core/ops/optimizer_ops.h: FusedApplyAdam, ...; one
// multi-tensor kernel on a GPU) instead of a few small ops per variable.
// apply_gradients_if gates every update by a bool scalar (the base of
// gradient accumulation, layers/accum_grad_optimizer.h); AdamW takes
// parameter groups (a WeightDecayFilter). Also gradient clipping by global
// norm (TF's or torch's semantics), tensorpack-style gradient processors
// (GlobalNormClip, MapGradient, apply_grad_processors) and average_grads
// for multi-tower training. Builds on layers/variables.h and
// autograd/gradients.h; the trainers in train/ use it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "layers/variables.h"

namespace spire {

/// (gradient, variable): TF's grads_and_vars element. The variable is a
/// Variable node's output.
using GradAndVar = std::pair<Output, Output>;
using GradsAndVars = std::vector<GradAndVar>;

/// Base class of the optimizers. Hyper-parameters other than the learning
/// rate are constants of the graph; the learning rate is a graph value
/// (normally the non-trainable scalar f32 variable "learning_rate"), read on
/// every step, so assigning it (an assign op or Session::set_variable_value)
/// takes effect on the next step. Updates are computed in each variable's
/// dtype (f32 and f64 variables both work; the learning rate is cast).
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// The optimizer's name: default name of its train op and name scope.
  const std::string& name() const { return name_; }
  /// The learning-rate value (a scalar float Output; the "learning_rate"
  /// variable when the optimizer was given a number).
  const Output& learning_rate() const { return lr_; }

  /// Gradients of the scalar float `loss` w.r.t. `var_list` (default: the
  /// TRAINABLE_VARIABLES of the loss's graph). Variables the loss does not
  /// depend on are left out (TF returns None for them); throws spire::Error
  /// when no variable gets a gradient, for a non-scalar or non-float loss and
  /// for non-float or non-variable entries of var_list.
  virtual GradsAndVars compute_gradients(const Output& loss,
                                         const std::vector<Output>& var_list = {});

  /// Builds the update of every variable from its gradient and returns the
  /// train op: a NoOp (named `name`, default the optimizer's name, made
  /// unique) that runs all updates. Pairs with an invalid gradient are
  /// skipped (an error when all are). All updates run after all gradients
  /// are computed. When `global_step` (a scalar Variable output) is given it
  /// is incremented by 1 after the updates. Throws spire::Error for a
  /// non-variable or non-float variable, a gradient whose dtype or shape does
  /// not match its variable, a variable listed twice, or mixed graphs.
  /// Slots are made on the first call for a variable and reused by later
  /// calls of the same optimizer (build it outside ControlDependencies
  /// guards: new slot variables would get those control inputs too).
  virtual Node* apply_gradients(const GradsAndVars& grads_and_vars, const Output& global_step = {},
                                const std::string& name = "");

  /// apply_gradients whose updates take effect only on the runs where
  /// `apply_if` (a scalar bool of the variables' graph) is true: on the
  /// other runs every variable and every piece of this optimizer's state
  /// (slots, Adam's beta powers) keeps its value. The fused updates get
  /// apply_if as their gate (core/ops/optimizer_ops.h), the per-variable
  /// graphs assign Select(apply_if, new, old). `global_step`, when given, is
  /// incremented on every run. A define-and-run graph has no conditional
  /// execution: AccumGradOptimizer applies every k-th run with it.
  virtual Node* apply_gradients_if(const Output& apply_if, const GradsAndVars& grads_and_vars,
                                   const Output& global_step = {}, const std::string& name = "");

  /// compute_gradients + apply_gradients.
  Node* minimize(const Output& loss, const Output& global_step = {},
                 const std::vector<Output>& var_list = {}, const std::string& name = "");

  /// The slot variable `slot_name` ("Momentum", "Adam", "Adam_1") this
  /// optimizer made for `var`, or an invalid Output when it has none.
  virtual Output get_slot(const Output& var, const std::string& slot_name) const;
  /// The slot names this optimizer uses (e.g. {"Adam", "Adam_1"}).
  virtual std::vector<std::string> get_slot_names() const { return {}; }
  /// The optimizer's own state variables that belong to no one variable
  /// (Adam's "beta1_power" and "beta2_power"); empty before they are made.
  virtual std::vector<Output> non_slot_variables() const { return {}; }
  /// The variables besides `vars` that an apply_gradients of `vars` changes:
  /// their slots and non_slot_variables(), made first where missing (as
  /// apply_gradients makes them; call it outside name scopes and control
  /// dependencies). Wrappers that must undo a skipped step use it
  /// (LossScaleOptimizer, layers/loss_scale.h).
  virtual std::vector<Output> state_variables(const std::vector<Output>& vars);

  /// Whether apply_gradients emits one fused update op per (dtype, device)
  /// group of f32/f64 variables (default) or, when off, the per-variable
  /// graph of small ops (same math; for comparisons and debugging). Takes
  /// effect on the next apply_gradients.
  virtual void set_use_fused_ops(bool on) { use_fused_ops_ = on; }
  bool use_fused_ops() const { return use_fused_ops_; }

 protected:
  /// Creates (or reuses, when it exists in the current variable scope) the
  /// non-trainable scalar f32 variable "learning_rate" of the default graph,
  /// initialized to `lr`.
  Optimizer(double lr, std::string name);
  /// Uses `lr` (a scalar float Output) as the learning rate.
  Optimizer(const Output& lr, std::string name);

  /// Makes the slots of the variables about to be updated (called outside
  /// any name scope or control dependency of the update).
  virtual void create_slots(const std::vector<Output>& vars) { (void)vars; }
  /// Builds shared values of one step (e.g. Adam's bias correction) before
  /// the per-variable updates; runs inside the update's scope.
  virtual void prepare(const std::vector<Output>& vars) { (void)vars; }
  /// Builds the update of one variable; returns the node that performs it.
  virtual Node* apply_dense(const Output& grad, const Output& var) = 0;
  /// Builds one fused op updating all `vars` (same f32/f64 dtype, same
  /// device; grads[i] belongs to vars[i]) and returns it, or null when the
  /// optimizer has no fused form (apply_dense is used per variable then).
  virtual Node* apply_fused(const std::vector<Output>& grads, const std::vector<Output>& vars) {
    (void)grads;
    (void)vars;
    return nullptr;
  }
  /// Builds what runs after all `updates` (e.g. Adam's beta-power updates,
  /// given control dependencies on them); returns the nodes the train op waits for.
  virtual std::vector<Node*> finish(const std::vector<Node*>& updates) { return updates; }

  /// A zero-initialized, non-trainable slot variable named exactly
  /// "<var name>/<slot_name>" (whatever the current name/variable scope;
  /// "<var name>/<slot_name>_1", ... when another optimizer took the name),
  /// shaped and typed like `var`; made once per (var, slot_name).
  Output zeros_slot(const Output& var, const std::string& slot_name);
  /// A non-trainable top-level variable `name` (made unique) in `g`.
  static Output make_non_slot_variable(Graph& g, const std::string& name, const Shape& shape,
                                       DType dtype, double initial_value);
  /// The learning rate as `dtype` (cast when needed; cached per apply_gradients call).
  Output lr_as(DType dtype);
  /// The apply_if of the apply_gradients_if being built (a bool scalar), or
  /// an invalid Output when the updates are not gated.
  const Output& apply_if() const { return apply_if_; }
  /// apply_if() as a 0/1 scalar of `dtype` (the fused ops' gate; cached per
  /// call), or an invalid Output when not gated.
  Output gate_as(DType dtype);
  /// ops::assign(var, value), or assign(var, Select(apply_if, value, var)) when gated.
  Output gated_assign(const Output& var, const Output& value, const std::string& name);
  /// ops::assign_sub(var, delta), or assign(var, Select(apply_if, var - delta, var)) when gated.
  Output gated_assign_sub(const Output& var, const Output& delta, const std::string& name);

 private:
  Node* build_apply(const GradsAndVars& grads_and_vars, const Output& apply_if,
                    const Output& global_step, const std::string& name);

  std::string name_;
  Output lr_;
  std::map<DType, Output> lr_cast_;
  Output apply_if_;
  std::map<DType, Output> gate_cast_;
  std::map<std::pair<const Node*, std::string>, Output> slots_;
  bool use_fused_ops_ = true;
};

/// Plain gradient descent (tf.train.GradientDescentOptimizer): var -= lr * g.
class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(double lr, const std::string& name = "GradientDescent");
  explicit GradientDescentOptimizer(const Output& lr, const std::string& name = "GradientDescent");

 protected:
  Node* apply_dense(const Output& grad, const Output& var) override;
  Node* apply_fused(const std::vector<Output>& grads, const std::vector<Output>& vars) override;
};
using SGDOptimizer = GradientDescentOptimizer;

/// tf.train.MomentumOptimizer: accum = accum * momentum + g; then
/// var -= lr * accum, or with Nesterov var -= lr * (g + momentum * accum).
/// Slot "<var>/Momentum".
class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(double lr, double momentum, bool use_nesterov = false,
                    const std::string& name = "Momentum");
  MomentumOptimizer(const Output& lr, double momentum, bool use_nesterov = false,
                    const std::string& name = "Momentum");
  std::vector<std::string> get_slot_names() const override { return {"Momentum"}; }

 protected:
  void create_slots(const std::vector<Output>& vars) override;
  Node* apply_dense(const Output& grad, const Output& var) override;
  Node* apply_fused(const std::vector<Output>& grads, const std::vector<Output>& vars) override;

 private:
  double momentum_;
  bool nesterov_;
};

/// tf.train.AdamOptimizer (TF1 update, "epsilon hat"): with t the step,
/// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m = beta1 m + (1 - beta1) g;
/// v = beta2 v + (1 - beta2) g^2; var -= lr_t * m / (sqrt(v) + epsilon).
/// Slots "<var>/Adam" (m) and "<var>/Adam_1" (v). As TF1, beta1^t and
/// beta2^t are the non-trainable scalar variables "beta1_power" and
/// "beta2_power" (initialized to beta1 and beta2, in the dtype of the first
/// variable, made on the first apply_gradients and multiplied by the betas
/// after each step's updates).
class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(double lr = 0.001, double beta1 = 0.9, double beta2 = 0.999,
                         double epsilon = 1e-8, const std::string& name = "Adam");
  AdamOptimizer(const Output& lr, double beta1 = 0.9, double beta2 = 0.999,
                double epsilon = 1e-8, const std::string& name = "Adam");
  std::vector<std::string> get_slot_names() const override { return {"Adam", "Adam_1"}; }
  std::vector<Output> non_slot_variables() const override;
  /// The beta-power variables (invalid before the first apply_gradients).
  Output beta1_power() const { return beta1_power_; }
  Output beta2_power() const { return beta2_power_; }

 protected:
  void create_slots(const std::vector<Output>& vars) override;
  void prepare(const std::vector<Output>& vars) override;
  Node* apply_dense(const Output& grad, const Output& var) override;
  Node* apply_fused(const std::vector<Output>& grads, const std::vector<Output>& vars) override;
  std::vector<Node*> finish(const std::vector<Node*>& updates) override;
  /// beta1^t and beta2^t of this step as `dtype`.
  std::pair<Output, Output> powers_as(DType dtype);

  double beta1_, beta2_, epsilon_;
  Output beta1_power_, beta2_power_;
  std::map<DType, std::pair<Output, Output>> powers_cast_;
};

/// Which variables AdamW decays: true for a variable in the decayed
/// parameter group (torch's param_groups with weight_decay), false for the
/// group with weight_decay 0.
using WeightDecayFilter = std::function<bool(const Output& var)>;
/// Decays every variable (torch.optim.AdamW given one parameter group).
WeightDecayFilter decay_all();
/// Decays the variables of rank >= `min_rank`. nanoGPT's configure_optimizers
/// is decay_if_rank_at_least(2): matrices and embeddings decay; biases and
/// LayerNorm scales and offsets (rank 1) do not.
WeightDecayFilter decay_if_rank_at_least(int min_rank);
/// Decays the variables whose name matches (std::regex_search, as
/// tensorpack's regularize_cost) one of `regexes`; throws for an invalid one.
WeightDecayFilter decay_if_name_matches(const std::vector<std::string>& regexes);
/// Decays every variable except those whose name matches one of `regexes`
/// (e.g. {"/b$", "LayerNorm", "wte"}).
WeightDecayFilter decay_unless_name_matches(const std::vector<std::string>& regexes);

/// AdamW with decoupled weight decay, exactly torch.optim.AdamW (chosen over
/// TF-Addons' DecoupledWeightDecay, whose decay is not scaled by lr):
/// var = var * (1 - lr * weight_decay) - lr / (1 - beta1^t) * m /
/// (sqrt(v) / sqrt(1 - beta2^t) + epsilon), with m and v updated as in Adam.
/// Note epsilon is added to the bias-corrected sqrt(v) (PyTorch), unlike
/// AdamOptimizer's TF1 placement. Same slots and beta powers as Adam.
class AdamWOptimizer : public AdamOptimizer {
 public:
  explicit AdamWOptimizer(double lr = 0.001, double weight_decay = 0.01, double beta1 = 0.9,
                          double beta2 = 0.999, double epsilon = 1e-8,
                          const std::string& name = "AdamW");
  AdamWOptimizer(const Output& lr, double weight_decay = 0.01, double beta1 = 0.9,
                 double beta2 = 0.999, double epsilon = 1e-8, const std::string& name = "AdamW");

  /// Parameter groups: the variables `filter` accepts are decayed by
  /// weight_decay, the others not at all (default decay_all()). One optimizer
  /// keeps one set of slots and beta powers for both groups, as torch does;
  /// the fused update is one op per group. Takes effect on the next
  /// apply_gradients. Throws for a null filter.
  void set_weight_decay_filter(WeightDecayFilter filter);
  /// The weight decay applied to `var`: weight_decay or 0 per the filter.
  double weight_decay_for(const Output& var) const;
  double weight_decay() const { return weight_decay_; }

 protected:
  Node* apply_dense(const Output& grad, const Output& var) override;
  Node* apply_fused(const std::vector<Output>& grads, const std::vector<Output>& vars) override;

 private:
  double weight_decay_;
  WeightDecayFilter decay_filter_;
};

/// sqrt(sum of squares of every element of the valid `tensors`) (tf.global_norm);
/// computed in f64 when any tensor is f64, else f32. Throws when none is valid
/// or one is not floating.
Output global_norm(const std::vector<Output>& tensors, const std::string& name = "global_norm");

/// How a global-norm clip scales the tensors, with n the global norm and c
/// the clip norm.
enum class ClipNormSemantics {
  /// tf.clip_by_global_norm: scale c / max(n, c) (exactly 1 when n <= c).
  kTensorFlow,
  /// torch.nn.utils.clip_grad_norm_: scale min(c / (n + 1e-6), 1), so
  /// also a tiny scaling when n is within 1e-6 below c, and c / (n + 1e-6)
  /// above it. The scale is computed in the norm's dtype.
  kTorch,
};

/// tf.clip_by_global_norm (or torch's clip_grad_norm_ per `semantics`): each t
/// becomes t * scale (invalid entries stay invalid). Returns the clipped
/// tensors and the global norm. clip_norm must be > 0.
std::pair<std::vector<Output>, Output> clip_by_global_norm(
    const std::vector<Output>& tensors, double clip_norm,
    const std::string& name = "clip_by_global_norm",
    ClipNormSemantics semantics = ClipNormSemantics::kTensorFlow);

/// A gradient processor (tensorpack's GradientProcessor): maps grads_and_vars
/// to new grads_and_vars by building graph ops.
using GradientProcessor = std::function<GradsAndVars(const GradsAndVars&)>;

/// Clips all gradients together by their global norm (tensorpack's
/// GlobalNormClip; ClipNormSemantics::kTorch gives PyTorch's clip_grad_norm_,
/// as nanoGPT uses).
GradientProcessor GlobalNormClip(double global_norm,
                                 ClipNormSemantics semantics = ClipNormSemantics::kTensorFlow);
/// Replaces each gradient g of variable v by fn(g, v) (tensorpack's MapGradient).
GradientProcessor MapGradient(std::function<Output(const Output& grad, const Output& var)> fn);

/// An optimizer that runs `processors` (in order) on the gradients before
/// `opt` applies them (tensorpack's optimizer.apply_grad_processors). Shares
/// opt's learning rate and slots.
std::shared_ptr<Optimizer> apply_grad_processors(std::shared_ptr<Optimizer> opt,
                                                 std::vector<GradientProcessor> processors);

/// Averages (or sums, with average = false) the gradients of each variable
/// over towers (tensorpack's average_grads): every tower's list must hold
/// the same variables in the same order. One tower is returned unchanged.
GradsAndVars average_grads(const std::vector<GradsAndVars>& tower_grads, bool average = true);

}  // namespace spire

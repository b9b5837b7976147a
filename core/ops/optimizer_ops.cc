// Registrations and builders of the fused optimizer updates (see optimizer_ops.h).
#include "core/ops/optimizer_ops.h"

#include <set>

#include "core/ops/op_util.h"

namespace spire::ops {

namespace {

// Shape function of a fused update with `num_slots` slots per variable and
// `num_scalars` scalar inputs: checks the layout, one float dtype for all
// inputs, slots shaped like their variable, gradients compatible with it.
void fused_apply_shape(InferContext& c, int num_slots, int num_scalars) {
  const int64_t n = c.attr<int64_t>("n");
  if (c.attr<bool>("gated")) ++num_scalars;  // the trailing `apply` scalar
  if (n < 1) c.fail("attribute n (the number of variables) must be >= 1, got ", n);
  const int64_t want = (2 + num_slots) * n + num_scalars;
  if (c.num_inputs() != want)
    c.fail("expected ", want, " inputs for n = ", n, " variables (vars, grads, ", num_slots,
           " slot list(s), ", num_scalars, " scalar(s)", c.attr<bool>("gated") ? ", gated" : "",
           "), got ", c.num_inputs());
  c.expect_dtype(0, {DType::F32, DType::F64});
  const DType dt = c.input_dtype(0);
  const int ni = static_cast<int>(n);
  for (int i = 0; i < ni; ++i) {
    const Shape& vs = c.input_shape(i);
    if (!vs.is_fully_defined())
      c.fail("variable ", i, " (input ", i, ") has no fully defined shape: ", vs.to_string());
    for (int k = 1; k < 2 + num_slots; ++k) {
      const int in = k * ni + i;
      const char* what = k == 1 ? "gradient" : "slot";
      if (c.input_dtype(in) != dt)
        c.fail("the ", what, " of variable ", i, " (input ", in, ") is ",
               dtype_name(c.input_dtype(in)), ", the variable ", dtype_name(dt),
               " (all inputs of a fused update share one dtype)");
      const Shape& s = c.input_shape(in);
      bool ok = s.rank() == vs.rank();
      for (int d = 0; ok && d < s.rank(); ++d) ok = s[d] == vs[d] || (k == 1 && s[d] < 0);
      if (!ok)
        c.fail("the ", what, " of variable ", i, " (input ", in, ") has shape ", s.to_string(),
               ", the variable ", vs.to_string());
    }
  }
  for (int k = 0; k < num_scalars; ++k) {
    const int in = (2 + num_slots) * ni + k;
    if (c.input_dtype(in) != dt || c.input_shape(in).rank() != 0)
      c.fail("scalar input ", in, " must be a ", dtype_name(dt), " scalar, got ",
             dtype_name(c.input_dtype(in)), c.input_shape(in).to_string());
  }
}

std::string describe(const Output& o) {
  if (!o.valid()) return "<invalid>";
  return str_cat("'", o.name(), "' (", dtype_name(o.dtype()), o.shape().to_string(), ")");
}

// Checks the arguments of a builder with messages naming the variables, then
// adds the node with inputs [vars, grads, slot lists..., scalars].
Node* fused_apply(const char* op, const std::vector<Output>& vars,
                  const std::vector<Output>& grads,
                  const std::vector<std::pair<const char*, const std::vector<Output>*>>& slots,
                  std::vector<Output> scalars, AttrMap attrs, const std::string& name,
                  const Output& apply_if) {
  SPIRE_CHECK(!vars.empty(), op, ": no variables given");
  const size_t n = vars.size();
  SPIRE_CHECK(grads.size() == n, op, ": ", n, " variables but ", grads.size(), " gradients");
  auto check_var = [&](const Output& v, const char* what) {
    SPIRE_CHECK(v.valid() && v.node->op_def().is_variable(), op, ": the ", what,
                " must be a variable, got ",
                v.valid() ? v.node->describe() : std::string("<invalid>"));
  };
  const Output& v0 = vars[0];
  check_var(v0, "first argument");
  SPIRE_CHECK(v0.dtype() == DType::F32 || v0.dtype() == DType::F64, op, ": variable ",
              describe(v0), " is not f32 or f64");
  std::set<const Node*> seen;
  for (size_t i = 0; i < n; ++i) {
    const Output& v = vars[i];
    check_var(v, "variable list entry");
    SPIRE_CHECK(v.graph() == v0.graph(), op, ": variable '", v.node->name(),
                "' is in another graph than '", v0.node->name(), "'");
    SPIRE_CHECK(seen.insert(v.node).second, op, ": variable '", v.node->name(),
                "' is listed twice");
    SPIRE_CHECK(v.dtype() == v0.dtype(), op, ": variable ", describe(v), " and variable ",
                describe(v0), " differ in dtype; one fused update takes one dtype");
    SPIRE_CHECK(v.node->device() == v0.node->device(), op, ": variable '", v.node->name(),
                "' is on ", v.node->device().to_string(), ", variable '", v0.node->name(),
                "' on ", v0.node->device().to_string(), "; one fused update takes one device");
    const Output& g = grads[i];
    SPIRE_CHECK(g.valid(), op, ": the gradient of variable '", v.node->name(), "' is invalid");
    bool fits = g.dtype() == v.dtype() && g.shape().rank() == v.shape().rank();
    for (int d = 0; fits && d < g.shape().rank(); ++d)
      fits = g.shape()[d] < 0 || g.shape()[d] == v.shape()[d];
    SPIRE_CHECK(fits, op, ": the gradient ", describe(g), " of variable ", describe(v),
                " does not match it");
  }
  std::vector<Output> inputs = vars;
  inputs.insert(inputs.end(), grads.begin(), grads.end());
  for (const auto& [slot_name, list] : slots) {
    SPIRE_CHECK(list->size() == n, op, ": ", n, " variables but ", list->size(), " ", slot_name,
                " slots");
    for (size_t i = 0; i < n; ++i) {
      const Output& s = (*list)[i];
      check_var(s, slot_name);
      SPIRE_CHECK(s.dtype() == vars[i].dtype() && s.shape() == vars[i].shape(), op, ": the ",
                  slot_name, " slot ", describe(s), " of variable ", describe(vars[i]),
                  " does not match it");
      SPIRE_CHECK(s.node->device() == v0.node->device(), op, ": the ", slot_name, " slot '",
                  s.node->name(), "' is on ", s.node->device().to_string(), ", variable '",
                  v0.node->name(), "' on ", v0.node->device().to_string(),
                  "; one fused update takes one device");
      SPIRE_CHECK(seen.insert(s.node).second, op, ": variable '", s.node->name(),
                  "' is passed twice");
    }
    inputs.insert(inputs.end(), list->begin(), list->end());
  }
  if (apply_if.valid()) {
    SPIRE_CHECK(apply_if.graph() == v0.graph(), op, ": the apply_if scalar ", describe(apply_if),
                " is in another graph than variable '", v0.node->name(), "'");
    scalars.push_back(apply_if);
  }
  attrs["gated"] = apply_if.valid();
  for (const Output& s : scalars) {
    SPIRE_CHECK(s.valid() && s.dtype() == v0.dtype() && s.shape().rank() == 0, op,
                ": the scalars must be ", dtype_name(v0.dtype()),
                " scalars like the variables, got ", describe(s));
    inputs.push_back(s);
  }
  attrs["n"] = static_cast<int64_t>(n);
  return add_op(op, inputs, attrs, name);
}

}  // namespace

SPIRE_REGISTER_OP("FusedApplyGradientDescent")
    .variadic_input("args", 3)
    .required_attr("n")
    .attr("gated", false)
    .shape_fn([](InferContext& c) { fused_apply_shape(c, 0, 1); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("args = [vars(n), grads(n), lr]: var -= lr * grad for each variable. No outputs. "
         "Gated (attr gated): a last scalar apply_if; where it is 0 nothing changes.");

SPIRE_REGISTER_OP("FusedApplyMomentum")
    .variadic_input("args", 4)
    .required_attr("n")
    .attr("gated", false)
    .required_attr("momentum")
    .attr("use_nesterov", false)
    .shape_fn([](InferContext& c) { fused_apply_shape(c, 1, 1); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("args = [vars(n), grads(n), accums(n), lr]: accum = accum * momentum + grad; "
         "var -= lr * accum (Nesterov: lr * (grad + accum * momentum)). No outputs. "
         "Gated (attr gated): a last scalar apply_if; where it is 0 nothing changes.");

SPIRE_REGISTER_OP("FusedApplyAdam")
    .variadic_input("args", 7)
    .required_attr("n")
    .attr("gated", false)
    .required_attr("beta1")
    .required_attr("beta2")
    .required_attr("epsilon")
    .shape_fn([](InferContext& c) { fused_apply_shape(c, 2, 3); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("args = [vars(n), grads(n), m(n), v(n), lr, beta1_power, beta2_power]: TF1 Adam "
         "update of every variable and its slots. No outputs. "
         "Gated (attr gated): a last scalar apply_if; where it is 0 nothing changes.");

SPIRE_REGISTER_OP("FusedApplyAdamW")
    .variadic_input("args", 7)
    .required_attr("n")
    .attr("gated", false)
    .required_attr("beta1")
    .required_attr("beta2")
    .required_attr("epsilon")
    .required_attr("weight_decay")
    .shape_fn([](InferContext& c) { fused_apply_shape(c, 2, 3); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("args = [vars(n), grads(n), m(n), v(n), lr, beta1_power, beta2_power]: AdamW "
         "(torch.optim.AdamW) update of every variable and its slots. No outputs. "
         "Gated (attr gated): a last scalar apply_if; where it is 0 nothing changes.");

Node* fused_apply_gradient_descent(const std::vector<Output>& vars,
                                   const std::vector<Output>& grads, const Output& lr,
                                   const std::string& name, const Output& apply_if) {
  return fused_apply("FusedApplyGradientDescent", vars, grads, {}, {lr}, {}, name, apply_if);
}

Node* fused_apply_momentum(const std::vector<Output>& vars, const std::vector<Output>& grads,
                           const std::vector<Output>& accums, const Output& lr, double momentum,
                           bool use_nesterov, const std::string& name, const Output& apply_if) {
  return fused_apply("FusedApplyMomentum", vars, grads, {{"accumulator", &accums}}, {lr},
                     {{"momentum", momentum}, {"use_nesterov", use_nesterov}}, name, apply_if);
}

Node* fused_apply_adam(const std::vector<Output>& vars, const std::vector<Output>& grads,
                       const std::vector<Output>& m, const std::vector<Output>& v,
                       const Output& lr, const Output& beta1_power, const Output& beta2_power,
                       double beta1, double beta2, double epsilon, const std::string& name,
                       const Output& apply_if) {
  return fused_apply("FusedApplyAdam", vars, grads, {{"m", &m}, {"v", &v}},
                     {lr, beta1_power, beta2_power},
                     {{"beta1", beta1}, {"beta2", beta2}, {"epsilon", epsilon}}, name, apply_if);
}

Node* fused_apply_adamw(const std::vector<Output>& vars, const std::vector<Output>& grads,
                        const std::vector<Output>& m, const std::vector<Output>& v,
                        const Output& lr, const Output& beta1_power, const Output& beta2_power,
                        double beta1, double beta2, double epsilon, double weight_decay,
                        const std::string& name, const Output& apply_if) {
  return fused_apply("FusedApplyAdamW", vars, grads, {{"m", &m}, {"v", &v}},
                     {lr, beta1_power, beta2_power},
                     {{"beta1", beta1},
                      {"beta2", beta2},
                      {"epsilon", epsilon},
                      {"weight_decay", weight_decay}},
                     name, apply_if);
}

}  // namespace spire::ops

#include "core/op_registry.h"

#include <algorithm>
#include <sstream>

namespace spire {

// ---- InferContext ----------------------------------------------------------

InferContext::InferContext(const OpDef& op, const std::string& node_name,
                           std::vector<DType> in_dtypes, std::vector<Shape> in_shapes,
                           const AttrMap& attrs, std::vector<std::string> in_names)
    : op_(op), node_name_(node_name), in_dtypes_(std::move(in_dtypes)),
      in_shapes_(std::move(in_shapes)), attrs_(attrs), in_names_(std::move(in_names)) {}

void InferContext::set_output(int i, DType dtype, const Shape& shape) {
  auto n = static_cast<size_t>(i) + 1;
  if (out_dtypes_.size() < n) {
    out_dtypes_.resize(n, DType::Invalid);
    out_shapes_.resize(n);
  }
  out_dtypes_[static_cast<size_t>(i)] = dtype;
  out_shapes_[static_cast<size_t>(i)] = shape;
}

std::string InferContext::where() const {
  return str_cat("op ", op_.name(), " node '", node_name_, "'");
}

std::string InferContext::input_name(int i) const {
  return static_cast<size_t>(i) < in_names_.size() ? in_names_[static_cast<size_t>(i)] : std::string();
}

std::string InferContext::input_label(int i) const {
  const std::string name = input_name(i);
  return name.empty() ? str_cat("input ", i) : str_cat("input ", i, " ('", name, "')");
}

std::string InferContext::describe_inputs() const {
  std::ostringstream os;
  for (int i = 0; i < num_inputs(); ++i) {
    if (i) os << ", ";
    os << op_.input_arg_name(i);
    const std::string name = input_name(i);
    if (!name.empty()) os << " '" << name << "'";
    os << ": " << dtype_name(input_dtype(i)) << input_shape(i).to_string();
  }
  if (num_inputs() == 0) os << "(none)";
  return os.str();
}

void InferContext::expect_dtype(int i, std::initializer_list<DType> allowed) const {
  DType dt = input_dtype(i);
  if (std::find(allowed.begin(), allowed.end(), dt) != allowed.end()) return;
  std::ostringstream os;
  for (const DType& a : allowed) os << (&a == allowed.begin() ? "" : ", ") << dtype_name(a);
  fail(input_label(i), " has dtype ", dtype_name(dt), ", expected one of {", os.str(), "}");
}

void InferContext::expect_same_dtype(int i, int j) const {
  if (input_dtype(i) != input_dtype(j))
    fail(input_label(i), " and ", input_label(j), " must have the same dtype, got ",
         dtype_name(input_dtype(i)), " and ", dtype_name(input_dtype(j)));
}

void InferContext::expect_rank(int i, int r) const {
  if (input_shape(i).rank() != r)
    fail(input_label(i), " must have rank ", r, ", got shape ", input_shape(i).to_string());
}

// ---- GradContext -----------------------------------------------------------

Output GradContext::grad(int i) const {
  const Output& g = grads_.at(static_cast<size_t>(i));
  SPIRE_INTERNAL_CHECK(g.valid());  // autodiff fills missing grads with zeros
  return g;
}

// ---- OpDef / builder -------------------------------------------------------

std::string OpDef::input_arg_name(int i) const {
  if (input_names_.empty()) return str_cat("input ", i);
  const size_t last = input_names_.size() - 1;
  const auto k = static_cast<size_t>(i);
  if (variadic_ && k >= last) return str_cat(input_names_[last], "[", k - last, "]");
  return k < input_names_.size() ? input_names_[k] : input_names_[last];
}

bool OpDef::allows_undefined_input(int i) const {
  return std::find(undefined_ok_.begin(), undefined_ok_.end(), i) != undefined_ok_.end();
}

OpDefBuilder::OpDefBuilder(const std::string& name) : def_(new OpDef()) { def_->name_ = name; }
OpDefBuilder& OpDefBuilder::input(const std::string& name) {
  def_->input_names_.push_back(name);
  return *this;
}
OpDefBuilder& OpDefBuilder::variadic_input(const std::string& name, int min) {
  def_->input_names_.push_back(name);
  def_->variadic_ = true;
  def_->min_variadic_ = min;
  return *this;
}
OpDefBuilder& OpDefBuilder::attr(const std::string& name, AttrValue default_value) {
  def_->attr_defaults_[name] = std::move(default_value);
  return *this;
}
OpDefBuilder& OpDefBuilder::required_attr(const std::string& name) {
  def_->required_attrs_.push_back(name);
  return *this;
}
OpDefBuilder& OpDefBuilder::shape_fn(ShapeFn fn) {
  def_->shape_fn_ = std::move(fn);
  return *this;
}
OpDefBuilder& OpDefBuilder::grad(GradFn fn) {
  def_->grad_fn_ = std::move(fn);
  return *this;
}
OpDefBuilder& OpDefBuilder::no_gradient() {
  def_->no_gradient_ = true;
  return *this;
}
OpDefBuilder& OpDefBuilder::stateful() {
  def_->stateful_ = true;
  return *this;
}
OpDefBuilder& OpDefBuilder::ref_output() {
  def_->ref_output_ = true;
  return *this;
}
OpDefBuilder& OpDefBuilder::allow_undefined_input(int i) {
  def_->undefined_ok_.push_back(i);
  return *this;
}
OpDefBuilder& OpDefBuilder::kernel_dtype_from_input(int i) {
  def_->kernel_dtype_rule_ = {KernelDTypeRule::kInput, i, ""};
  return *this;
}
OpDefBuilder& OpDefBuilder::kernel_dtype_from_attr(const std::string& attr) {
  def_->kernel_dtype_rule_ = {KernelDTypeRule::kAttr, 0, attr};
  return *this;
}
OpDefBuilder& OpDefBuilder::kernel_dtype_from_output(int i) {
  def_->kernel_dtype_rule_ = {KernelDTypeRule::kOutput, i, ""};
  return *this;
}
OpDefBuilder& OpDefBuilder::cpu_only() {
  def_->cpu_only_ = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::colocate_with_input(int i) {
  def_->colocate_input_ = i;
  return *this;
}

OpDefBuilder& OpDefBuilder::is_variable() {
  def_->is_variable_ = true;
  def_->stateful_ = true;
  def_->ref_output_ = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::is_placeholder() {
  def_->is_placeholder_ = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::is_copy() {
  def_->is_copy_ = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::forwards_input() {
  def_->forwards_input_ = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::multi_device() {
  def_->multi_device_ = true;
  def_->attr_defaults_["devices"] = AttrValue(std::vector<std::string>{});
  return *this;
}

OpDefBuilder& OpDefBuilder::rendezvous_attr(const std::string& attr) {
  def_->rendezvous_attr_ = attr;
  return *this;
}

OpDefBuilder& OpDefBuilder::cost(CostFn fn) {
  def_->cost_fn_ = std::move(fn);
  return *this;
}

double OpDef::cost(const Node& n) const { return cost_fn_ ? cost_fn_(n) : io_elements(n); }

double io_elements(const Node& n) {
  double elements = 0;
  auto add = [&](const Shape& s) {
    if (!s.is_fully_defined()) return false;
    elements += static_cast<double>(s.num_elements());
    return true;
  };
  for (const Output& in : n.inputs())
    if (!add(in.shape())) return -1;
  for (int o = 0; o < n.num_outputs(); ++o)
    if (!add(n.output_shape(o))) return -1;
  return elements;
}

OpDefBuilder& OpDefBuilder::own_lane_attr(const std::string& attr) {
  def_->own_lane_attr_ = attr;
  return *this;
}

OpDefBuilder& OpDefBuilder::doc(const std::string& text) {
  def_->doc_ = text;
  return *this;
}

// ---- OpRegistry ------------------------------------------------------------

OpRegistry& OpRegistry::global() {
  static OpRegistry r;
  return r;
}

void OpRegistry::add(std::unique_ptr<OpDef> def) {
  SPIRE_CHECK(def, "OpRegistry::add: null definition");
  SPIRE_CHECK(def->shape_fn(), "op '", def->name(), "' is registered without a shape function");
  SPIRE_CHECK(!(def->grad_fn() && def->no_gradient()), "op '", def->name(),
              "' has both a gradient function and no_gradient()");
  std::string name = def->name();
  SPIRE_CHECK(!ops_.count(name), "op '", name, "' is registered twice");
  ops_[name] = std::move(def);
}

const OpDef* OpRegistry::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& OpRegistry::get(const std::string& name) const {
  const OpDef* d = find(name);
  if (!d) throw_error("unknown op '", name, "'");
  return *d;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& kv : ops_) names.push_back(kv.first);
  return names;
}

}  // namespace spire

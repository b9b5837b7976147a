// The op registry. One registration (SPIRE_REGISTER_OP) ties an op's name,
// its inputs, outputs and attrs (with defaults), its shape and dtype
// inference, and its gradient function. Kernels are registered separately,
// per (op, device, dtype), in kernel_registry.h.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/attr.h"
#include "core/graph.h"

namespace spire {

/// What a shape function sees: the input dtypes/shapes and attrs of a node
/// being added; it sets the output dtypes and shapes.
class InferContext {
 public:
  /// `in_names`: the input tensors' names ("node:0"), for errors.
  InferContext(const OpDef& op, const std::string& node_name, std::vector<DType> in_dtypes,
               std::vector<Shape> in_shapes, const AttrMap& attrs,
               std::vector<std::string> in_names = {});

  int num_inputs() const { return static_cast<int>(in_dtypes_.size()); }
  DType input_dtype(int i) const { return in_dtypes_.at(static_cast<size_t>(i)); }
  const Shape& input_shape(int i) const { return in_shapes_.at(static_cast<size_t>(i)); }
  /// The name of the tensor fed to input i ("tower1/grad:0"; "" when unknown).
  std::string input_name(int i) const;
  /// "input 1 ('tower1/grad:0')", for errors.
  std::string input_label(int i) const;
  bool has_attr(const std::string& key) const { return attrs_.count(key) != 0; }
  template <typename T>
  T attr(const std::string& key) const {
    auto it = attrs_.find(key);
    if (it == attrs_.end()) fail("missing attribute '", key, "'");
    return it->second.get<T>(where() + " attribute '" + key + "'");
  }
  const AttrMap& attrs() const { return attrs_; }

  /// Sets output i (outputs are appended as needed).
  void set_output(int i, DType dtype, const Shape& shape);
  const std::vector<DType>& output_dtypes() const { return out_dtypes_; }
  const std::vector<Shape>& output_shapes() const { return out_shapes_; }

  /// Throws spire::Error: "<op> node '<name>': <message>; inputs: a 'x:0': f32[2], ...".
  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error(where(), ": ", std::forward<Args>(args)..., "; inputs: ", describe_inputs());
  }
  /// Fails unless input i has one of the given dtypes.
  void expect_dtype(int i, std::initializer_list<DType> allowed) const;
  /// Fails unless inputs i and j have the same dtype.
  void expect_same_dtype(int i, int j) const;
  /// Fails unless input i has rank r.
  void expect_rank(int i, int r) const;
  /// "op Add node 'a/add'".
  std::string where() const;
  /// "a 'x:0': f32[2], b 'y:0': f32[2]"; a variadic input's tensors are
  /// numbered: "x[0] 'g0:0': f32[2], x[1] 'g1:0': f32[2]".
  std::string describe_inputs() const;

 private:
  const OpDef& op_;
  const std::string& node_name_;
  std::vector<DType> in_dtypes_;
  std::vector<Shape> in_shapes_;
  const AttrMap& attrs_;
  std::vector<std::string> in_names_;
  std::vector<DType> out_dtypes_;
  std::vector<Shape> out_shapes_;
};

/// What a gradient function sees: the forward node and the gradients of its
/// outputs. It returns one gradient per input (an invalid Output = none).
class GradContext {
 public:
  /// `received[i]`: whether output i got a gradient from its consumers
  /// (grad_outputs[i] is then that gradient, else zeros or invalid); empty
  /// means "every valid grad_outputs[i]".
  GradContext(Node* node, std::vector<Output> grad_outputs, std::vector<bool> received = {})
      : node_(node), grads_(std::move(grad_outputs)), received_(std::move(received)) {}
  Node* node() const { return node_; }
  Graph& graph() const { return *node_->graph(); }
  Output input(int i) const { return node_->input(i); }
  Output output(int i = 0) const { return node_->output(i); }
  /// Gradient w.r.t. output i; zeros shaped like the output when that output
  /// received none (only when at least one output did).
  Output grad(int i = 0) const;
  /// Whether output i received a gradient from its consumers (false when
  /// grad(i) is only the zeros filled in for it).
  bool has_grad(int i) const {
    const size_t k = static_cast<size_t>(i);
    return received_.empty() ? grads_.at(k).valid() : received_.at(k);
  }
  template <typename T>
  T attr(const std::string& key) const {
    return node_->attr<T>(key);
  }

 private:
  Node* node_;
  std::vector<Output> grads_;
  std::vector<bool> received_;
};

using ShapeFn = std::function<void(InferContext&)>;
using GradFn = std::function<std::vector<Output>(GradContext&)>;
/// A node's estimated work in element-equivalents (one element read or written; a GEMM's or a
/// convolution's multiply-add counts 1/32 of one), or a negative value when its static shapes
/// do not tell (see OpDef::cost).
using CostFn = std::function<double(const Node&)>;

/// How a node's kernel dtype (the dtype part of the kernel key) is chosen.
struct KernelDTypeRule {
  enum Kind { kFirstInput, kInput, kAttr, kOutput } kind = kFirstInput;
  int index = 0;
  std::string attr;
};

class OpDef {
 public:
  const std::string& name() const { return name_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  /// The name of the argument input i is given to: input_names()[i], or
  /// "x[k]" for the k-th tensor of a variadic (last) input "x".
  std::string input_arg_name(int i) const;
  /// When true, the last named input repeats any number (>= min) of times.
  bool variadic() const { return variadic_; }
  int min_variadic() const { return min_variadic_; }
  const AttrMap& attr_defaults() const { return attr_defaults_; }
  const std::vector<std::string>& required_attrs() const { return required_attrs_; }
  const ShapeFn& shape_fn() const { return shape_fn_; }
  /// Null when the op has no gradient function.
  const GradFn& grad_fn() const { return grad_fn_; }
  /// True when the op explicitly propagates no gradient (StopGradient,
  /// comparisons, argmax, random ops, ...): autodiff treats its inputs as
  /// constants instead of failing.
  bool no_gradient() const { return no_gradient_; }
  /// Differentiable ops (with a gradient function) must have a gradient-check case.
  bool differentiable() const { return static_cast<bool>(grad_fn_); }
  /// Stateful ops (variables, assign, random) are never deduplicated or
  /// constant-folded, and may keep state in a Session.
  bool stateful() const { return stateful_; }
  /// Input indices whose tensor may be undefined (an uninitialized variable
  /// passed to Assign).
  bool allows_undefined_input(int i) const;
  /// True for ops whose output refers to state (Variable): each consumer
  /// reads the current value when it runs (TF1 reference semantics), so
  /// control dependencies order reads after assignments.
  bool ref_output() const { return ref_output_; }
  const KernelDTypeRule& kernel_dtype_rule() const { return kernel_dtype_rule_; }
  const std::string& doc() const { return doc_; }
  /// Explicitly CPU-only: a node of this op requested on an accelerator is
  /// placed on cpu:0 (the only fallback the placer makes; a request for
  /// another CPU device is kept).
  bool cpu_only() const { return cpu_only_; }
  /// Index of the input whose producer's device this op's nodes take (ops
  /// that write a variable run where the variable lives), or -1.
  int colocate_input() const { return colocate_input_; }
  /// The op is a variable: its value lives in the Session as a
  /// VariableResource (read by reference, written by the update ops).
  bool is_variable() const { return is_variable_; }
  /// The op is a placeholder: a run must feed it.
  bool is_placeholder() const { return is_placeholder_; }
  /// The op copies its input to its own device (the graph inserts it
  /// between devices; the executor hands it its input where it lives).
  bool is_copy() const { return is_copy_; }
  /// The op's output is its only input, unchanged (Identity): its kernels hand the input's
  /// buffer on, so the fusion pass forms no group of such nodes alone (core/fusion.h).
  bool forwards_input() const { return forwards_input_; }
  /// The op spans several devices (collectives): participant i reads
  /// input i and writes output i on the device listed i-th in the node's
  /// "devices" attr (by default its inputs' devices). The executor runs one
  /// step per participant, each on its device's lane; the graph never puts
  /// such a node on a single device.
  bool multi_device() const { return multi_device_; }
  /// The attr whose non-empty value names a rendezvous ("" when the op has
  /// none): nodes with the same value meet while they run (collectives
  /// built one per tower). The executor runs every member in any run that
  /// needs one and orders them as one node: everything any member depends
  /// on runs before all of them, so no lane waits on a member's partner.
  const std::string& rendezvous_attr() const { return rendezvous_attr_; }
  /// The bool attr that, when true on a node, runs the node on a lane of its
  /// own on its (CPU) device, apart from the device's other steps ("" when
  /// the op has none): a wait inside it (a collective waiting for other
  /// processes) then does not hold up the device's compute, which overlaps
  /// it. Results are the same; only the threads differ.
  const std::string& own_lane_attr() const { return own_lane_attr_; }
  /// The estimated work of `n` (a node of this op): the op's CostFn when it registered one
  /// (GEMMs, convolutions, attention), otherwise the elements of its inputs and outputs;
  /// negative when a shape it needs is not fully known. Inter-op parallelism pairs nodes
  /// of similar work (SessionOptions::inter_op).
  double cost(const Node& n) const;

 private:
  CostFn cost_fn_;
  std::string rendezvous_attr_;
  std::string own_lane_attr_;
  friend class OpDefBuilder;
  std::string name_;
  std::vector<std::string> input_names_;
  bool variadic_ = false;
  int min_variadic_ = 1;
  AttrMap attr_defaults_;
  std::vector<std::string> required_attrs_;
  ShapeFn shape_fn_;
  GradFn grad_fn_;
  bool no_gradient_ = false;
  bool stateful_ = false;
  bool ref_output_ = false;
  std::vector<int> undefined_ok_;
  KernelDTypeRule kernel_dtype_rule_;
  std::string doc_;
  bool cpu_only_ = false;
  int colocate_input_ = -1;
  bool is_variable_ = false;
  bool is_placeholder_ = false;
  bool is_copy_ = false;
  bool forwards_input_ = false;
  bool multi_device_ = false;
};

/// The elements of a node's inputs and outputs (the default OpDef::cost); -1 when a shape
/// is not fully known.
double io_elements(const Node& n);
/// What a multiply-add of a GEMM or convolution counts in OpDef::cost.
constexpr double kMultiplyAddCost = 1.0 / 32;

/// Fluent builder used by SPIRE_REGISTER_OP.
class OpDefBuilder {
 public:
  explicit OpDefBuilder(const std::string& name);
  OpDefBuilder& input(const std::string& name);
  /// The last input is variadic (at least `min` tensors).
  OpDefBuilder& variadic_input(const std::string& name, int min = 1);
  OpDefBuilder& attr(const std::string& name, AttrValue default_value);
  OpDefBuilder& required_attr(const std::string& name);
  OpDefBuilder& shape_fn(ShapeFn fn);
  OpDefBuilder& grad(GradFn fn);
  OpDefBuilder& no_gradient();
  OpDefBuilder& stateful();
  OpDefBuilder& ref_output();
  OpDefBuilder& allow_undefined_input(int i);
  OpDefBuilder& kernel_dtype_from_input(int i);
  OpDefBuilder& kernel_dtype_from_attr(const std::string& attr);
  OpDefBuilder& kernel_dtype_from_output(int i);
  OpDefBuilder& doc(const std::string& text);
  OpDefBuilder& cpu_only();
  OpDefBuilder& colocate_with_input(int i);
  /// Marks a variable op (implies stateful() and ref_output()).
  OpDefBuilder& is_variable();
  OpDefBuilder& is_placeholder();
  OpDefBuilder& is_copy();
  OpDefBuilder& forwards_input();
  /// Marks a multi-device op (see OpDef::multi_device); adds the
  /// "devices" attr (a list of device names, default: the inputs' devices).
  OpDefBuilder& multi_device();
  /// Names the rendezvous attr (see OpDef::rendezvous_attr); it must be a
  /// string attr declared on the op.
  OpDefBuilder& rendezvous_attr(const std::string& attr);
  /// Names the own-lane attr (see OpDef::own_lane_attr); it must be a bool
  /// attr declared on the op.
  OpDefBuilder& own_lane_attr(const std::string& attr);
  /// Sets the op's work estimate (see OpDef::cost).
  OpDefBuilder& cost(CostFn fn);
  std::unique_ptr<OpDef> build() { return std::move(def_); }

 private:
  std::unique_ptr<OpDef> def_;
};

/// Process-wide table of op definitions, filled at load time.
class OpRegistry {
 public:
  static OpRegistry& global();
  /// Throws when the name is already registered.
  void add(std::unique_ptr<OpDef> def);
  /// Null when unknown.
  const OpDef* find(const std::string& name) const;
  /// Throws spire::Error "unknown op 'X'" when unknown.
  const OpDef& get(const std::string& name) const;
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, std::unique_ptr<OpDef>> ops_;
};

struct OpRegistrar {
  OpRegistrar(OpDefBuilder& b) { OpRegistry::global().add(b.build()); }
  OpRegistrar(OpDefBuilder&& b) { OpRegistry::global().add(b.build()); }
};

/// Registers an op at load time: SPIRE_REGISTER_OP("Add").input("x")...;
#define SPIRE_REGISTER_OP(name)                                              \
  static ::spire::OpRegistrar SPIRE_CONCAT(spire_op_registrar_, __COUNTER__) \
      [[maybe_unused]] = ::spire::OpDefBuilder(name)

}  // namespace spire

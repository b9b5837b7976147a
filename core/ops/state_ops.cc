// Registrations of sources, state and control ops (see state_ops.h).
#include "core/ops/state_ops.h"

#include "core/ops/op_util.h"

namespace spire::ops {

namespace {
Graph& graph_or_default(Graph* g) { return g ? *g : default_graph(); }

void variable_input_check(InferContext& c, const char* what) {
  // Input 0 must be a Variable's output; checked by the builders below too.
  c.expect_same_dtype(0, 1);
  if (std::string(what) == "Assign") {
    const Shape& v = c.input_shape(0);
    const Shape& x = c.input_shape(1);
    bool ok = v.rank() == x.rank();
    for (int i = 0; ok && i < v.rank(); ++i) ok = x[i] < 0 || x[i] == v[i];
    if (!ok)
      c.fail("cannot assign a value of shape ", x.to_string(), " to a variable of shape ",
             v.to_string());
  } else {
    Shape b;
    if (!broadcast_shapes(c.input_shape(0), c.input_shape(1), &b) || b != c.input_shape(0))
      c.fail("cannot update a variable of shape ", c.input_shape(0).to_string(),
             " with a value of shape ", c.input_shape(1).to_string());
  }
  c.set_output(0, c.input_dtype(0), c.input_shape(0));
}

Output state_update(const char* op, const Output& var, const Output& value,
                    const std::string& name) {
  SPIRE_CHECK(var.valid() && var.node->op_def().is_variable(), op, ": the first argument must be ",
              "a variable, got ", var.valid() ? var.node->describe() : std::string("<invalid>"));
  return add_op(op, {var, value}, {}, name)->output(0);
}
}  // namespace

SPIRE_REGISTER_OP("Placeholder")
    .is_placeholder()
    .required_attr("dtype")
    .required_attr("shape")
    .shape_fn([](InferContext& c) { c.set_output(0, c.attr<DType>("dtype"), c.attr<Shape>("shape")); })
    .no_gradient()
    .kernel_dtype_from_attr("dtype")
    .doc("A value that must be fed at run time.");

SPIRE_REGISTER_OP("Const")
    .required_attr("value")
    .shape_fn([](InferContext& c) {
      Tensor t = c.attr<Tensor>("value");
      c.set_output(0, t.dtype(), t.shape());
    })
    .no_gradient()
    .kernel_dtype_from_output(0)
    .doc("A constant tensor.");

SPIRE_REGISTER_OP("Variable")
    .required_attr("dtype")
    .required_attr("shape")
    .shape_fn([](InferContext& c) {
      Shape s = c.attr<Shape>("shape");
      if (!s.is_fully_defined()) c.fail("a variable needs a fully defined shape, got ", s.to_string());
      c.set_output(0, c.attr<DType>("dtype"), s);
    })
    .no_gradient()  // variables are the leaves gradients are taken with respect to
    .is_variable()
    .kernel_dtype_from_attr("dtype")
    .doc("A tensor whose value is kept by the Session across runs.");

SPIRE_REGISTER_OP("Assign")
    .input("ref")
    .input("value")
    .shape_fn([](InferContext& c) { variable_input_check(c, "Assign"); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .allow_undefined_input(0)
    .doc("ref = value; outputs the new value.");

SPIRE_REGISTER_OP("AssignAdd")
    .input("ref")
    .input("value")
    .shape_fn([](InferContext& c) { variable_input_check(c, "AssignAdd"); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("ref += value (broadcasting value); outputs the new value.");

SPIRE_REGISTER_OP("AssignSub")
    .input("ref")
    .input("value")
    .shape_fn([](InferContext& c) { variable_input_check(c, "AssignSub"); })
    .colocate_with_input(0)
    .no_gradient()
    .stateful()
    .doc("ref -= value (broadcasting value); outputs the new value.");

SPIRE_REGISTER_OP("Identity")
    .forwards_input()
    .input("x")
    .shape_fn(same_as_input0)
    .grad([](GradContext& c) -> std::vector<Output> { return {c.grad()}; })
    .doc("Returns x.");

SPIRE_REGISTER_OP("Copy")
    .is_copy()
    .input("x")
    .shape_fn(same_as_input0)
    .grad([](GradContext& c) -> std::vector<Output> {
      // The gradient travels back to the device the value came from.
      Graph& g = c.graph();
      DeviceScope back(g, c.input(0).device());
      return {g.add_node("Copy", {c.grad()}, {}, c.node()->name() + "_grad")->output(0)};
    })
    .doc("Copies x to this node's device. The graph inserts it where a node reads a tensor "
         "produced on another device (CPU<->GPU, GPU<->GPU, and between logical CPU devices); "
         "its kernel runs on the destination device. Between CPU devices it is a real copy "
         "into the destination device's allocator, as between GPUs (no zero-copy sharing), so "
         "each device's memory statistics and buffers stay its own.");

SPIRE_REGISTER_OP("StopGradient")
    .input("x")
    .shape_fn(same_as_input0)
    .no_gradient()
    .doc("Returns x; gradients do not flow through it.");

SPIRE_REGISTER_OP("ZerosLike")
    .input("x")
    .shape_fn(same_as_input0)
    .no_gradient()
    .doc("Zeros with the dtype and run-time shape of x.");

SPIRE_REGISTER_OP("OnesLike")
    .input("x")
    .shape_fn(same_as_input0)
    .no_gradient()
    .doc("Ones with the dtype and run-time shape of x.");

SPIRE_REGISTER_OP("NoOp")
    .shape_fn([](InferContext&) {})
    .no_gradient()
    .doc("Does nothing; used with control inputs to group ops.");

Output placeholder(DType dtype, const Shape& shape, const std::string& name, Graph* g) {
  return graph_or_default(g).add_node("Placeholder", {}, {{"dtype", dtype}, {"shape", shape}},
                                      name.empty() ? "Placeholder" : name)->output(0);
}

Output constant(const Tensor& value, const std::string& name, Graph* g) {
  SPIRE_CHECK(value.defined(), "constant: undefined tensor");
  return graph_or_default(g).add_node("Const", {}, {{"value", value.to(Device::cpu()).clone()}},
                                      name.empty() ? "Const" : name)->output(0);
}

Output scalar(double value, DType dtype, Graph* g) {
  return constant(Tensor::full(dtype, Shape{}, value), "Const", g);
}

Output scalar_like(double value, const Output& like) {
  return scalar(value, like.dtype(), like.graph());
}

Output variable(const Shape& shape, DType dtype, const std::string& name, Graph* g) {
  return graph_or_default(g).add_node("Variable", {}, {{"dtype", dtype}, {"shape", shape}},
                                      name.empty() ? "Variable" : name)->output(0);
}

Output assign(const Output& var, const Output& value, const std::string& name) {
  return state_update("Assign", var, value, name);
}
Output assign_add(const Output& var, const Output& delta, const std::string& name) {
  return state_update("AssignAdd", var, delta, name);
}
Output assign_sub(const Output& var, const Output& delta, const std::string& name) {
  return state_update("AssignSub", var, delta, name);
}
Output identity(const Output& x, const std::string& name) {
  return add_op("Identity", {x}, {}, name)->output(0);
}
Output stop_gradient(const Output& x, const std::string& name) {
  return add_op("StopGradient", {x}, {}, name)->output(0);
}
Output zeros_like(const Output& x, const std::string& name) {
  return add_op("ZerosLike", {x}, {}, name)->output(0);
}
Output ones_like(const Output& x, const std::string& name) {
  return add_op("OnesLike", {x}, {}, name)->output(0);
}
Node* no_op(const std::string& name, Graph* g) {
  return graph_or_default(g).add_node("NoOp", {}, {}, name.empty() ? "NoOp" : name);
}
Node* group(const std::vector<Node*>& deps, const std::string& name, Graph* g) {
  Graph* graph = g ? g : (!deps.empty() && deps[0] ? deps[0]->graph() : &default_graph());
  return graph->add_node("NoOp", {}, {}, name, deps);
}

}  // namespace spire::ops

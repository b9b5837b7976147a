// Registration of FusedElementwise, the node the elementwise fusion pass
// (core/fusion.h) puts in a plan in place of a group of elementwise nodes. It
// is made after the gradients exist and is never differentiated or built by
// users. Inputs: the group's inputs (one dtype). Attrs: "ops" (the op type of
// each instruction, in evaluation order, the last one the result), "operands"
// (each instruction's operands in turn, as many as its op takes: k < number of
// inputs is input k, otherwise instruction k - number of inputs), "nodes" (the
// fused nodes' names, for errors), and the instructions' own attrs, named
// "<j>/<attr>" for instruction j: "string_attrs" (name, value, name, value, ...)
// and "number_attr_names" with "number_attrs". The output has the inputs'
// dtype and their broadcast shape.
#include "core/ops/op_util.h"

namespace spire::ops {

OpDefBuilder& fused_program_attrs(OpDefBuilder& b) {
  return b.required_attr("ops")
      .required_attr("operands")
      .required_attr("nodes")
      .attr("string_attrs", std::vector<std::string>{})
      .attr("number_attr_names", std::vector<std::string>{})
      .attr("number_attrs", std::vector<double>{});
}

void check_fused_program(InferContext& c) {
  const auto ops = c.attr<std::vector<std::string>>("ops");
  const auto nodes = c.attr<std::vector<std::string>>("nodes");
  if (ops.empty() || ops.size() != nodes.size())
    c.fail("needs one node name per op and at least one op; got ", ops.size(), " ops and ",
           nodes.size(), " names");
}

void epilogue_shape(InferContext& c, int first) {
  check_fused_program(c);
  Shape s = c.output_shapes().at(0);
  const DType dtype = c.output_dtypes().at(0);
  for (int i = first; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != dtype)
      c.fail(c.input_label(i), " has dtype ", dtype_name(c.input_dtype(i)), ", the product ", dtype_name(dtype));
    Shape b;
    if (!broadcast_shapes(s, c.input_shape(i), &b))
      c.fail("the product ", s.to_string(), " and inputs ", first, " to ", i, " do not broadcast together");
    s = b;
  }
  c.set_output(0, dtype, s);
}

static OpRegistrar fused_elementwise_registrar = fused_program_attrs(OpDefBuilder("FusedElementwise")
    .variadic_input("xs", 1))
    .shape_fn([](InferContext& c) {
      Shape s = c.input_shape(0);
      for (int i = 1; i < c.num_inputs(); ++i) {
        c.expect_same_dtype(0, i);
        Shape b;
        if (!broadcast_shapes(s, c.input_shape(i), &b))
          c.fail("inputs 0 to ", i, " do not broadcast together");
        s = b;
      }
      check_fused_program(c);
      c.set_output(0, c.input_dtype(0), s);
    })
    .doc("Elementwise ops evaluated as one expression (made by the fusion pass).");

}  // namespace spire::ops

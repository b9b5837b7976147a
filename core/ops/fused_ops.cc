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
#include "core/op_registry.h"

namespace spire::ops {

SPIRE_REGISTER_OP("FusedElementwise")
    .variadic_input("xs", 1)
    .required_attr("ops")
    .required_attr("operands")
    .required_attr("nodes")
    .attr("string_attrs", std::vector<std::string>{})
    .attr("number_attr_names", std::vector<std::string>{})
    .attr("number_attrs", std::vector<double>{})
    .shape_fn([](InferContext& c) {
      Shape s = c.input_shape(0);
      for (int i = 1; i < c.num_inputs(); ++i) {
        c.expect_same_dtype(0, i);
        Shape b;
        if (!broadcast_shapes(s, c.input_shape(i), &b))
          c.fail("inputs 0 to ", i, " do not broadcast together");
        s = b;
      }
      const auto ops = c.attr<std::vector<std::string>>("ops");
      const auto nodes = c.attr<std::vector<std::string>>("nodes");
      if (ops.empty() || ops.size() != nodes.size())
        c.fail("needs one node name per op and at least one op; got ", ops.size(), " ops and ",
               nodes.size(), " names");
      c.set_output(0, c.input_dtype(0), s);
    })
    // Only the CPU kernels register fusable ops (core/fusion.h), so the pass never makes
    // this node on a GPU; the mark says so to the placer and the CUDA coverage test.
    .cpu_only()
    .doc("Elementwise ops evaluated as one expression (made by the fusion pass).");

}  // namespace spire::ops

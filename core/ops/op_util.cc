#include "core/ops/op_util.h"

namespace spire::ops {

Node* add_op(const std::string& op, const std::vector<Output>& inputs, const AttrMap& attrs,
             const std::string& name) {
  SPIRE_CHECK(!inputs.empty() && inputs[0].valid(), "op ", op, ": first input is invalid");
  return inputs[0].graph()->add_node(op, inputs, attrs, name);
}

void same_as_input0(InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); }

void broadcast_binary_shape(InferContext& c, DType out_dtype) {
  c.expect_same_dtype(0, 1);
  Shape out;
  if (!broadcast_shapes(c.input_shape(0), c.input_shape(1), &out))
    c.fail("shapes ", c.input_shape(0).to_string(), " and ", c.input_shape(1).to_string(),
           " cannot be broadcast together");
  c.set_output(0, out_dtype == DType::Invalid ? c.input_dtype(0) : out_dtype, out);
}

void expect_float(const InferContext& c, int i) {
  if (!is_floating(c.input_dtype(i)))
    c.fail("input ", i, " must be floating point, got ", dtype_name(c.input_dtype(i)));
}

Output sum_to_like(const Output& g, const Output& x) {
  if (g.shape().is_fully_defined() && g.shape() == x.shape()) return g;
  return add_op("SumToLike", {g, x})->output(0);
}

Output sum_to_like(const Output& g, const Output& x, const Output& other) {
  const Shape& xs = x.shape();
  const Shape& os = other.shape();
  bool same = xs.rank() >= os.rank();
  for (int i = 1; same && i <= os.rank(); ++i) {
    const int64_t xd = xs[xs.rank() - i], od = os[os.rank() - i];
    same = od == 1 || (xd >= 0 && xd == od);
  }
  if (same) return g;
  return sum_to_like(g, x);
}

Output broadcast_like(const Output& x, const Output& like) {
  if (x.shape().is_fully_defined() && x.shape() == like.shape()) return x;
  return add_op("BroadcastLike", {x, like})->output(0);
}

// SumToLike(g, x): sums g over the dimensions along which x was broadcast.
SPIRE_REGISTER_OP("SumToLike")
    .input("x")
    .input("like")
    .shape_fn([](InferContext& c) {
      Shape tmp;
      if (!broadcast_shapes(c.input_shape(0), c.input_shape(1), &tmp) ||
          c.input_shape(1).rank() > c.input_shape(0).rank())
        c.fail("cannot sum ", c.input_shape(0).to_string(), " down to ",
               c.input_shape(1).to_string());
      c.set_output(0, c.input_dtype(0), c.input_shape(1));
    })
    .grad([](GradContext& c) -> std::vector<Output> {
      return {broadcast_like(c.grad(), c.input(0)), Output()};
    })
    .doc("Sums x over broadcast dimensions so the result has like's run-time shape.");

// BroadcastLike(x, like): broadcasts x to like's run-time shape.
SPIRE_REGISTER_OP("BroadcastLike")
    .input("x")
    .input("like")
    .shape_fn([](InferContext& c) {
      Shape out;
      if (!broadcast_shapes(c.input_shape(0), c.input_shape(1), &out) ||
          c.input_shape(0).rank() > c.input_shape(1).rank())
        c.fail("cannot broadcast ", c.input_shape(0).to_string(), " to ",
               c.input_shape(1).to_string());
      c.set_output(0, c.input_dtype(0), c.input_shape(1));
    })
    .grad([](GradContext& c) -> std::vector<Output> {
      return {sum_to_like(c.grad(), c.input(0)), Output()};
    })
    .doc("Broadcasts x to the run-time shape of like.");

}  // namespace spire::ops

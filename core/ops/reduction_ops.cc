// Registrations of the reductions Sum, Mean, Max, Min, Prod (attrs `axes`,
// empty = all, and `keepdims`), ArgMax and L2Loss (sum(x^2) / 2, one pass),
// with shape inference and gradients (see reduction_ops.h). Kernels: kernels/cpu/reduction_kernels.cc.
//
// Gradients bring the output gradient back to the keepdims shape (one
// ExpandDims per reduced axis, so unknown dims are fine) and broadcast it to
// the run-time shape of x with BroadcastLike; everything is built from
// differentiable ops, so second-order gradients work.
#include "core/ops/reduction_ops.h"

#include <algorithm>

#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/state_ops.h"

namespace spire::ops {

namespace {

using Grads = std::vector<Output>;

// The sorted, deduplicated reduced axes of a node (all axes when `axes` is empty).
std::vector<int> reduced_axes(const std::vector<int64_t>& axes, int rank,
                              const std::function<void(int64_t)>& bad_axis) {
  std::vector<int> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) bad_axis(a);
    out.push_back(static_cast<int>(a < 0 ? a + rank : a));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void reduction_shape(InferContext& c) {
  if (c.input_dtype(0) == DType::Bool) c.fail("input must be numeric, got bool");
  const Shape& x = c.input_shape(0);
  std::vector<int> axes = reduced_axes(c.attr<std::vector<int64_t>>("axes"), x.rank(), [&](int64_t a) {
    c.fail("axis ", a, " is out of range for rank ", x.rank());
  });
  bool keep = c.attr<bool>("keepdims");
  std::vector<int64_t> dims;
  for (int i = 0; i < x.rank(); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced) dims.push_back(x[i]);
    else if (keep) dims.push_back(1);
  }
  c.set_output(0, c.input_dtype(0), Shape(std::move(dims)));
}

std::vector<int> node_axes(const GradContext& c) {
  const Node* n = c.node();
  return reduced_axes(c.attr<std::vector<int64_t>>("axes"), c.input(0).shape().rank(),
                      [&](int64_t a) { throw_error(n->describe(), ": bad axis ", a); });
}

// Reshapes a reduction result (or its gradient) to the keepdims shape.
Output to_keepdims(const Output& y, const GradContext& c) {
  if (c.attr<bool>("keepdims")) return y;
  Output out = y;
  for (int a : node_axes(c)) out = expand_dims(out, a);  // ascending: each axis lands in place
  return out;
}

Output sum_grad_to_input(const Output& g, const GradContext& c) {
  return broadcast_like(to_keepdims(g, c), c.input(0));
}

// Number of reduced elements per output element, shaped for broadcasting
// against the keepdims gradient (a scalar when x's shape is static).
Output reduced_count(const GradContext& c) {
  Output x = c.input(0);
  const Shape& s = x.shape();
  if (s.is_fully_defined()) {
    int64_t n = 1;
    for (int a : node_axes(c)) n *= s[a];
    return scalar_like(static_cast<double>(n), x);
  }
  std::vector<int64_t> axes(c.attr<std::vector<int64_t>>("axes"));
  return sum(ones_like(x), axes, /*keepdims=*/true);
}

// Max/Min: the gradient goes to the elements equal to the result, split
// equally among ties (as TensorFlow).
Output extremum_grad(GradContext& c) {
  Output x = c.input(0);
  Output yk = to_keepdims(c.output(), c);
  Output mask = cast(equal(x, yk), x.dtype());
  std::vector<int64_t> axes(c.attr<std::vector<int64_t>>("axes"));
  Output count = sum(mask, axes, /*keepdims=*/true);
  return mul(mask, div(to_keepdims(c.grad(), c), count));
}

// Prod: d prod / d x_i = product of the other elements, computed without
// dividing by zero: with no zero in the group it is prod / x_i; with exactly
// one zero, the zero element gets the product of the non-zero ones and the
// others 0; with two or more zeros every element gets 0.
Output prod_grad(GradContext& c) {
  Output x = c.input(0);
  std::vector<int64_t> axes(c.attr<std::vector<int64_t>>("axes"));
  Output zero = zeros_like(x);
  Output is_zero = equal(x, zero);
  Output x_safe = where(is_zero, ones_like(x), x);
  Output p_nonzero = prod(x_safe, axes, /*keepdims=*/true);
  Output n_zero = sum(cast(is_zero, x.dtype()), axes, /*keepdims=*/true);
  Output zk = zeros_like(p_nonzero);
  Output when_zero = where(equal(n_zero, scalar_like(1, x)), p_nonzero, zk);
  Output when_nonzero = where(equal(n_zero, zk), div(p_nonzero, x_safe), zero);
  Output others = where(is_zero, when_zero, when_nonzero);
  return mul(broadcast_like(to_keepdims(c.grad(), c), x), others);
}

Output reduce(const char* op, const Output& x, const std::vector<int64_t>& axes, bool keepdims,
              const std::string& name) {
  return add_op(op, {x}, {{"axes", std::vector<int64_t>(axes)}, {"keepdims", keepdims}}, name)
      ->output(0);
}

}  // namespace

SPIRE_REGISTER_OP("Sum")
    .input("x")
    .attr("axes", std::vector<int64_t>{})
    .attr("keepdims", false)
    .shape_fn(reduction_shape)
    .grad([](GradContext& c) -> Grads { return {sum_grad_to_input(c.grad(), c)}; })
    .doc("Sum over `axes` (empty = all); 0 for an empty reduction.");

SPIRE_REGISTER_OP("Mean")
    .input("x")
    .attr("axes", std::vector<int64_t>{})
    .attr("keepdims", false)
    .shape_fn(reduction_shape)
    .grad([](GradContext& c) -> Grads {
      return {broadcast_like(div(to_keepdims(c.grad(), c), reduced_count(c)), c.input(0))};
    })
    .doc("Mean over `axes` (empty = all); NaN (floats) or 0 (integers, truncating) when empty.");

SPIRE_REGISTER_OP("Max")
    .input("x")
    .attr("axes", std::vector<int64_t>{})
    .attr("keepdims", false)
    .shape_fn(reduction_shape)
    .grad([](GradContext& c) -> Grads { return {extremum_grad(c)}; })
    .doc("Max over `axes`; NaN propagates; -inf (lowest integer) for an empty reduction. "
         "The gradient is shared equally among tied maxima.");

SPIRE_REGISTER_OP("Min")
    .input("x")
    .attr("axes", std::vector<int64_t>{})
    .attr("keepdims", false)
    .shape_fn(reduction_shape)
    .grad([](GradContext& c) -> Grads { return {extremum_grad(c)}; })
    .doc("Min over `axes`; NaN propagates; +inf (highest integer) for an empty reduction. "
         "The gradient is shared equally among tied minima.");

SPIRE_REGISTER_OP("Prod")
    .input("x")
    .attr("axes", std::vector<int64_t>{})
    .attr("keepdims", false)
    .shape_fn(reduction_shape)
    .grad([](GradContext& c) -> Grads { return {prod_grad(c)}; })
    .doc("Product over `axes`; 1 for an empty reduction. The gradient is exact with zeros "
         "(product of the other elements, no division by zero); its own gradient (second "
         "order) is exact only away from zeros.");

SPIRE_REGISTER_OP("ArgMax")
    .input("x")
    .required_attr("axis")
    .attr("output_type", DType::I64)
    .shape_fn([](InferContext& c) {
      if (c.input_dtype(0) == DType::Bool) c.fail("input must be numeric, got bool");
      DType out = c.attr<DType>("output_type");
      if (out != DType::I32 && out != DType::I64)
        c.fail("output_type must be i32 or i64, got ", dtype_name(out));
      const Shape& x = c.input_shape(0);
      int64_t a = c.attr<int64_t>("axis");
      if (a < -x.rank() || a >= x.rank() || x.rank() == 0)
        c.fail("axis ", a, " is out of range for rank ", x.rank());
      int axis = static_cast<int>(a < 0 ? a + x.rank() : a);
      if (x[axis] == 0) c.fail("cannot take the argmax over an empty dimension");
      std::vector<int64_t> dims;
      for (int i = 0; i < x.rank(); ++i)
        if (i != axis) dims.push_back(x[i]);
      c.set_output(0, out, Shape(std::move(dims)));
    })
    .no_gradient()
    .doc("Index of the first largest value along `axis` (NaN counts as largest).");

SPIRE_REGISTER_OP("L2Loss")
    .input("t")
    .shape_fn([](InferContext& c) {
      const DType dt = c.input_dtype(0);
      if (dt != DType::F32 && dt != DType::F64)
        c.fail("input must be f32 or f64, got ", dtype_name(dt));
      c.set_output(0, dt, Shape{});
    })
    .grad([](GradContext& c) -> Grads { return {mul(c.input(0), c.grad())}; })
    .doc("sum(t^2) / 2 over every element (tf.nn.l2_loss): one pass over t, no squared "
         "tensor; deterministic for a given thread count. 0 for an empty t. The gradient is "
         "t * grad.");

// ---- builders --------------------------------------------------------------

Output sum(const Output& x, const std::vector<int64_t>& axes, bool keepdims, const std::string& name) {
  return reduce("Sum", x, axes, keepdims, name);
}
Output mean(const Output& x, const std::vector<int64_t>& axes, bool keepdims, const std::string& name) {
  return reduce("Mean", x, axes, keepdims, name);
}
Output max(const Output& x, const std::vector<int64_t>& axes, bool keepdims, const std::string& name) {
  return reduce("Max", x, axes, keepdims, name);
}
Output min(const Output& x, const std::vector<int64_t>& axes, bool keepdims, const std::string& name) {
  return reduce("Min", x, axes, keepdims, name);
}
Output prod(const Output& x, const std::vector<int64_t>& axes, bool keepdims, const std::string& name) {
  return reduce("Prod", x, axes, keepdims, name);
}
Output argmax(const Output& x, int64_t axis, DType out_dtype, const std::string& name) {
  return add_op("ArgMax", {x}, {{"axis", axis}, {"output_type", out_dtype}}, name)->output(0);
}

Output l2_loss(const Output& t, const std::string& name) {
  return add_op("L2Loss", {t}, {}, name)->output(0);
}

}  // namespace spire::ops

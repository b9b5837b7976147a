// Registrations of the random ops (see random_ops.h): RandomUniform,
// RandomNormal, TruncatedNormal and Dropout. All are stateful (never
// deduplicated or constant-folded) and draw from counter-based Philox
// streams (kernels/random.h).
//
// Reproducibility: a node's key mixes the graph seed (Graph::seed()) with
// its op seed, or with its node id when the op seed is 0, so a graph built
// the same way draws the same numbers. Each Session::run advances the
// node's stream (SessionState::advance_rng), so successive runs draw fresh
// numbers, and two sessions on the same graph reproduce the same sequence.
#include "core/ops/random_ops.h"

#include <cmath>

#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"

namespace spire::ops {

namespace {

Graph& graph_or_default(Graph* g) { return g ? *g : default_graph(); }

void random_source_shape(InferContext& c) {
  DType dt = c.attr<DType>("dtype");
  if (dt != DType::F32 && dt != DType::F64)
    c.fail("dtype must be f32 or f64, got ", dtype_name(dt));
  Shape s = c.attr<Shape>("shape");
  if (!s.is_fully_defined())
    c.fail("shape must be fully defined, got ", s.to_string());
  c.set_output(0, dt, s);
}

void normal_shape(InferContext& c) {
  double mean = c.attr<double>("mean");
  double stddev = c.attr<double>("stddev");
  if (!std::isfinite(mean)) c.fail("mean must be finite, got ", mean);
  if (!(stddev >= 0) || !std::isfinite(stddev))
    c.fail("stddev must be finite and non-negative, got ", stddev);
  random_source_shape(c);
}

Output random_source(const char* op, const Shape& shape, DType dtype, AttrMap attrs,
                     int64_t seed, const std::string& name, Graph* g) {
  attrs["shape"] = shape;
  attrs["dtype"] = dtype;
  attrs["seed"] = seed;
  return graph_or_default(g).add_node(op, {}, attrs, name)->output(0);
}

using Grads = std::vector<Output>;

}  // namespace

SPIRE_REGISTER_OP("RandomUniform")
    .required_attr("shape")
    .attr("dtype", DType::F32)
    .attr("minval", 0.0)
    .attr("maxval", 1.0)
    .attr("seed", int64_t{0})
    .shape_fn([](InferContext& c) {
      double lo = c.attr<double>("minval"), hi = c.attr<double>("maxval");
      if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi))
        c.fail("needs finite minval < maxval, got minval ", lo, ", maxval ", hi);
      random_source_shape(c);
    })
    .no_gradient()
    .stateful()
    .kernel_dtype_from_attr("dtype")
    .doc("Uniform values in [minval, maxval) (f32 or f64).");

SPIRE_REGISTER_OP("RandomNormal")
    .required_attr("shape")
    .attr("dtype", DType::F32)
    .attr("mean", 0.0)
    .attr("stddev", 1.0)
    .attr("seed", int64_t{0})
    .shape_fn(normal_shape)
    .no_gradient()
    .stateful()
    .kernel_dtype_from_attr("dtype")
    .doc("Normal values with the given mean and stddev (f32 or f64).");

SPIRE_REGISTER_OP("TruncatedNormal")
    .required_attr("shape")
    .attr("dtype", DType::F32)
    .attr("mean", 0.0)
    .attr("stddev", 1.0)
    .attr("seed", int64_t{0})
    .shape_fn(normal_shape)
    .no_gradient()
    .stateful()
    .kernel_dtype_from_attr("dtype")
    .doc("Normal values re-drawn until within two standard deviations of the mean "
         "(std of the result ~0.8796 * stddev), as TF's truncated_normal.");

SPIRE_REGISTER_OP("Dropout")
    .input("x")
    .attr("rate", 0.5)
    .attr("seed", int64_t{0})
    .shape_fn([](InferContext& c) {
      expect_float(c, 0);
      double rate = c.attr<double>("rate");
      if (!(rate >= 0.0 && rate < 1.0)) c.fail("rate must be in [0, 1), got ", rate);
      c.set_output(0, c.input_dtype(0), c.input_shape(0));
      c.set_output(1, c.input_dtype(0), c.input_shape(0));
    })
    .grad([](GradContext& c) -> Grads {
      // y = x * mask with a mask independent of x; the mask output has no
      // gradient path back to x.
      if (!c.has_grad(0)) return {Output()};
      return {mul(c.grad(0), c.output(1))};
    })
    .stateful()
    .doc("Inverted dropout: outputs (y, mask) where mask is 0 with probability `rate` "
         "and 1 / (1 - rate) otherwise, and y = x * mask.");

Output random_uniform(const Shape& shape, DType dtype, double minval, double maxval,
                      int64_t seed, const std::string& name, Graph* g) {
  return random_source("RandomUniform", shape, dtype, {{"minval", minval}, {"maxval", maxval}},
                       seed, name, g);
}

Output random_normal(const Shape& shape, DType dtype, double mean, double stddev, int64_t seed,
                     const std::string& name, Graph* g) {
  return random_source("RandomNormal", shape, dtype, {{"mean", mean}, {"stddev", stddev}}, seed,
                       name, g);
}

Output truncated_normal(const Shape& shape, DType dtype, double mean, double stddev,
                        int64_t seed, const std::string& name, Graph* g) {
  return random_source("TruncatedNormal", shape, dtype, {{"mean", mean}, {"stddev", stddev}},
                       seed, name, g);
}

Output dropout(const Output& x, double rate, int64_t seed, const std::string& name) {
  return add_op("Dropout", {x}, {{"rate", rate}, {"seed", seed}}, name)->output(0);
}

}  // namespace spire::ops

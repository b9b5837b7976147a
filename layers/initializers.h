// Variable initializers (TF/tensorpack names): each builds the graph for a
// variable's initial value from its shape and dtype. Random ones use the
// graph-level seed (Graph::set_seed) with the op's position, so a graph built
// the same way initializes the same way.
#pragma once

#include <functional>
#include <string>

#include "core/graph.h"

namespace spire {

/// Builds the initial value of a variable of `shape` and `dtype` in `g`
/// (under the variable's "<name>/Initializer" name scope).
using Initializer = std::function<Output(const Shape& shape, DType dtype, Graph& g)>;

namespace init {

Initializer constant(double value);
Initializer zeros();
Initializer ones();
/// Uniform in [minval, maxval).
Initializer uniform(double minval = -0.05, double maxval = 0.05, int64_t seed = 0);
Initializer normal(double mean = 0.0, double stddev = 0.05, int64_t seed = 0);
Initializer truncated_normal(double mean = 0.0, double stddev = 0.05, int64_t seed = 0);
/// TF's VarianceScaling: stddev (or limit) from scale / fan, where fan is
/// fan_in, fan_out or their average ("fan_in", "fan_out", "fan_avg");
/// distribution "truncated_normal" (stddev corrected by 0.87962566),
/// "untruncated_normal" or "uniform". Fans: dense [in, out]: in/out; conv
/// HWIO [kh, kw, in, out]: kh*kw*in / kh*kw*out.
Initializer variance_scaling(double scale = 1.0, const std::string& mode = "fan_in",
                             const std::string& distribution = "truncated_normal",
                             int64_t seed = 0);
/// Glorot/Xavier: variance_scaling(1, "fan_avg", "uniform" / "truncated_normal").
Initializer glorot_uniform(int64_t seed = 0);
Initializer glorot_normal(int64_t seed = 0);
/// He: variance_scaling(2, "fan_in", "truncated_normal" / "uniform").
Initializer he_normal(int64_t seed = 0);
Initializer he_uniform(int64_t seed = 0);

/// The (fan_in, fan_out) TF computes for `shape`.
std::pair<double, double> compute_fans(const Shape& shape);

}  // namespace init
}  // namespace spire

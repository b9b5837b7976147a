// Graph-building functions for random ops: random_uniform, random_normal,
// truncated_normal and dropout. Their streams are reproducible: a graph
// seed and op seed (or the node's position when no op seed is given) fix
// the numbers each run draws. Registered in random_ops.cc.
#pragma once

#include <string>

#include "core/graph.h"

namespace spire::ops {

/// Uniform in [minval, maxval).
Output random_uniform(const Shape& shape, DType dtype = DType::F32, double minval = 0.0,
                      double maxval = 1.0, int64_t seed = 0, const std::string& name = "",
                      Graph* g = nullptr);
/// Normal with the given mean and stddev.
Output random_normal(const Shape& shape, DType dtype = DType::F32, double mean = 0.0,
                     double stddev = 1.0, int64_t seed = 0, const std::string& name = "",
                     Graph* g = nullptr);
/// Normal re-drawn until within two standard deviations of the mean.
Output truncated_normal(const Shape& shape, DType dtype = DType::F32, double mean = 0.0,
                        double stddev = 1.0, int64_t seed = 0, const std::string& name = "",
                        Graph* g = nullptr);
/// Zeroes each element with probability `rate` and scales the rest by
/// 1 / (1 - rate) (inverted dropout, as TF and PyTorch).
Output dropout(const Output& x, double rate, int64_t seed = 0, const std::string& name = "");

}  // namespace spire::ops

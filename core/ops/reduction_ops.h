// Graph-building functions for reductions over axes (sum, mean, max, min,
// prod with keepdims), argmax and l2_loss. Registered in reduction_ops.cc.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// Sum over `axes` (negative axes count from the end; empty = all axes).
Output sum(const Output& x, const std::vector<int64_t>& axes = {}, bool keepdims = false,
           const std::string& name = "");
Output mean(const Output& x, const std::vector<int64_t>& axes = {}, bool keepdims = false,
            const std::string& name = "");
/// Max/min propagate NaN; their gradient is split equally among ties.
Output max(const Output& x, const std::vector<int64_t>& axes = {}, bool keepdims = false,
           const std::string& name = "");
Output min(const Output& x, const std::vector<int64_t>& axes = {}, bool keepdims = false,
           const std::string& name = "");
/// Product over `axes`; its gradient is exact with zeros in x (second order
/// only away from zeros).
Output prod(const Output& x, const std::vector<int64_t>& axes = {}, bool keepdims = false,
            const std::string& name = "");
/// Index of the largest value along `axis` (first on ties), as `out_dtype` (i32 or i64).
Output argmax(const Output& x, int64_t axis, DType out_dtype = DType::I64,
              const std::string& name = "");

/// sum(t^2) / 2 over every element of t (f32 or f64), as a scalar: tf.nn.l2_loss. One
/// reduction that squares as it reads, so no tensor of squares is written (global norms,
/// L2 regularizers).
Output l2_loss(const Output& t, const std::string& name = "");

}  // namespace spire::ops

// Graph-building functions for reductions over axes (sum, mean, max, min,
// prod with keepdims) and argmax. Registered in reduction_ops.cc.
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

}  // namespace spire::ops

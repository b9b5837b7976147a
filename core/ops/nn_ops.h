// Graph-building functions for neural-network ops: matmul and batched
// matmul, softmax, log_softmax, sparse softmax cross-entropy, conv2d (NHWC)
// with its two gradient convolutions, max/avg pooling with their gradients.
// Registered in nn_ops.cc.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// a @ b for rank-2 tensors, optionally transposing either operand.
Output matmul(const Output& a, const Output& b, bool transpose_a = false,
              bool transpose_b = false, const std::string& name = "");
/// Batched matmul over leading dimensions (rank >= 3, equal batch dims, or
/// one operand with batch dims broadcast).
Output batch_matmul(const Output& a, const Output& b, bool adj_a = false, bool adj_b = false,
                    const std::string& name = "");
/// Softmax along `axis` (default last).
Output softmax(const Output& logits, int64_t axis = -1, const std::string& name = "");
Output log_softmax(const Output& logits, int64_t axis = -1, const std::string& name = "");
/// Per-example cross-entropy of logits [N, C] against integer labels [N];
/// labels outside [0, C) are an error. Returns the loss vector [N].
Output sparse_softmax_cross_entropy_with_logits(const Output& logits, const Output& labels,
                                                const std::string& name = "");

/// 2-D convolution, NHWC input [N, H, W, C], HWIO filter [KH, KW, C, O].
/// padding is "SAME" or "VALID"; strides and dilations are {h, w}.
Output conv2d(const Output& input, const Output& filter, const std::vector<int64_t>& strides = {1, 1},
              const std::string& padding = "SAME", const std::vector<int64_t>& dilations = {1, 1},
              const std::string& name = "");
/// Gradient of conv2d w.r.t. its input (a "transposed convolution").
Output conv2d_backprop_input(const Output& input_like, const Output& filter, const Output& dy,
                             const std::vector<int64_t>& strides, const std::string& padding,
                             const std::vector<int64_t>& dilations, const std::string& name = "");
/// Gradient of conv2d w.r.t. its filter.
Output conv2d_backprop_filter(const Output& input, const Output& filter_like, const Output& dy,
                              const std::vector<int64_t>& strides, const std::string& padding,
                              const std::vector<int64_t>& dilations, const std::string& name = "");
/// Max pooling, NHWC; ksize and strides are {h, w}.
Output max_pool(const Output& x, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding = "VALID",
                const std::string& name = "");
/// Average pooling, NHWC (SAME padding averages over the valid elements only).
Output avg_pool(const Output& x, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding = "VALID",
                const std::string& name = "");

}  // namespace spire::ops

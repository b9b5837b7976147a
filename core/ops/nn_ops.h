// Graph-building functions for neural-network ops: matmul and batched
// matmul, softmax, log_softmax, sparse softmax cross-entropy, in_top_k, conv2d (NHWC)
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
/// A mixed-precision matmul of f32 a and b (compute_dtype bf16 or f16; DType::Invalid: the
/// plain matmul above): exactly cast(matmul(cast(a, cd), cast(b, cd)), f32) as one node, so
/// no 16-bit copies of the operands or the product are made (layers/mixed_precision.h's
/// autocast_matmul builds it). Its gradients are mixed-precision matmuls too.
Output matmul(const Output& a, const Output& b, bool transpose_a, bool transpose_b,
              DType compute_dtype, const std::string& name = "");
/// Batched matmul over the last two dims (typically rank >= 3; leading batch
/// dims equal or broadcast by NumPy rules, so a rank-2 operand is shared by
/// every batch entry). adj_a/adj_b transpose the last two dims of a/b.
Output batch_matmul(const Output& a, const Output& b, bool adj_a = false, bool adj_b = false,
                    const std::string& name = "");
/// Softmax along `axis` (default last).
Output softmax(const Output& logits, int64_t axis = -1, const std::string& name = "");
Output log_softmax(const Output& logits, int64_t axis = -1, const std::string& name = "");
/// Per-example cross-entropy of logits [N, C] against integer labels [N];
/// labels outside [0, C) are an error. Returns the loss vector [N].
Output sparse_softmax_cross_entropy_with_logits(const Output& logits, const Output& labels,
                                                const std::string& name = "");

/// Per row of predictions [N, C], whether targets[i] (i32 or i64) is among the k largest
/// scores: bool [N]. TensorFlow's in_top_k (ties at the k-th value count as in; a target
/// outside [0, C) or with a non-finite score is out). Not differentiable.
Output in_top_k(const Output& predictions, const Output& targets, int64_t k,
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

/// Gradient of max_pool w.r.t. x given its output y and the output gradient dy: each dy
/// element goes to the first maximum of its window.
Output max_pool_grad(const Output& x, const Output& y, const Output& dy,
                     const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                     const std::string& padding, const std::string& name = "");
/// Gradient of max_pool_grad w.r.t. dy (linear): out[o] = g[first max of window o], shaped
/// like y.
Output max_pool_grad_grad(const Output& x, const Output& y, const Output& g,
                          const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                          const std::string& padding, const std::string& name = "");
/// Gradient of avg_pool w.r.t. its input (shaped like x_like, whose values are unused).
Output avg_pool_grad(const Output& x_like, const Output& dy, const std::vector<int64_t>& ksize,
                     const std::vector<int64_t>& strides, const std::string& padding,
                     const std::string& name = "");

/// One spatial dimension of a convolution or pooling window, TF rules: SAME gives
/// out = ceil(in / stride) and pads pad_total = max((out - 1) * stride + (k - 1) * dilation
/// + 1 - in, 0), pad_before = pad_total / 2; VALID gives out = (in - (k - 1) * dilation - 1)
/// / stride + 1 and no padding. An unknown `in` (-1) gives out = -1.
struct WindowDim {
  int64_t out = -1;
  int64_t pad_before = 0;
};
/// Computes `*dim`; returns "" on success, else what is wrong (bad padding string,
/// non-positive stride/dilation/window, input smaller than the dilated window for VALID).
std::string window_dim(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                       const std::string& padding, WindowDim* dim);

}  // namespace spire::ops

// Registrations of the neural-network ops declared in nn_ops.h, with shape
// inference and gradients: MatMul, BatchMatMul, Softmax, LogSoftmax,
// SparseSoftmaxCrossEntropyWithLogits, InTopK, Conv2D with its two gradient ops
// Conv2DBackpropInput/Conv2DBackpropFilter, MaxPool/AvgPool with
// MaxPoolGrad/AvgPoolGrad and MaxPoolGradGrad (the gradient of MaxPoolGrad).
// CPU kernels: kernels/cpu/{matmul,softmax,conv,pool}_kernels.cc.
//
// Every gradient is built from these same ops (or elementwise/reduction ops),
// so gradients are themselves differentiable (second order): the gradient of
// a matmul is two matmuls; of a conv, its backprop-input/backprop-filter
// ops, whose gradients are again convs and backprop ops (derived from the
// adjoint identity <conv(x, w), dy> = <x, B_in(w, dy)> = <w, B_f(x, dy)>).
//
// Why NHWC images with HWIO filters: it is TF's (and tensorpack's) default
// data format, so models and checkpoints carry over unchanged. With channels
// innermost, each im2col row is a run of contiguous C-vectors (one per filter
// tap) copied with memcpy, the filter is already the [KH*KW*C, O] matrix, and
// the convolution of a batch chunk is one GEMM [N*OH*OW, KH*KW*C] x
// [KH*KW*C, O] producing NHWC output directly (a 1x1 convolution needs no
// im2col at all). Pooling likewise vectorizes over contiguous channels. On
// the GPU, cuDNN supports NHWC natively with tensor cores on sm_90, so no
// layout transposes are needed there either.
#include "core/ops/nn_ops.h"

#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/reduction_ops.h"

namespace spire::ops {

using Grads = std::vector<Output>;

std::string window_dim(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                       const std::string& padding, WindowDim* dim) {
  if (padding != "SAME" && padding != "VALID")
    return str_cat("padding must be \"SAME\" or \"VALID\", got \"", padding, "\"");
  if (stride < 1) return str_cat("strides must be positive, got ", stride);
  if (dilation < 1) return str_cat("dilations must be positive, got ", dilation);
  if (k < 1) return str_cat("window size must be positive, got ", k);
  dim->out = -1;
  dim->pad_before = 0;
  if (in < 0) return "";
  const int64_t eff = (k - 1) * dilation + 1;
  if (padding == "SAME") {
    dim->out = (in + stride - 1) / stride;
    int64_t pad_total = (dim->out - 1) * stride + eff - in;
    dim->pad_before = pad_total > 0 ? pad_total / 2 : 0;
  } else {
    if (in < eff)
      return str_cat("input size ", in, " is smaller than the (dilated) window ", eff,
                     " with VALID padding");
    dim->out = (in - eff) / stride + 1;
  }
  return "";
}

namespace {

void expect_float_kernel_dtype(const InferContext& c, int i) {
  c.expect_dtype(i, {DType::F32, DType::F64});
}

// MatMul and BatchMatMul also take f16 / bf16 (mixed precision: f32 accumulation, the
// product rounded to the 16-bit dtype).
void expect_matmul_dtype(const InferContext& c, int i) {
  c.expect_dtype(i, {DType::F32, DType::F64, DType::F16, DType::BF16});
}

// ---- matmul ------------------------------------------------------------------

void matmul_shape(InferContext& c) {
  expect_matmul_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  c.expect_rank(0, 2);
  c.expect_rank(1, 2);
  const bool ta = c.attr<bool>("transpose_a"), tb = c.attr<bool>("transpose_b");
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  const int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    c.fail("inner dimensions do not match: a ", a.to_string(), (ta ? " (transposed)" : ""),
           " has ", ka, ", b ", b.to_string(), (tb ? " (transposed)" : ""), " has ", kb);
  const DType compute = c.attr<DType>("compute_dtype");
  if (compute != DType::Invalid) {
    if (compute != DType::BF16 && compute != DType::F16)
      c.fail("compute_dtype must be bf16 or f16 (or unset), got ", dtype_name(compute));
    if (c.input_dtype(0) != DType::F32)
      c.fail("compute_dtype ", dtype_name(compute), " needs f32 inputs, got ",
             dtype_name(c.input_dtype(0)));
  }
  c.set_output(0, c.input_dtype(0), Shape{m, n});
}

void batch_matmul_shape(InferContext& c) {
  expect_matmul_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  if (a.rank() < 2 || b.rank() < 2) c.fail("inputs must have rank >= 2 (batch dims, rows, cols)");
  const bool adj_a = c.attr<bool>("adj_a"), adj_b = c.attr<bool>("adj_b");
  const int ra = a.rank(), rb = b.rank();
  const int64_t m = adj_a ? a[ra - 1] : a[ra - 2], ka = adj_a ? a[ra - 2] : a[ra - 1];
  const int64_t kb = adj_b ? b[rb - 1] : b[rb - 2], n = adj_b ? b[rb - 2] : b[rb - 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    c.fail("inner dimensions do not match: a ", a.to_string(), (adj_a ? " (adjoint)" : ""),
           " has ", ka, ", b ", b.to_string(), (adj_b ? " (adjoint)" : ""), " has ", kb);
  Shape batch;
  Shape ba(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2));
  Shape bb(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2));
  if (!broadcast_shapes(ba, bb, &batch))
    c.fail("batch dimensions ", ba.to_string(), " and ", bb.to_string(),
           " cannot be broadcast together");
  std::vector<int64_t> out = batch.dims();
  out.push_back(m);
  out.push_back(n);
  c.set_output(0, c.input_dtype(0), Shape(out));
}

// ---- softmax -------------------------------------------------------------------

void softmax_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  const int r = c.input_shape(0).rank();
  if (r < 1) c.fail("logits must have rank >= 1");
  const int64_t axis = c.attr<int64_t>("axis");
  if (axis < -r || axis >= r) c.fail("axis ", axis, " is out of range for rank ", r);
  same_as_input0(c);
}

void sparse_xent_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.expect_dtype(1, {DType::I32, DType::I64});
  c.expect_rank(0, 2);
  c.expect_rank(1, 1);
  int64_t n = c.input_shape(0)[0], nl = c.input_shape(1)[0];
  if (n >= 0 && nl >= 0 && n != nl)
    c.fail("logits have ", n, " rows but labels have ", nl, " entries");
  c.set_output(0, c.input_dtype(0), Shape{n >= 0 ? n : nl});
}

// ---- conv and pool attrs --------------------------------------------------------

std::vector<int64_t> pair_attr(const InferContext& c, const std::string& key) {
  auto v = c.attr<std::vector<int64_t>>(key);
  if (v.size() != 2) c.fail(key, " must have 2 entries {h, w}, got ", v.size());
  return v;
}

WindowDim window_or_fail(const InferContext& c, const char* which, int64_t in, int64_t k,
                         int64_t stride, int64_t dilation, const std::string& padding) {
  WindowDim d;
  std::string err = window_dim(in, k, stride, dilation, padding, &d);
  if (!err.empty()) c.fail(which, ": ", err);
  return d;
}

// Output shape of a conv2d of input shape `in` with filter shape `f` (both rank 4,
// possibly partial), checking channel consistency.
Shape conv_output_shape(const InferContext& c, const Shape& in, const Shape& f) {
  if (in.rank() != 4) c.fail("input must be NHWC (rank 4), got ", in.to_string());
  if (f.rank() != 4) c.fail("filter must be HWIO (rank 4), got ", f.to_string());
  if (in[3] >= 0 && f[2] >= 0 && in[3] != f[2])
    c.fail("input channels ", in[3], " do not match the filter's input channels ", f[2],
           " (input ", in.to_string(), ", filter ", f.to_string(), ")");
  auto strides = pair_attr(c, "strides"), dil = pair_attr(c, "dilations");
  const std::string padding = c.attr<std::string>("padding");
  // An unknown filter size leaves the output size unknown (the attrs are still checked).
  WindowDim h = window_or_fail(c, "height", f[0] >= 0 ? in[1] : -1, f[0] >= 0 ? f[0] : 1,
                               strides[0], dil[0], padding);
  WindowDim w = window_or_fail(c, "width", f[1] >= 0 ? in[2] : -1, f[1] >= 0 ? f[1] : 1,
                               strides[1], dil[1], padding);
  return Shape{in[0], h.out, w.out, f[3]};
}

// Fails unless `dy` is compatible with the expected (partial) shape.
void expect_compatible(const InferContext& c, const char* what, const Shape& dy,
                       const Shape& want) {
  bool ok = dy.rank() == want.rank();
  for (int i = 0; ok && i < dy.rank(); ++i) ok = dy[i] < 0 || want[i] < 0 || dy[i] == want[i];
  if (!ok) c.fail(what, " has shape ", dy.to_string(), ", expected ", want.to_string());
}

void conv2d_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  c.set_output(0, c.input_dtype(0), conv_output_shape(c, c.input_shape(0), c.input_shape(1)));
}

void conv2d_backprop_input_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  c.expect_same_dtype(0, 2);
  expect_compatible(c, "dy", c.input_shape(2),
                    conv_output_shape(c, c.input_shape(0), c.input_shape(1)));
  c.set_output(0, c.input_dtype(0), c.input_shape(0));
}

void conv2d_backprop_filter_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  c.expect_same_dtype(0, 2);
  expect_compatible(c, "dy", c.input_shape(2),
                    conv_output_shape(c, c.input_shape(0), c.input_shape(1)));
  c.set_output(0, c.input_dtype(0), c.input_shape(1));
}

Shape pool_output_shape(const InferContext& c, const Shape& in) {
  if (in.rank() != 4) c.fail("input must be NHWC (rank 4), got ", in.to_string());
  auto ksize = pair_attr(c, "ksize"), strides = pair_attr(c, "strides");
  const std::string padding = c.attr<std::string>("padding");
  WindowDim h = window_or_fail(c, "height", in[1], ksize[0], strides[0], 1, padding);
  WindowDim w = window_or_fail(c, "width", in[2], ksize[1], strides[1], 1, padding);
  return Shape{in[0], h.out, w.out, in[3]};
}

void pool_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.set_output(0, c.input_dtype(0), pool_output_shape(c, c.input_shape(0)));
}

// MaxPoolGrad(x, y, dy) -> like x; MaxPoolGradGrad(x, y, g) -> like y.
void max_pool_grad_shape(InferContext& c, bool grad_grad) {
  expect_float_kernel_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  c.expect_same_dtype(0, 2);
  Shape pooled = pool_output_shape(c, c.input_shape(0));
  expect_compatible(c, "y", c.input_shape(1), pooled);
  if (grad_grad) {
    expect_compatible(c, "g", c.input_shape(2), c.input_shape(0));
    c.set_output(0, c.input_dtype(0), c.input_shape(1));
  } else {
    expect_compatible(c, "dy", c.input_shape(2), pooled);
    c.set_output(0, c.input_dtype(0), c.input_shape(0));
  }
}

void avg_pool_grad_shape(InferContext& c) {
  expect_float_kernel_dtype(c, 0);
  c.expect_same_dtype(0, 1);
  expect_compatible(c, "dy", c.input_shape(1), pool_output_shape(c, c.input_shape(0)));
  c.set_output(0, c.input_dtype(0), c.input_shape(0));
}

AttrMap conv_attrs(const std::vector<int64_t>& strides, const std::string& padding,
                   const std::vector<int64_t>& dilations) {
  return {{"strides", strides}, {"padding", padding}, {"dilations", dilations}};
}
AttrMap conv_attrs_of(const GradContext& c) {
  return conv_attrs(c.attr<std::vector<int64_t>>("strides"), c.attr<std::string>("padding"),
                    c.attr<std::vector<int64_t>>("dilations"));
}
AttrMap pool_attrs(const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                   const std::string& padding) {
  return {{"ksize", ksize}, {"strides", strides}, {"padding", padding}};
}
AttrMap pool_attrs_of(const GradContext& c) {
  return pool_attrs(c.attr<std::vector<int64_t>>("ksize"),
                    c.attr<std::vector<int64_t>>("strides"), c.attr<std::string>("padding"));
}
Output op1(const char* op, const std::vector<Output>& in, const AttrMap& attrs,
           const std::string& name = "") {
  return add_op(op, in, attrs, name)->output(0);
}

// ---- work estimates (OpDef::cost) ---------------------------------------------------------

// The elements moved plus the multiply-adds (each kMultiplyAddCost), or -1 when not known.
double product_cost(const Node& n, double multiply_adds) {
  const double io = io_elements(n);
  return io < 0 || multiply_adds < 0 ? -1 : io + multiply_adds * kMultiplyAddCost;
}

// MatMul, FusedMatMul: m n k from the result and a's contracted dimension.
double matmul_cost(const Node& n) {
  const Shape& a = n.inputs()[0].shape();
  const Shape& y = n.output_shape(0);
  if (a.rank() != 2 || !a.is_fully_defined() || !y.is_fully_defined()) return -1;
  const int64_t k = n.attr<bool>("transpose_a") ? a.dim(0) : a.dim(1);
  return product_cost(n, static_cast<double>(y.num_elements()) * static_cast<double>(k));
}

// Conv2D and its gradients (input `out` of the forward result or its gradient; input 1 the
// HWIO filter or its like): each output element of the forward pass takes Kh Kw Cin
// multiply-adds.
double conv_cost(const Node& n, const Shape& out) {
  const Shape& w = n.inputs()[1].shape();
  if (w.rank() != 4 || !w.is_fully_defined() || !out.is_fully_defined() || w.dim(3) == 0) return -1;
  return product_cost(n, static_cast<double>(out.num_elements()) *
                             static_cast<double>(w.num_elements() / w.dim(3)));
}

}  // namespace

// ---- matmul ------------------------------------------------------------------------

SPIRE_REGISTER_OP("MatMul")
    .input("a").input("b")
    .attr("transpose_a", false).attr("transpose_b", false)
    .attr("compute_dtype", DType::Invalid)
    .shape_fn(matmul_shape)
    .cost(matmul_cost)
    .grad([](GradContext& c) -> Grads {
      const bool ta = c.attr<bool>("transpose_a"), tb = c.attr<bool>("transpose_b");
      const DType cd = c.attr<DType>("compute_dtype");
      Output a = c.input(0), b = c.input(1), g = c.grad();
      // The gradients are products of the same kind (in a mixed-precision MatMul: the
      // gradient rounded to compute_dtype, as the Cast before a 16-bit MatMul would).
      auto mm = [&](const Output& x, const Output& y, bool tx, bool ty) {
        return matmul(x, y, tx, ty, cd);
      };
      if (!ta && !tb) return {mm(g, b, false, true), mm(a, g, true, false)};
      if (!ta && tb) return {mm(g, b, false, false), mm(g, a, true, false)};
      if (ta && !tb) return {mm(b, g, false, true), mm(a, g, false, false)};
      return {mm(b, g, true, true), mm(g, a, true, true)};
    })
    .doc("op(a) @ op(b) for matrices; op transposes when transpose_a/transpose_b is set. "
         "compute_dtype bf16 or f16 (f32 inputs only; unset by default) makes it one "
         "mixed-precision product: exactly cast(matmul(cast(a, compute_dtype), cast(b, "
         "compute_dtype)), f32), i.e. the operands rounded to 16 bits, the products summed "
         "in f32, the result rounded to 16 bits and returned as f32, without the casts' "
         "tensors and passes.");

SPIRE_REGISTER_OP("BatchMatMul")
    .input("a").input("b")
    .attr("adj_a", false).attr("adj_b", false)
    .shape_fn(batch_matmul_shape)
    .cost([](const Node& n) {
      const Shape& a = n.inputs()[0].shape();
      const Shape& y = n.output_shape(0);
      if (a.rank() < 2 || !a.is_fully_defined() || !y.is_fully_defined()) return -1.0;
      const int64_t k = n.attr<bool>("adj_a") ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
      return product_cost(n, static_cast<double>(y.num_elements()) * static_cast<double>(k));
    })
    .grad([](GradContext& c) -> Grads {
      const bool ta = c.attr<bool>("adj_a"), tb = c.attr<bool>("adj_b");
      Output a = c.input(0), b = c.input(1), g = c.grad();
      Output ga, gb;
      if (!ta && !tb) {
        ga = batch_matmul(g, b, false, true);
        gb = batch_matmul(a, g, true, false);
      } else if (!ta && tb) {
        ga = batch_matmul(g, b);
        gb = batch_matmul(g, a, true, false);
      } else if (ta && !tb) {
        ga = batch_matmul(b, g, false, true);
        gb = batch_matmul(a, g);
      } else {
        ga = batch_matmul(b, g, true, true);
        gb = batch_matmul(g, a, true, true);
      }
      // Undo the broadcasting of batch dimensions.
      return {sum_to_like(ga, a), sum_to_like(gb, b)};
    })
    .doc("Matmul over the last two dims, batch dims broadcast (NumPy rules); adj_* transposes.");

// ---- softmax and cross-entropy -----------------------------------------------------------

SPIRE_REGISTER_OP("Softmax")
    .input("logits")
    .attr("axis", -1)
    .shape_fn(softmax_shape)
    .grad([](GradContext& c) -> Grads {
      // dx = y * (g - sum(g * y, axis, keepdims))
      Output y = c.output(), g = c.grad();
      const int64_t axis = c.attr<int64_t>("axis");
      return {mul(y, sub(g, sum(mul(g, y), {axis}, true)))};
    })
    .doc("exp(x - max) / sum(exp(x - max)) along axis.");

SPIRE_REGISTER_OP("LogSoftmax")
    .input("logits")
    .attr("axis", -1)
    .shape_fn(softmax_shape)
    .grad([](GradContext& c) -> Grads {
      // dx = g - exp(y) * sum(g, axis, keepdims)
      Output y = c.output(), g = c.grad();
      const int64_t axis = c.attr<int64_t>("axis");
      return {sub(g, mul(exp(y), sum(g, {axis}, true)))};
    })
    .doc("x - max - log(sum(exp(x - max))) along axis.");

SPIRE_REGISTER_OP("SparseSoftmaxCrossEntropyWithLogits")
    .input("logits").input("labels")
    .shape_fn(sparse_xent_shape)
    .grad([](GradContext& c) -> Grads {
      // d loss_i / d logits_ij = softmax(logits)_ij - [j == label_i]
      Output logits = c.input(0), labels = c.input(1), g = c.grad();
      const int64_t classes = logits.shape()[1];
      if (classes < 0)
        throw_error(c.node()->describe(),
                    ": the gradient needs a statically known number of classes, logits have shape ",
                    logits.shape().to_string());
      Output hot = one_hot(labels, classes, 1.0, 0.0, logits.dtype());
      return {mul(sub(softmax(logits), hot), expand_dims(g, -1)), Output()};
    })
    .doc("Per-row -log softmax(logits)[label]; labels outside [0, C) are a run-time error on "
         "the CPU and give a NaN loss on a GPU (as TensorFlow's GPU kernel).");

SPIRE_REGISTER_OP("InTopK")
    .input("predictions").input("targets")
    .required_attr("k")
    .shape_fn([](InferContext& c) {
      expect_float_kernel_dtype(c, 0);
      c.expect_dtype(1, {DType::I32, DType::I64});
      c.expect_rank(0, 2);
      c.expect_rank(1, 1);
      if (c.attr<int64_t>("k") < 0) c.fail("k must be >= 0, got ", c.attr<int64_t>("k"));
      int64_t n = c.input_shape(0)[0], nt = c.input_shape(1)[0];
      if (n >= 0 && nt >= 0 && n != nt)
        c.fail("predictions have ", n, " rows but targets have ", nt, " entries");
      c.set_output(0, DType::Bool, Shape{n >= 0 ? n : nt});
    })
    .no_gradient()
    .doc("Per row, whether the target's score is among the k largest (TensorFlow's "
         "in_top_k: ties at the k-th value count as in; a target outside [0, C) or with a "
         "non-finite score is out).");

// ---- conv2d ---------------------------------------------------------------------------------

SPIRE_REGISTER_OP("Conv2D")
    .input("input").input("filter")
    .attr("strides", std::vector<int64_t>{1, 1})
    .attr("padding", "SAME")
    .attr("dilations", std::vector<int64_t>{1, 1})
    .shape_fn(conv2d_shape)
    .cost([](const Node& n) { return conv_cost(n, n.output_shape(0)); })
    .grad([](GradContext& c) -> Grads {
      AttrMap a = conv_attrs_of(c);
      Output x = c.input(0), w = c.input(1), g = c.grad();
      return {op1("Conv2DBackpropInput", {x, w, g}, a), op1("Conv2DBackpropFilter", {x, w, g}, a)};
    })
    .doc("2-D convolution (cross-correlation) of NHWC input with an HWIO filter.");

SPIRE_REGISTER_OP("Conv2DBackpropInput")
    .input("input_like").input("filter").input("dy")
    .attr("strides", std::vector<int64_t>{1, 1})
    .attr("padding", "SAME")
    .attr("dilations", std::vector<int64_t>{1, 1})
    .shape_fn(conv2d_backprop_input_shape)
    .cost([](const Node& n) { return conv_cost(n, n.inputs()[2].shape()); })
    .grad([](GradContext& c) -> Grads {
      // out = B_in(w, dy) with <conv(x, w), dy> = <x, B_in(w, dy)>, so
      // <out, g> = <conv(g, w), dy>: d/d dy = conv(g, w), d/dw = B_f(g, dy).
      AttrMap a = conv_attrs_of(c);
      Output w = c.input(1), dy = c.input(2), g = c.grad();
      return {Output(), op1("Conv2DBackpropFilter", {g, w, dy}, a), op1("Conv2D", {g, w}, a)};
    })
    .doc("Gradient of Conv2D w.r.t. its input, shaped like input_like (values unused).");

SPIRE_REGISTER_OP("Conv2DBackpropFilter")
    .input("input").input("filter_like").input("dy")
    .attr("strides", std::vector<int64_t>{1, 1})
    .attr("padding", "SAME")
    .attr("dilations", std::vector<int64_t>{1, 1})
    .shape_fn(conv2d_backprop_filter_shape)
    .cost([](const Node& n) { return conv_cost(n, n.inputs()[2].shape()); })
    .grad([](GradContext& c) -> Grads {
      // out = B_f(x, dy) with <conv(x, w), dy> = <w, B_f(x, dy)>, so
      // <out, g> = <conv(x, g), dy>: d/dx = B_in(g, dy), d/d dy = conv(x, g).
      AttrMap a = conv_attrs_of(c);
      Output x = c.input(0), dy = c.input(2), g = c.grad();
      return {op1("Conv2DBackpropInput", {x, g, dy}, a), Output(), op1("Conv2D", {x, g}, a)};
    })
    .doc("Gradient of Conv2D w.r.t. its filter, shaped like filter_like (values unused).");

// ---- pooling --------------------------------------------------------------------------------

SPIRE_REGISTER_OP("MaxPool")
    .input("x")
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .shape_fn(pool_shape)
    .grad([](GradContext& c) -> Grads {
      return {op1("MaxPoolGrad", {c.input(0), c.output(), c.grad()}, pool_attrs_of(c))};
    })
    .doc("Max over ksize windows (NHWC); padded positions never win.");

SPIRE_REGISTER_OP("MaxPoolGrad")
    .input("x").input("y").input("dy")
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .shape_fn([](InferContext& c) { max_pool_grad_shape(c, false); })
    .grad([](GradContext& c) -> Grads {
      // Linear in dy; piecewise constant in x (no gradient), y only validates shapes.
      return {Output(), Output(),
              op1("MaxPoolGradGrad", {c.input(0), c.input(1), c.grad()}, pool_attrs_of(c))};
    })
    .doc("Routes each dy element to the first maximum of its window in x; shaped like x.");

SPIRE_REGISTER_OP("MaxPoolGradGrad")
    .input("x").input("y").input("g")
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .shape_fn([](InferContext& c) { max_pool_grad_shape(c, true); })
    .grad([](GradContext& c) -> Grads {
      return {Output(), Output(),
              op1("MaxPoolGrad", {c.input(0), c.input(1), c.grad()}, pool_attrs_of(c))};
    })
    .doc("Gathers g (shaped like x) at the first maximum of each window of x; shaped like y.");

SPIRE_REGISTER_OP("AvgPool")
    .input("x")
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .shape_fn(pool_shape)
    .grad([](GradContext& c) -> Grads {
      return {op1("AvgPoolGrad", {c.input(0), c.grad()}, pool_attrs_of(c))};
    })
    .doc("Mean over ksize windows (NHWC); SAME padding averages the valid elements only.");

SPIRE_REGISTER_OP("AvgPoolGrad")
    .input("x_like").input("dy")
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .shape_fn(avg_pool_grad_shape)
    .grad([](GradContext& c) -> Grads {
      // Linear in dy and the adjoint of AvgPool.
      return {Output(), op1("AvgPool", {c.grad()}, pool_attrs_of(c))};
    })
    .doc("Gradient of AvgPool: spreads dy / count over each window; shaped like x_like.");

// ---- builders -----------------------------------------------------------------------------------

Output matmul(const Output& a, const Output& b, bool transpose_a, bool transpose_b,
              const std::string& name) {
  return op1("MatMul", {a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}, name);
}
Output matmul(const Output& a, const Output& b, bool transpose_a, bool transpose_b,
              DType compute_dtype, const std::string& name) {
  if (compute_dtype == DType::Invalid) return matmul(a, b, transpose_a, transpose_b, name);
  return op1("MatMul", {a, b},
             {{"transpose_a", transpose_a},
              {"transpose_b", transpose_b},
              {"compute_dtype", compute_dtype}},
             name);
}
Output batch_matmul(const Output& a, const Output& b, bool adj_a, bool adj_b,
                    const std::string& name) {
  return op1("BatchMatMul", {a, b}, {{"adj_a", adj_a}, {"adj_b", adj_b}}, name);
}
Output softmax(const Output& logits, int64_t axis, const std::string& name) {
  return op1("Softmax", {logits}, {{"axis", axis}}, name);
}
Output log_softmax(const Output& logits, int64_t axis, const std::string& name) {
  return op1("LogSoftmax", {logits}, {{"axis", axis}}, name);
}
Output sparse_softmax_cross_entropy_with_logits(const Output& logits, const Output& labels,
                                                const std::string& name) {
  return op1("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name);
}
Output in_top_k(const Output& predictions, const Output& targets, int64_t k,
                const std::string& name) {
  return op1("InTopK", {predictions, targets}, {{"k", k}}, name);
}
Output conv2d(const Output& input, const Output& filter, const std::vector<int64_t>& strides,
              const std::string& padding, const std::vector<int64_t>& dilations,
              const std::string& name) {
  return op1("Conv2D", {input, filter}, conv_attrs(strides, padding, dilations), name);
}
Output conv2d_backprop_input(const Output& input_like, const Output& filter, const Output& dy,
                             const std::vector<int64_t>& strides, const std::string& padding,
                             const std::vector<int64_t>& dilations, const std::string& name) {
  return op1("Conv2DBackpropInput", {input_like, filter, dy},
             conv_attrs(strides, padding, dilations), name);
}
Output conv2d_backprop_filter(const Output& input, const Output& filter_like, const Output& dy,
                              const std::vector<int64_t>& strides, const std::string& padding,
                              const std::vector<int64_t>& dilations, const std::string& name) {
  return op1("Conv2DBackpropFilter", {input, filter_like, dy},
             conv_attrs(strides, padding, dilations), name);
}
Output max_pool(const Output& x, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding,
                const std::string& name) {
  return op1("MaxPool", {x}, pool_attrs(ksize, strides, padding), name);
}
Output avg_pool(const Output& x, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding,
                const std::string& name) {
  return op1("AvgPool", {x}, pool_attrs(ksize, strides, padding), name);
}
Output max_pool_grad(const Output& x, const Output& y, const Output& dy,
                     const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                     const std::string& padding, const std::string& name) {
  return op1("MaxPoolGrad", {x, y, dy}, pool_attrs(ksize, strides, padding), name);
}
Output max_pool_grad_grad(const Output& x, const Output& y, const Output& g,
                          const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                          const std::string& padding, const std::string& name) {
  return op1("MaxPoolGradGrad", {x, y, g}, pool_attrs(ksize, strides, padding), name);
}
Output avg_pool_grad(const Output& x_like, const Output& dy, const std::vector<int64_t>& ksize,
                     const std::vector<int64_t>& strides, const std::string& padding,
                     const std::string& name) {
  return op1("AvgPoolGrad", {x_like, dy}, pool_attrs(ksize, strides, padding), name);
}

// ---- products with an epilogue (made by the fusion pass) -----------------------------------
// A Conv2D, MatMul or MaxPoolGrad followed by an elementwise program on its result (core/fusion.h), made
// in a plan after the gradients exist: never differentiated, never built by users. Inputs:
// the product's, then the program's other inputs (program input 0 is the product). Attrs:
// the product's, the program's (fused_program_attrs) and "producer" (the product node's
// name, for errors). Each has a CPU and a CUDA kernel.

static OpRegistrar fused_conv2d_registrar = fused_program_attrs(OpDefBuilder("FusedConv2D")
    .input("input").input("filter").variadic_input("args", 0)
    .attr("strides", std::vector<int64_t>{1, 1})
    .attr("padding", "SAME")
    .attr("dilations", std::vector<int64_t>{1, 1})
    .attr("producer", ""))
    .shape_fn([](InferContext& c) {
      conv2d_shape(c);
      epilogue_shape(c, 2);
    })
    .cost([](const Node& n) { return conv_cost(n, n.output_shape(0)); })
    .doc("Conv2D with an elementwise epilogue applied to each block of its output.");

static OpRegistrar fused_max_pool_grad_registrar = fused_program_attrs(OpDefBuilder("FusedMaxPoolGrad")
    .input("x").input("y").input("dy").variadic_input("args", 0)
    .required_attr("ksize").required_attr("strides").attr("padding", "VALID")
    .attr("producer", ""))
    .shape_fn([](InferContext& c) {
      max_pool_grad_shape(c, false);
      epilogue_shape(c, 3);
    })
    .doc("MaxPoolGrad with an elementwise epilogue applied to each share of images of dx.");

static OpRegistrar fused_matmul_registrar = fused_program_attrs(OpDefBuilder("FusedMatMul")
    .input("a").input("b").variadic_input("args", 0)
    .attr("transpose_a", false).attr("transpose_b", false)
    .attr("compute_dtype", DType::Invalid)
    .attr("producer", ""))
    .shape_fn([](InferContext& c) {
      matmul_shape(c);
      epilogue_shape(c, 2);
    })
    .cost(matmul_cost)
    .doc("MatMul with an elementwise epilogue applied to each block of its output.");

}  // namespace spire::ops

// CPU kernels for Softmax, LogSoftmax and SparseSoftmaxCrossEntropyWithLogits (ops
// registered in core/ops/nn_ops.cc), f32 and f64. All are numerically stable: the maximum
// along the axis is subtracted before exponentiating. The tensor is viewed as
// [outer, axis, inner] so any axis works without transposes. Rows (the outer
// dimension) are split over the session's thread pool; each row's arithmetic
// is unchanged, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernel_registry.h"

namespace spire::cpu {
namespace {

struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView axis_view(KernelContext& ctx, const Shape& s) {
  const int r = s.rank();
  int64_t axis = ctx.attr<int64_t>("axis");
  if (r < 1 || axis < -r || axis >= r) ctx.fail("axis ", axis, " is out of range for rank ", r);
  if (axis < 0) axis += r;
  AxisView v;
  for (int i = 0; i < r; ++i) {
    if (i < axis) v.outer *= s[i];
    else if (i == axis) v.len = s[i];
    else v.inner *= s[i];
  }
  return v;
}

// y = softmax (kLog = false) or log_softmax (kLog = true) of x along the view's axis.
template <typename T, bool kLog>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  AxisView v = axis_view(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, x.shape());
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const int64_t in = v.inner;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(v.len * in, 1));
  ctx.parallel_for(v.outer, grain, [&](int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const T* xs = px + o * v.len * in + i;
      T* ys = py + o * v.len * in + i;
      if (v.len == 0) continue;
      T mx = xs[0];
      for (int64_t j = 1; j < v.len; ++j) mx = std::max(mx, xs[j * in]);
      T sum = 0;
      for (int64_t j = 0; j < v.len; ++j) {
        const T e = std::exp(xs[j * in] - mx);
        if (!kLog) ys[j * in] = e;
        sum += e;
      }
      if (kLog) {
        // (x - max) - log(sum) keeps full precision for large logits.
        const T log_sum = std::log(sum);
        for (int64_t j = 0; j < v.len; ++j) ys[j * in] = (xs[j * in] - mx) - log_sum;
      } else {
        const T inv = T(1) / sum;
        for (int64_t j = 0; j < v.len; ++j) ys[j * in] *= inv;
      }
    }
  }
  });
}

template <typename T, typename L>
void sparse_xent(KernelContext& ctx, const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  Tensor& loss = ctx.allocate_output(0, Shape{n});
  const T* px = logits.data<T>();
  const L* pl = labels.data<L>();
  T* out = loss.data<T>();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(classes, 1));
  ctx.parallel_for(n, grain, [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t label = static_cast<int64_t>(pl[r]);
    if (label < 0 || label >= classes)
      ctx.fail("label ", label, " at index ", r, " is outside the valid range [0, ", classes, ")");
    const T* row = px + r * classes;
    T mx = row[0];
    for (int64_t j = 1; j < classes; ++j) mx = std::max(mx, row[j]);
    T sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(row[j] - mx);
    out[r] = std::log(sum) - (row[label] - mx);
  }
  });
}

template <typename T>
void sparse_xent_kernel(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  if (logits.rank() != 2 || labels.rank() != 1 || labels.dim(0) != logits.dim(0))
    ctx.fail("expected logits [N, C] and labels [N]");
  if (labels.dtype() == DType::I32) sparse_xent<T, int32_t>(ctx, logits, labels);
  else if (labels.dtype() == DType::I64) sparse_xent<T, int64_t>(ctx, logits, labels);
  else ctx.fail("labels must be i32 or i64");
}

}  // namespace

SPIRE_REGISTER_KERNEL("Softmax", DeviceType::CPU, (softmax_kernel<float, false>), DType::F32);
SPIRE_REGISTER_KERNEL("Softmax", DeviceType::CPU, (softmax_kernel<double, false>), DType::F64);
SPIRE_REGISTER_KERNEL("LogSoftmax", DeviceType::CPU, (softmax_kernel<float, true>), DType::F32);
SPIRE_REGISTER_KERNEL("LogSoftmax", DeviceType::CPU, (softmax_kernel<double, true>), DType::F64);
SPIRE_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", DeviceType::CPU,
                      sparse_xent_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("SparseSoftmaxCrossEntropyWithLogits", DeviceType::CPU,
                      sparse_xent_kernel<double>, DType::F64);

}  // namespace spire::cpu

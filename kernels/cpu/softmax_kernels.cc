// CPU kernels for Softmax, LogSoftmax, SparseSoftmaxCrossEntropyWithLogits and InTopK
// (ops registered in core/ops/nn_ops.cc), f32 and f64. All are numerically stable: the maximum
// along the axis is subtracted before exponentiating. The tensor is viewed as
// [outer, axis, inner] so any axis works without transposes. Rows (the outer
// dimension) are split over the session's thread pool; each row's arithmetic
// is unchanged, so results do not depend on the thread count. The axis and
// input checks are shared with the CUDA kernels (kernels/reduce_attrs.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/reduce_attrs.h"
#include "kernels/top_k.h"

namespace spire::cpu {
namespace {

// y = softmax (kLog = false) or log_softmax (kLog = true) of x along the view's axis.
template <typename T, bool kLog>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::ReduceBlock v = kernels::softmax_axis_block(ctx, x.shape());
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
  kernels::with_sparse_xent_labels(ctx, [&](auto label) {
    sparse_xent<T, decltype(label)>(ctx, ctx.input(0), ctx.input(1));
  });
}

// InTopK: one row test (kernels/top_k.h) per example.
template <typename T, typename L>
void in_top_k(KernelContext& ctx, const Tensor& predictions, const Tensor& targets) {
  const int64_t n = predictions.dim(0), classes = predictions.dim(1);
  const int64_t k = ctx.attr<int64_t>("k");
  Tensor& out = ctx.allocate_output(0, Shape{n});
  const T* px = predictions.data<T>();
  const L* pt = targets.data<L>();
  bool* po = out.data<bool>();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(classes, 1));
  ctx.parallel_for(n, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      po[r] = kernels::in_top_k_row(px + r * classes, classes, static_cast<int64_t>(pt[r]), k);
  });
}

template <typename T>
void in_top_k_kernel(KernelContext& ctx) {
  kernels::with_sparse_xent_labels(ctx, [&](auto target) {
    in_top_k<T, decltype(target)>(ctx, ctx.input(0), ctx.input(1));
  });
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

SPIRE_REGISTER_KERNEL("InTopK", DeviceType::CPU, in_top_k_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("InTopK", DeviceType::CPU, in_top_k_kernel<double>, DType::F64);

}  // namespace spire::cpu

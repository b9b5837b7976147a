// CPU kernels of FusedBatchNorm and FusedBatchNormGrad (core/ops/batch_norm_ops.h),
// f32 and f64, with the arithmetic of kernels/batch_norm_math.h.
//
// Per-channel sums are taken in double. With the channel axis last (inner
// == 1, NHWC) the rows are cut into fixed blocks of kRowBlock rows; each
// block sums its rows into its own [C] partial (vectorized across the
// contiguous channels), and the partials are added in block order, so the
// result does not depend on how many threads took the blocks. Otherwise
// (inner > 1) each channel is summed whole by one task. The elementwise pass
// then runs over rows with the per-channel coefficients in the element type.
// Each chunk's loops are compiled for the CPU's best instruction set (run_vec).
// The forward's statistics need two passes over x (mean, then the sum of
// squared deviations: no cancellation as in E[x^2] - E[x]^2): channels last,
// both run per block of rows while the block is in cache and the blocks'
// statistics are merged (channel_mean_m2), so x is read from memory once for
// them and once to write y; otherwise two whole passes and the one for y; the backward one pass over dy and x for both sums and one to
// write dx.
#include <algorithm>
#include <array>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/batch_norm_attrs.h"
#include "kernels/batch_norm_math.h"
#include "kernels/cpu/vector_loops.h"

namespace spire::cpu {
namespace {

using kernels::BatchNormBackwardCoef;
using kernels::BatchNormView;

constexpr int64_t kRowBlock = 64;

// sums[k][c] = S over channel c of term(k, c, index) for K terms; term gets
// (c, flat element index) and adds its K values into acc[k].
template <int K, typename Term>
void channel_sums(KernelContext& ctx, const BatchNormView& v, Term term,
                  std::array<std::vector<double>, K>* sums) {
  const int64_t C = v.channels;
  for (auto& s : *sums) s.assign(static_cast<size_t>(C), 0.0);
  if (v.inner == 1) {
    const int64_t blocks = (v.outer + kRowBlock - 1) / kRowBlock;
    std::vector<double> partial(static_cast<size_t>(blocks * K * C), 0.0);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(C * kRowBlock, 1));
    ctx.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
      run_vec([&] {
        for (int64_t b = b0; b < b1; ++b) {
          double* acc = partial.data() + b * K * C;
          const int64_t r1 = std::min(v.outer, (b + 1) * kRowBlock);
          for (int64_t r = b * kRowBlock; r < r1; ++r) term.row(r * C, C, acc);
        }
      });
    });
    for (int64_t b = 0; b < blocks; ++b)
      for (int k = 0; k < K; ++k) {
        const double* p = partial.data() + (b * K + k) * C;
        double* s = (*sums)[static_cast<size_t>(k)].data();
        for (int64_t c = 0; c < C; ++c) s[c] += p[c];
      }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(v.per_channel(), 1));
  ctx.parallel_for(C, grain, [&](int64_t c0, int64_t c1) {
    run_vec([&] {
      for (int64_t c = c0; c < c1; ++c) {
        std::array<double, K> acc{};
        for (int64_t o = 0; o < v.outer; ++o) term.run(c, (o * C + c) * v.inner, v.inner, acc.data());
        for (int k = 0; k < K; ++k) (*sums)[static_cast<size_t>(k)][static_cast<size_t>(c)] = acc[k];
      }
    });
  });
}

// The terms: S(x); S((x - mean)^2); S(dy) and S(dy * (x - mean)).
// row(base, C, acc[K*C]) adds a whole channels-last row; run(c, base, len,
// acc[K]) a contiguous run of channel c.
template <typename T>
struct SumX {
  const T* x;
  void row(int64_t base, int64_t C, double* acc) const {
    for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<double>(x[base + c]);
  }
  void run(int64_t, int64_t base, int64_t len, double* acc) const {
    double s = 0;
    for (int64_t i = 0; i < len; ++i) s += static_cast<double>(x[base + i]);
    acc[0] += s;
  }
};

template <typename T>
struct SumSquaredDeviation {
  const T* x;
  const double* mean;
  void row(int64_t base, int64_t C, double* acc) const {
    for (int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(x[base + c]) - mean[c];
      acc[c] += d * d;
    }
  }
  void run(int64_t c, int64_t base, int64_t len, double* acc) const {
    double s = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double d = static_cast<double>(x[base + i]) - mean[c];
      s += d * d;
    }
    acc[0] += s;
  }
};

template <typename T>
struct SumDyAndDyX {
  const T* dy;
  const T* x;
  const T* mean;
  void row(int64_t base, int64_t C, double* acc) const {
    double* sdyx = acc + C;
    for (int64_t c = 0; c < C; ++c) {
      const double g = static_cast<double>(dy[base + c]);
      acc[c] += g;
      sdyx[c] += g * (static_cast<double>(x[base + c]) - static_cast<double>(mean[c]));
    }
  }
  void run(int64_t c, int64_t base, int64_t len, double* acc) const {
    double s = 0, sx = 0;
    const double m = static_cast<double>(mean[c]);
    for (int64_t i = 0; i < len; ++i) {
      const double g = static_cast<double>(dy[base + i]);
      s += g;
      sx += g * (static_cast<double>(x[base + i]) - m);
    }
    acc[0] += s;
    acc[1] += sx;
  }
};

// Channels last (inner == 1): per channel the mean and the sum of squared deviations from it
// (m2), reading x from memory once. Each fixed block of kRowBlock rows (in L1 or L2) takes its
// own mean, then its squared deviations from that mean; the blocks are merged in block order
// (Chan et al.'s pairwise update), so the result does not depend on the thread count and has
// no cancellation, as with two passes over all of x.
template <typename T>
void channel_mean_m2(KernelContext& ctx, const BatchNormView& v, const T* x,
                     std::vector<double>* mean, std::vector<double>* m2) {
  const int64_t C = v.channels;
  const int64_t blocks = (v.outer + kRowBlock - 1) / kRowBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * 2 * C), 0.0);  // per block: mean, m2
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(C * kRowBlock, 1));
  ctx.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    run_vec([&] {
      for (int64_t b = b0; b < b1; ++b) {
        double* bm = partial.data() + b * 2 * C;
        double* bm2 = bm + C;
        const int64_t r0 = b * kRowBlock, r1 = std::min(v.outer, r0 + kRowBlock);
        for (int64_t r = r0; r < r1; ++r) SumX<T>{x}.row(r * C, C, bm);
        const double inv = 1.0 / static_cast<double>(r1 - r0);
        for (int64_t c = 0; c < C; ++c) bm[c] *= inv;
        for (int64_t r = r0; r < r1; ++r) SumSquaredDeviation<T>{x, bm}.row(r * C, C, bm2);
      }
    });
  });
  mean->assign(static_cast<size_t>(C), 0.0);
  m2->assign(static_cast<size_t>(C), 0.0);
  double* pm = mean->data();
  double* pm2 = m2->data();
  double count = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const double* bm = partial.data() + b * 2 * C;
    const double* bm2 = bm + C;
    const double nb = static_cast<double>(std::min(v.outer, (b + 1) * kRowBlock) - b * kRowBlock);
    const double total = count + nb;
    const double w = nb / total, cross = count * nb / total;
    for (int64_t c = 0; c < C; ++c) {
      const double delta = bm[c] - pm[c];
      pm[c] += delta * w;
      pm2[c] += bm2[c] + delta * delta * cross;
    }
    count = total;
  }
}

// out[e] = f(c, e) over the view, parallel over outer rows.
template <typename F>
void for_each_element(KernelContext& ctx, const BatchNormView& v, F f) {
  const int64_t row = v.channels * v.inner;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(row, 1));
  ctx.parallel_for(v.outer, grain, [&](int64_t o0, int64_t o1) {
    run_vec([&] {
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t base = o * row;
        if (v.inner == 1) {
          f.row(base, v.channels);
        } else {
          for (int64_t c = 0; c < v.channels; ++c) f.run(c, base + c * v.inner, v.inner);
        }
      }
    });
  });
}

template <typename T>
void fused_batch_norm(KernelContext& ctx) {
  const BatchNormView v = kernels::batch_norm_view(ctx, 0, 1, 2);
  const Tensor& x = ctx.input(0);
  const T* px = x.data<T>();
  const T* gamma = ctx.input(1).data<T>();
  const T* beta = ctx.input(2).data<T>();
  const double eps = ctx.attr<double>("epsilon");
  const int64_t C = v.channels;
  const double n = static_cast<double>(v.per_channel());
  if (v.per_channel() == 0) ctx.fail("x of shape ", x.shape().to_string(), " has no elements per channel");

  std::array<std::vector<double>, 1> s;
  std::vector<double> mean(static_cast<size_t>(C));
  if (v.inner == 1) {
    channel_mean_m2(ctx, v, px, &mean, &s[0]);
  } else {
    channel_sums<1>(ctx, v, SumX<T>{px}, &s);
    for (int64_t c = 0; c < C; ++c) mean[static_cast<size_t>(c)] = s[0][static_cast<size_t>(c)] / n;
    channel_sums<1>(ctx, v, SumSquaredDeviation<T>{px, mean.data()}, &s);
  }

  Tensor& y = ctx.allocate_output(0, x.shape());
  T* pm = ctx.allocate_output(1, Shape{C}).data<T>();
  T* pv = ctx.allocate_output(2, Shape{C}).data<T>();
  std::vector<T> scale(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double var = s[0][i] / n;
    scale[i] = static_cast<T>(kernels::batch_norm_scale(var, static_cast<double>(gamma[c]), eps));
    pm[c] = static_cast<T>(mean[i]);
    pv[c] = static_cast<T>(var);
  }
  struct Apply {
    const T* x;
    T* y;
    const T* mean;
    const T* scale;
    const T* beta;
    void row(int64_t base, int64_t C) const {
      for (int64_t c = 0; c < C; ++c)
        y[base + c] = kernels::batch_norm_y(x[base + c], mean[c], scale[c], beta[c]);
    }
    void run(int64_t c, int64_t base, int64_t len) const {
      const T m = mean[c], a = scale[c], b = beta[c];
      for (int64_t i = 0; i < len; ++i) y[base + i] = kernels::batch_norm_y(x[base + i], m, a, b);
    }
  };
  for_each_element(ctx, v, Apply{px, y.data<T>(), pm, scale.data(), beta});
}

template <typename T>
void fused_batch_norm_grad(KernelContext& ctx) {
  const BatchNormView v = kernels::batch_norm_view(ctx, 1, 2, 3);
  const T* dy = ctx.input(0).data<T>();
  const Tensor& x = ctx.input(1);
  const T* px = x.data<T>();
  const T* gamma = ctx.input(2).data<T>();
  const T* mean = ctx.input(3).data<T>();
  const T* var = ctx.input(4).data<T>();
  const double eps = ctx.attr<double>("epsilon");
  const int64_t C = v.channels;
  const double n = static_cast<double>(v.per_channel());

  std::array<std::vector<double>, 2> s;
  channel_sums<2>(ctx, v, SumDyAndDyX<T>{dy, px, mean}, &s);
  Tensor& dx = ctx.allocate_output(0, x.shape());
  T* dgamma = ctx.allocate_output(1, Shape{C}).data<T>();
  T* dbeta = ctx.allocate_output(2, Shape{C}).data<T>();
  std::vector<T> a(static_cast<size_t>(C)), b(static_cast<size_t>(C)), cc(static_cast<size_t>(C)),
      m(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double vr = static_cast<double>(var[c]);
    const auto k = BatchNormBackwardCoef::make(static_cast<double>(mean[c]), vr,
                                               static_cast<double>(gamma[c]), s[0][i], s[1][i], n, eps);
    a[i] = static_cast<T>(k.a);
    b[i] = static_cast<T>(k.b);
    cc[i] = static_cast<T>(k.c);
    m[i] = mean[c];
    dgamma[c] = static_cast<T>(BatchNormBackwardCoef::dgamma(vr, s[1][i], eps));
    dbeta[c] = static_cast<T>(s[0][i]);
  }
  struct Apply {
    const T* dy;
    const T* x;
    T* dx;
    const T *a, *b, *c, *m;
    void row(int64_t base, int64_t C) const {
      for (int64_t j = 0; j < C; ++j)
        dx[base + j] = kernels::batch_norm_dx(dy[base + j], x[base + j], a[j], b[j], c[j], m[j]);
    }
    void run(int64_t j, int64_t base, int64_t len) const {
      const T aj = a[j], bj = b[j], cj = c[j], mj = m[j];
      for (int64_t i = 0; i < len; ++i)
        dx[base + i] = kernels::batch_norm_dx(dy[base + i], x[base + i], aj, bj, cj, mj);
    }
  };
  for_each_element(ctx, v, Apply{dy, px, dx.data<T>(), a.data(), b.data(), cc.data(), m.data()});
}

}  // namespace

SPIRE_REGISTER_KERNEL("FusedBatchNorm", DeviceType::CPU, fused_batch_norm<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedBatchNorm", DeviceType::CPU, fused_batch_norm<double>, DType::F64);
SPIRE_REGISTER_KERNEL("FusedBatchNormGrad", DeviceType::CPU, fused_batch_norm_grad<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedBatchNormGrad", DeviceType::CPU, fused_batch_norm_grad<double>, DType::F64);

}  // namespace spire::cpu

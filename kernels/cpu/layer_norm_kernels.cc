// CPU kernels for LayerNorm and LayerNormGrad (ops in core/ops/norm_ops.cc),
// f32 and f64. x is seen as [rows, C] (kernels/layer_norm_attrs.h); the
// per-element math is kernels/layer_norm.h, shared with the CUDA kernels.
//   - LayerNorm: rows split over the session's thread pool; each row's mean
//     and biased variance are two passes accumulated in double (also for f32),
//     then y is written from the row's (T) mean and rstd.
//   - LayerNormGrad: one pass per row computes the two row sums (in double),
//     a second writes dx. dgamma and dbeta are column sums over the rows:
//     the rows are cut into blocks whose boundaries depend only on the row
//     count (never on the thread count), each block sums its rows in order
//     into its own partials (double), and the partials are added block by
//     block in a fixed order, so the result is the same for any number of
//     threads.
//   - Row sums go into kLanes interleaved partial sums (element j into lane
//     j % kLanes), added in lane order at the end: independent chains that
//     the compiler vectorizes, where one running sum waits on every
//     addition. The order is fixed, so results do not depend on the thread
//     count either.
//   - Each chunk of rows runs through run_vec (kernels/cpu/vector_loops.h):
//     compiled for the CPU's widest vectors, without FMA contraction (like
//     every run_vec file, CMakeLists.txt), so every copy rounds alike.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_attrs.h"

namespace spire::cpu {
namespace {

using Acc = double;
constexpr int kLanes = 8;

// sum_{j < c} f(j) in kLanes interleaved partial sums, added in lane order.
template <typename F>
Acc lane_sum(int64_t c, F f) {
  Acc lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += f(j + k);
  for (int k = 0; j < c; ++j, ++k) lane[k] += f(j);
  Acc sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lane[k];
  return sum;
}

template <typename T>
void layer_norm_kernel(KernelContext& ctx) {
  const kernels::LayerNormDims d = kernels::layer_norm_dims(ctx);
  const Tensor& x = ctx.input(0);
  const double eps = ctx.attr<double>("epsilon");
  Tensor& y = ctx.allocate_output(0, x.shape());
  Tensor& mean_t = ctx.allocate_output(1, d.stats_shape);
  Tensor& rstd_t = ctx.allocate_output(2, d.stats_shape);
  const T* px = x.data<T>();
  const T* pg = ctx.input(1).data<T>();
  const T* pb = ctx.num_inputs() > 2 ? ctx.input(2).data<T>() : nullptr;
  T* py = y.data<T>();
  T* pm = mean_t.data<T>();
  T* pr = rstd_t.data<T>();
  const int64_t c = d.c;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / c);
  ctx.parallel_for(d.rows, grain, [&](int64_t r0, int64_t r1) {
    run_vec([&] {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xs = px + r * c;
        const Acc mean = lane_sum(c, [&](int64_t j) { return static_cast<Acc>(xs[j]); }) /
                         static_cast<Acc>(c);
        const Acc sq = lane_sum(c, [&](int64_t j) {
          const Acc v = static_cast<Acc>(xs[j]) - mean;
          return v * v;
        });
        const T m = static_cast<T>(mean);
        const T rs = static_cast<T>(kernels::layer_norm_rstd(sq, c, eps));
        pm[r] = m;
        pr[r] = rs;
        T* ys = py + r * c;
        for (int64_t j = 0; j < c; ++j)
          ys[j] = kernels::layer_norm_value(xs[j], m, rs, pg[j], pb ? pb[j] : T(0));
      }
    });
  });
}

template <typename T>
void layer_norm_grad_kernel(KernelContext& ctx) {
  const kernels::LayerNormDims d = kernels::layer_norm_grad_dims(ctx);
  const Tensor& x = ctx.input(1);
  Tensor& dx = ctx.allocate_output(0, x.shape());
  Tensor& dgamma = ctx.allocate_output(1, Shape{d.c});
  Tensor& dbeta = ctx.allocate_output(2, Shape{d.c});
  const T* pdy = ctx.input(0).data<T>();
  const T* px = x.data<T>();
  const T* pg = ctx.input(2).data<T>();
  const T* pm = ctx.input(3).data<T>();
  const T* pr = ctx.input(4).data<T>();
  T* pdx = dx.data<T>();
  const int64_t c = d.c, rows = d.rows;
  const int64_t block_rows = kernels::layer_norm_grad_block_rows(rows);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  // Per block: C partial sums of norm * dy, then C of dy.
  std::vector<Acc> partial(static_cast<size_t>(blocks * 2 * c), Acc(0));
  ctx.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    run_vec([&] {
      for (int64_t blk = b0; blk < b1; ++blk) {
        Acc* pgam = partial.data() + blk * 2 * c;
        Acc* pbet = pgam + c;
        const int64_t end = std::min(rows, (blk + 1) * block_rows);
        for (int64_t r = blk * block_rows; r < end; ++r) {
          const T* xs = px + r * c;
          const T* dys = pdy + r * c;
          const T m = pm[r], rs = pr[r];
          // kernels::LayerNormGradSums' two sums, in lanes.
          const Acc dnorm =
              lane_sum(c, [&](int64_t j) { return kernels::layer_norm_dnorm<Acc>(pg[j], dys[j]); });
          const Acc dnorm_norm = lane_sum(c, [&](int64_t j) {
            return kernels::layer_norm_dnorm<Acc>(pg[j], dys[j]) *
                   static_cast<Acc>(kernels::layer_norm_norm(xs[j], m, rs));
          });
          const Acc mean_dnorm = dnorm / static_cast<Acc>(c);
          const Acc mean_dnorm_norm = dnorm_norm / static_cast<Acc>(c);
          T* dxs = pdx + r * c;
          for (int64_t j = 0; j < c; ++j) {
            dxs[j] =
                kernels::layer_norm_dx(xs[j], dys[j], pg[j], m, rs, mean_dnorm, mean_dnorm_norm);
            pgam[j] +=
                static_cast<Acc>(kernels::layer_norm_norm(xs[j], m, rs)) * static_cast<Acc>(dys[j]);
            pbet[j] += static_cast<Acc>(dys[j]);
          }
        }
      }
    });
  });
  T* pdg = dgamma.data<T>();
  T* pdb = dbeta.data<T>();
  std::vector<Acc> sum_g(static_cast<size_t>(c), Acc(0)), sum_b(static_cast<size_t>(c), Acc(0));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const Acc* pgam = partial.data() + blk * 2 * c;
    for (int64_t j = 0; j < c; ++j) {
      sum_g[static_cast<size_t>(j)] += pgam[j];
      sum_b[static_cast<size_t>(j)] += pgam[c + j];
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    pdg[j] = static_cast<T>(sum_g[static_cast<size_t>(j)]);
    pdb[j] = static_cast<T>(sum_b[static_cast<size_t>(j)]);
  }
}

}  // namespace

SPIRE_REGISTER_KERNEL("LayerNorm", DeviceType::CPU, layer_norm_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("LayerNorm", DeviceType::CPU, layer_norm_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("LayerNormGrad", DeviceType::CPU, layer_norm_grad_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("LayerNormGrad", DeviceType::CPU, layer_norm_grad_kernel<double>, DType::F64);

}  // namespace spire::cpu

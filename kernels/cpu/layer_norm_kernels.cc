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
//     count either. Several such sums (of kRows rows, and both of the
//     backward's) run in one loop, each in its own lanes: more chains in
//     flight, the same bits as one sum at a time.
//   - Each chunk of rows runs through run_vec (kernels/cpu/vector_loops.h):
//     compiled for the CPU's widest vectors, without FMA contraction (like
//     every run_vec file, CMakeLists.txt), so every copy rounds alike.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/layer_norm.h"
#include "kernels/layer_norm_attrs.h"

namespace spire::cpu {
namespace {

using Acc = double;
constexpr int kLanes = 8;

// Rows per group of the row loops: their sums share one loop over the columns.
constexpr int kRows = 4;

// kLanes values in one vector (GCC's and clang's vector extension), lowered to the registers
// of the instruction set run_vec compiled the caller for: kLanes doubles are one zmm, two ymm
// or four xmm. Lane l of a row sum takes the elements l, l + kLanes, ... Passed by reference
// only: no calling convention depends on the instruction set.
template <typename E>
struct LanesOf {
  typedef E type __attribute__((vector_size(kLanes * sizeof(E))));
};
using AccLanes = LanesOf<Acc>::type;

// p[0..kLanes) widened to Acc.
template <typename T>
inline void load_lanes(const T* p, AccLanes& out) {
  typename LanesOf<T>::type v;
  std::memcpy(&v, p, sizeof(v));
  out = __builtin_convertvector(v, AccLanes);
}

// Every lane of v set to e.
template <typename E>
inline void splat(E e, typename LanesOf<E>::type& v) {
  for (int l = 0; l < kLanes; ++l) v[l] = e;
}

// out[s] for s < kSums: sums over the columns j < c, each in kLanes partial sums (element j
// into lane j % kLanes) added in lane order. add_lanes(j, lane) adds the columns j..j+kLanes
// of every sum into its vector of lanes; add_one(j, v) gives column j's value of every sum
// (the last c mod kLanes columns, into lanes 0, 1, ...). Each sum has the bits of a plain
// loop over its lanes; the kSums chains of additions overlap.
template <int kSums, typename AddLanes, typename AddOne>
void lane_sums(int64_t c, AddLanes add_lanes, AddOne add_one, Acc (&out)[kSums]) {
  AccLanes lane[kSums];
  for (int s = 0; s < kSums; ++s) lane[s] = AccLanes{};
  int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes) add_lanes(j, lane);
  Acc part[kSums][kLanes];
  std::memcpy(part, lane, sizeof(part));
  for (int k = 0; j < c; ++j, ++k) {
    Acc v[kSums];
    add_one(j, v);
    for (int s = 0; s < kSums; ++s) part[s][k] += v[s];
  }
  for (int s = 0; s < kSums; ++s) {
    Acc sum = 0;
    for (int k = 0; k < kLanes; ++k) sum += part[s][k];
    out[s] = sum;
  }
}

// f(r, n) for the rows r of [r0, r1): groups of kRows rows (n = kRows), then single rows.
template <typename F>
void row_groups(int64_t r0, int64_t r1, F f) {
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) f(r, std::integral_constant<int, kRows>());
  for (; r < r1; ++r) f(r, std::integral_constant<int, 1>());
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
      row_groups(r0, r1, [&](int64_t rg, auto rows) {
        constexpr int kN = decltype(rows)::value;
        const T* xs = px + rg * c;
        Acc mean[kN], sq[kN];
        lane_sums(
            c,
            [&](int64_t j, AccLanes (&lane)[kN]) {
#pragma GCC unroll 4
              for (int s = 0; s < kN; ++s) {
                AccLanes v;
                load_lanes(xs + s * c + j, v);
                lane[s] += v;
              }
            },
            [&](int64_t j, Acc (&v)[kN]) {
              for (int s = 0; s < kN; ++s) v[s] = static_cast<Acc>(xs[s * c + j]);
            },
            mean);
        for (int s = 0; s < kN; ++s) mean[s] /= static_cast<Acc>(c);
        lane_sums(
            c,
            [&](int64_t j, AccLanes (&lane)[kN]) {
#pragma GCC unroll 4
              for (int s = 0; s < kN; ++s) {
                AccLanes v;
                load_lanes(xs + s * c + j, v);
                v -= mean[s];
                lane[s] += v * v;
              }
            },
            [&](int64_t j, Acc (&v)[kN]) {
              for (int s = 0; s < kN; ++s) {
                const Acc d = static_cast<Acc>(xs[s * c + j]) - mean[s];
                v[s] = d * d;
              }
            },
            sq);
        for (int s = 0; s < kN; ++s) {
          const int64_t r = rg + s;
          const T m = static_cast<T>(mean[s]);
          const T rs = static_cast<T>(kernels::layer_norm_rstd(sq[s], c, eps));
          pm[r] = m;
          pr[r] = rs;
          const T* xr = px + r * c;
          T* ys = py + r * c;
          for (int64_t j = 0; j < c; ++j)
            ys[j] = kernels::layer_norm_value(xr[j], m, rs, pg[j], pb ? pb[j] : T(0));
        }
      });
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
        row_groups(blk * block_rows, end, [&](int64_t rg, auto group) {
          constexpr int kN = decltype(group)::value;
          // kernels::LayerNormGradSums' two sums of each row, in lanes: sum 2i is row i's
          // sum(dnorm), sum 2i + 1 its sum(dnorm * norm).
          Acc sums[2 * kN];
          lane_sums(
              c,
              [&](int64_t j, AccLanes (&lane)[2 * kN]) {
                AccLanes g;
                load_lanes(pg + j, g);
#pragma GCC unroll 4
                for (int i = 0; i < kN; ++i) {
                  const int64_t r = rg + i, e = r * c + j;
                  AccLanes dy, norm;
                  load_lanes(pdy + e, dy);
                  typename LanesOf<T>::type x, m, rs;
                  std::memcpy(&x, px + e, sizeof(x));
                  splat(pm[r], m);
                  splat(pr[r], rs);
                  // kernels::layer_norm_norm and layer_norm_dnorm, kLanes at a time (written
                  // out: those functions would take vectors by value).
                  const typename LanesOf<T>::type nt = (x - m) * rs;
                  norm = __builtin_convertvector(nt, AccLanes);
                  const AccLanes dnorm = g * dy;
                  lane[2 * i] += dnorm;
                  lane[2 * i + 1] += dnorm * norm;
                }
              },
              [&](int64_t j, Acc (&v)[2 * kN]) {
                for (int i = 0; i < kN; ++i) {
                  const int64_t r = rg + i, e = r * c + j;
                  const Acc dnorm = kernels::layer_norm_dnorm<Acc>(pg[j], pdy[e]);
                  v[2 * i] = dnorm;
                  v[2 * i + 1] = dnorm * static_cast<Acc>(kernels::layer_norm_norm(px[e], pm[r], pr[r]));
                }
              },
              sums);
          for (int i = 0; i < kN; ++i) {
            const int64_t r = rg + i;
            const T* xs = px + r * c;
            const T* dys = pdy + r * c;
            const T m = pm[r], rs = pr[r];
            const Acc mean_dnorm = sums[2 * i] / static_cast<Acc>(c);
            const Acc mean_dnorm_norm = sums[2 * i + 1] / static_cast<Acc>(c);
            T* dxs = pdx + r * c;
            for (int64_t j = 0; j < c; ++j) {
              dxs[j] =
                  kernels::layer_norm_dx(xs[j], dys[j], pg[j], m, rs, mean_dnorm, mean_dnorm_norm);
              pgam[j] += static_cast<Acc>(kernels::layer_norm_norm(xs[j], m, rs)) *
                         static_cast<Acc>(dys[j]);
              pbet[j] += static_cast<Acc>(dys[j]);
            }
          }
        });
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

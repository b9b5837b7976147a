// CPU kernels for MatMul and BatchMatMul (ops registered in core/ops/nn_ops.cc), f32 and
// f64. Both are thin wrappers over the blocked GEMM of kernels/cpu/gemm.h: MatMul is one
// GEMM; BatchMatMul runs one GEMM per (broadcast) batch entry, or a single tall GEMM when
// only `a` carries batch dimensions. Both use the session's thread pool: the GEMMs split their
// output into per-thread panels, and many small batch entries are spread over the threads.
#include <algorithm>

#include "core/kernel_registry.h"
#include "kernels/cpu/gemm.h"
#include "kernels/matmul_shapes.h"

namespace spire::cpu {
namespace {

template <typename T>
void matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const kernels::MatMulDims d = kernels::matmul_dims(ctx);
  Tensor& c = ctx.allocate_output(0, Shape{d.m, d.n});
  gemm(d.ta, d.tb, d.m, d.n, d.k, T(1), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), T(0),
       c.data<T>(), d.n, ctx.thread_pool());
}

// Offsets (in matrices) of operand `s`'s batch entry for each entry of the broadcast batch
// shape `out` (s is right-aligned against out; size-1 dims repeat).
std::vector<int64_t> batch_offsets(const std::vector<int64_t>& s, const std::vector<int64_t>& out) {
  const size_t r = out.size();
  int64_t total = 1;
  for (int64_t d : out) total *= d;
  std::vector<int64_t> offs(static_cast<size_t>(total), 0);
  const std::vector<int64_t> stride = kernels::batch_strides(s, out);
  std::vector<int64_t> idx(r, 0);
  for (int64_t t = 0; t < total; ++t) {
    int64_t o = 0;
    for (size_t i = 0; i < r; ++i) o += idx[i] * stride[i];
    offs[static_cast<size_t>(t)] = o;
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < out[i]) break;
      idx[i] = 0;
    }
  }
  return offs;
}

template <typename T>
void batch_matmul_kernel(KernelContext& ctx) {
  const kernels::BatchMatMulShapes s = kernels::batch_matmul_shapes(ctx);
  const bool ta = s.d.ta, tb = s.d.tb;
  const int64_t m = s.d.m, n = s.d.n, k = s.d.k;
  const int64_t ar = s.ar, ac = s.ac, br = s.br, bc = s.bc;
  Tensor& c = ctx.allocate_output(0, s.out_shape());
  const T* pa = ctx.input(0).data<T>();
  const T* pb = ctx.input(1).data<T>();
  T* pc = c.data<T>();
  const int64_t total = s.total;
  if (total == 0 || m == 0 || n == 0) return;
  if (!ta && s.count_b == 1 && s.count_a == total) {
    // b is shared by every batch entry: one (total * m) x n GEMM.
    gemm(false, tb, total * m, n, k, T(1), pa, ac, pb, bc, T(0), pc, n, ctx.thread_pool());
    return;
  }
  std::vector<int64_t> oa = batch_offsets(s.batch_a, s.batch.dims()),
                       ob = batch_offsets(s.batch_b, s.batch.dims());
  auto entry = [&](int64_t t, ThreadPool* pool) {
    const size_t i = static_cast<size_t>(t);
    gemm(ta, tb, m, n, k, T(1), pa + oa[i] * ar * ac, ac, pb + ob[i] * br * bc, bc, T(0),
         pc + t * m * n, n, pool);
  };
  // Entries big enough to split run one after another on all threads; small ones are spread
  // over the threads whole (same per-entry arithmetic either way).
  const int64_t macs = m * n * k;
  if (total < ctx.num_threads() || macs >= (int64_t{1} << 22)) {
    for (int64_t t = 0; t < total; ++t) entry(t, ctx.thread_pool());
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(macs, 1));
  ctx.parallel_for(total, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) entry(t, nullptr);
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, matmul_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, matmul_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, batch_matmul_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, batch_matmul_kernel<double>, DType::F64);

}  // namespace spire::cpu

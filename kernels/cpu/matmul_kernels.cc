// CPU kernels for MatMul and BatchMatMul (ops registered in core/ops/nn_ops.cc), f32, f64,
// f16 and bf16. All are thin wrappers over the blocked GEMM of kernels/cpu/gemm.h: MatMul is
// one GEMM; BatchMatMul runs one GEMM per (broadcast) batch entry, or a single tall GEMM when
// only `a` carries batch dimensions. Both use the session's thread pool: the GEMMs split their
// output into per-thread panels, and many small batch entries are spread over the threads.
//
// f16 / bf16 (mixed precision, docs/training.md): the CPU has no 16-bit arithmetic here, so
// both operands are widened to f32 (exact), multiplied by the f32 GEMM (f32 accumulation, as
// cuBLAS's CUBLAS_COMPUTE_32F) and the product is rounded to the 16-bit dtype once, to nearest
// even. The result equals the f32 product of the same 16-bit inputs, rounded. On CPUs with
// AVX512-BF16 a bf16 MatMul multiplies its operands as they are (kernels/cpu/gemm_bf16.h):
// the same exact products, summed in f32 in another order, with denormals flushed to zero.
// An f32 MatMul with compute_dtype f16 / bf16 (layers/mixed_precision.h's autocast_matmul)
// gives exactly the Cast -> 16-bit MatMul -> Cast graph's result, without the casts' passes.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/fused_program.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/functors.h"
#include "kernels/matmul_shapes.h"

namespace spire::cpu {
namespace {

// The 16-bit elements of an f16 / bf16 tensor widened to f32 (exact).
std::vector<float> widen(KernelContext& ctx, const Tensor& t) {
  const int64_t n = t.num_elements();
  std::vector<float> out(static_cast<size_t>(n));
  const uint16_t* p = static_cast<const uint16_t*>(t.raw_data());
  const functors::FromHalf<float> f{t.dtype() == DType::BF16};
  float* o = out.data();
  ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (t.dtype() == DType::BF16)
      unary_vec(p + b, o + b, e - b, [](uint16_t h) { return functors::bf16_bits_to_float(h); });
    else
      for (int64_t i = b; i < e; ++i) o[i] = f(p[i]);
  });
  return out;
}

// Rounds `src` (t's element count) into the f16 / bf16 tensor t.
void narrow(KernelContext& ctx, const std::vector<float>& src, Tensor& t) {
  uint16_t* p = static_cast<uint16_t*>(t.raw_data());
  const functors::ToHalf f{t.dtype() == DType::BF16};
  const float* s = src.data();
  ctx.parallel_for(t.num_elements(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (t.dtype() == DType::BF16)
      unary_vec(s + b, p + b, e - b, [](float x) { return functors::float_to_bf16_bits(x); });
    else
      for (int64_t i = b; i < e; ++i) p[i] = f(s[i]);
  });
}

// f32 values rounded to f16 / bf16 and back (exactly what a Cast to the 16-bit dtype and
// back gives), from `src` into `dst` (n elements; dst may be src).
void round_through(KernelContext& ctx, DType half, const float* src, float* dst, int64_t n) {
  ctx.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (half == DType::BF16) {
      unary_vec(src + b, dst + b, e - b, [](float x) {
        return functors::bf16_bits_to_float(functors::float_to_bf16_bits(x));
      });
    } else {
      for (int64_t i = b; i < e; ++i) dst[i] = functors::half_bits_to_float(functors::float_to_half_bits(src[i]));
    }
  });
}

// MatMul of f32 inputs with compute_dtype f16 / bf16: exactly the product of the 16-bit
// Casts of a and b (the kernel above), rounded to 16 bits, as f32. With AVX512-BF16 the bf16
// GEMM rounds the operands while it packs them; otherwise they are rounded into copies and
// multiplied by the f32 GEMM (as the widening path does with the Casts' values).
void mixed_matmul(KernelContext& ctx, DType half, const kernels::MatMulDims& d, const Tensor& a,
                  const Tensor& b, float* pc) {
  const int64_t c_elements = d.m * d.n;
  if (half == DType::BF16 && gemm_bf16_supported() && d.k > 0) {
    // Operands rounded as they are packed, the product as each tile is finished.
    gemm_bf16(d.ta, d.tb, d.m, d.n, d.k, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), pc,
              d.n, ctx.thread_pool(), /*round_output=*/true);
    return;
  }
  std::vector<float> ra(static_cast<size_t>(a.num_elements())), rb(static_cast<size_t>(b.num_elements()));
  round_through(ctx, half, a.data<float>(), ra.data(), a.num_elements());
  round_through(ctx, half, b.data<float>(), rb.data(), b.num_elements());
  gemm(d.ta, d.tb, d.m, d.n, d.k, 1.0f, ra.data(), a.dim(1), rb.data(), b.dim(1), 0.0f, pc, d.n,
       ctx.thread_pool());
  round_through(ctx, half, pc, pc, c_elements);
}

template <typename T>
void matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const kernels::MatMulDims d = kernels::matmul_dims(ctx);
  Tensor& c = ctx.allocate_output(0, Shape{d.m, d.n});
  if constexpr (std::is_same_v<T, float>) {
    const DType half = ctx.attr<DType>("compute_dtype");
    if (half != DType::Invalid) return mixed_matmul(ctx, half, d, a, b, c.data<float>());
  }
  gemm(d.ta, d.tb, d.m, d.n, d.k, T(1), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), T(0),
       c.data<T>(), d.n, ctx.thread_pool());
}

// FusedMatMul: the MatMul, its product then rewritten by the node's epilogue
// (kernels/cpu/fused_program.h) block by block as the GEMM finishes each.
template <typename T>
void fused_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const kernels::MatMulDims d = in_product(ctx, [&] { return kernels::matmul_dims(ctx); });
  Epilogue<T> epilogue(ctx, Shape{d.m, d.n}, 2);
  T* pc = epilogue.product();
  epilogue.bind_product(pc);
  bool blocks_done = false;  // the GEMM ran the epilogue on each block
  bool mixed = false;
  if constexpr (std::is_same_v<T, float>) {
    const DType half = ctx.attr<DType>("compute_dtype");
    if (half != DType::Invalid) {
      mixed_matmul(ctx, half, d, a, b, pc);  // rounds the whole product after the GEMM
      mixed = true;
    }
  }
  if (!mixed) {
    GemmEpilogue finished;
    if (epilogue.in_place()) {
      finished = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) { epilogue.block(i0, i1, j0, j1); };
      blocks_done = true;
    }
    gemm(d.ta, d.tb, d.m, d.n, d.k, T(1), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), T(0), pc,
         d.n, ctx.thread_pool(), finished);
  }
  if (blocks_done) return;
  if (epilogue.in_place()) epilogue.run_all(ctx);
  else epilogue.finish(ctx);
}

// MatMul of f16 / bf16 inputs: widened to f32, one f32 GEMM, the product rounded.
void half_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const kernels::MatMulDims d = kernels::matmul_dims(ctx);
  Tensor& c = ctx.allocate_output(0, Shape{d.m, d.n});
  std::vector<float> fc(static_cast<size_t>(d.m * d.n));
  if (a.dtype() == DType::BF16 && gemm_bf16_supported()) {
    gemm_bf16(d.ta, d.tb, d.m, d.n, d.k, static_cast<const uint16_t*>(a.raw_data()), a.dim(1),
              static_cast<const uint16_t*>(b.raw_data()), b.dim(1), fc.data(), d.n,
              ctx.thread_pool());
    narrow(ctx, fc, c);
    return;
  }
  const std::vector<float> fa = widen(ctx, a), fb = widen(ctx, b);
  gemm(d.ta, d.tb, d.m, d.n, d.k, 1.0f, fa.data(), a.dim(1), fb.data(), b.dim(1), 0.0f,
       fc.data(), d.n, ctx.thread_pool());
  narrow(ctx, fc, c);
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

// The GEMMs of a BatchMatMul with shapes `s` on operands pa, pb into pc (s.out_shape()).
template <typename T>
void batch_matmul(KernelContext& ctx, const kernels::BatchMatMulShapes& s, const T* pa,
                  const T* pb, T* pc) {
  const bool ta = s.d.ta, tb = s.d.tb;
  const int64_t m = s.d.m, n = s.d.n, k = s.d.k;
  const int64_t ar = s.ar, ac = s.ac, br = s.br, bc = s.bc;
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

template <typename T>
void batch_matmul_kernel(KernelContext& ctx) {
  const kernels::BatchMatMulShapes s = kernels::batch_matmul_shapes(ctx);
  Tensor& c = ctx.allocate_output(0, s.out_shape());
  batch_matmul<T>(ctx, s, ctx.input(0).data<T>(), ctx.input(1).data<T>(), c.data<T>());
}

// BatchMatMul of f16 / bf16 inputs: widened to f32, the f32 GEMMs, the products rounded.
void half_batch_matmul_kernel(KernelContext& ctx) {
  const kernels::BatchMatMulShapes s = kernels::batch_matmul_shapes(ctx);
  Tensor& c = ctx.allocate_output(0, s.out_shape());
  const std::vector<float> fa = widen(ctx, ctx.input(0)), fb = widen(ctx, ctx.input(1));
  std::vector<float> fc(static_cast<size_t>(c.num_elements()));
  batch_matmul<float>(ctx, s, fa.data(), fb.data(), fc.data());
  narrow(ctx, fc, c);
}

}  // namespace

SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, matmul_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, matmul_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("FusedMatMul", DeviceType::CPU, fused_matmul_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("FusedMatMul", DeviceType::CPU, fused_matmul_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, batch_matmul_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, batch_matmul_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, half_matmul_kernel, DType::F16);
SPIRE_REGISTER_KERNEL("MatMul", DeviceType::CPU, half_matmul_kernel, DType::BF16);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, half_batch_matmul_kernel, DType::F16);
SPIRE_REGISTER_KERNEL("BatchMatMul", DeviceType::CPU, half_batch_matmul_kernel, DType::BF16);

namespace {
// MatMul's epilogue op (core/fusion.h): what the fusion pass may make of a MatMul.
struct EpilogueRegistrar {
  EpilogueRegistrar() {
    for (DType t : {DType::F32, DType::F64}) register_epilogue(DeviceType::CPU, "MatMul", t, "FusedMatMul");
  }
} epilogue_registrar;
}  // namespace

}  // namespace spire::cpu

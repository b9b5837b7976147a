// CUDA kernels for MatMul and BatchMatMul (ops registered in core/ops/nn_ops.cc), f32, f64,
// f16 and bf16 (the dtypes of the CPU kernels in kernels/cpu/matmul_kernels.cc), through
// cuBLAS on the device context's handle (bound to its stream).
//
// Layout: tensors are row-major, cuBLAS is column-major. A row-major [r, c] matrix is the
// column-major [c, r] matrix of its transpose, so the row-major C = op(A) op(B) is computed
// as the column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, A second, the dims (n, m, k),
// each operand's own transpose flag, and leading dimensions equal to the row-major column
// counts.
//
// Precision: f32 uses CUBLAS_COMPUTE_32F (plain FP32 math; the context creates the handle
// with cublasCreate's CUBLAS_DEFAULT_MATH and nobody changes it, so no TF32) unless the
// session allows TF32 (ctx.allow_tf32()), then CUBLAS_COMPUTE_32F_FAST_TF32. The compute
// type is passed per call, so the shared handle's state is never touched. f64 uses
// CUBLAS_COMPUTE_64F. f16 and bf16 (mixed precision) pass CUDA_R_16F / CUDA_R_16BF operands
// and output with CUBLAS_COMPUTE_32F and f32 alpha/beta: f32 accumulation on the tensor
// cores, the product rounded to the 16-bit dtype once, as the CPU kernel (which widens the
// operands to f32 around its own GEMM).
//
// An f32 MatMul with compute_dtype f16 / bf16 (one mixed-precision node for the Cast ->
// MatMul -> Cast of autocast_matmul) converts its operands into 16-bit scratch copies, runs
// the 16-bit GEMM and widens the product into its output.
//
// FusedMatMul (f32, f64; made by the fusion pass, core/fusion.h) computes the product into its
// output and rewrites it there with its epilogue program (kernels/cuda/fused_program.h).
//
// Empty results return at once; a sum over an empty K writes zeros (cudaMemsetAsync) without
// calling cuBLAS (whose leading-dimension rules reject zero-sized operands).
//
// BatchMatMul broadcasts batch dims like the CPU (NumPy rules, a rank-2 operand is shared):
//  - b shared by every entry and a not transposed: one tall (batch * m) x n GEMM, as on the
//    CPU;
//  - each operand either has the full batch or a single matrix: one strided-batched GEMM
//    (stride 0 for the shared operand);
//  - anything else (e.g. [2, 1, m, k] x [3, k, n]): a small kernel writes the per-entry
//    operand pointers into scratch memory on the device, then one pointer-array batched
//    GEMM.
// Batches are issued in chunks of at most 65535 entries (cuBLAS grid limits on older GPUs).
#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cuda/fused_program.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"
#include "kernels/matmul_shapes.h"

namespace spire::cuda {
namespace {

constexpr int64_t kMaxBatchChunk = 65535;
constexpr int kMaxBatchRank = 8;

// Tags of the 16-bit dtypes (stored as uint16_t).
struct F16Tag {};
struct BF16Tag {};

// Per element type T (float, double, F16Tag, BF16Tag): the stored element (Storage), the
// type of alpha and beta (Scalar), the cuBLAS data type and compute type.
template <typename T>
struct GemmType;
template <>
struct GemmType<float> {
  using Storage = float;
  using Scalar = float;
  static constexpr cudaDataType_t kData = CUDA_R_32F;
  // TF32 tensor cores for f32 only when the session allows it.
  static cublasComputeType_t compute(const KernelContext& ctx) {
    return ctx.allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
};
template <>
struct GemmType<double> {
  using Storage = double;
  using Scalar = double;
  static constexpr cudaDataType_t kData = CUDA_R_64F;
  static cublasComputeType_t compute(const KernelContext&) { return CUBLAS_COMPUTE_64F; }
};
template <>
struct GemmType<F16Tag> {
  using Storage = uint16_t;
  using Scalar = float;
  static constexpr cudaDataType_t kData = CUDA_R_16F;
  static cublasComputeType_t compute(const KernelContext&) { return CUBLAS_COMPUTE_32F; }
};
template <>
struct GemmType<BF16Tag> {
  using Storage = uint16_t;
  using Scalar = float;
  static constexpr cudaDataType_t kData = CUDA_R_16BF;
  static cublasComputeType_t compute(const KernelContext&) { return CUBLAS_COMPUTE_32F; }
};

template <typename T>
using StorageOf = typename GemmType<T>::Storage;

// The elements of `t` as T's storage (16-bit dtypes have no C++ type, hence raw_data).
template <typename T>
const StorageOf<T>* elements(const Tensor& t) {
  return static_cast<const StorageOf<T>*>(t.raw_data());
}
template <typename T>
StorageOf<T>* mutable_elements(Tensor& t) {
  return static_cast<StorageOf<T>*>(t.raw_data());
}

int to_int(const KernelContext& ctx, int64_t v, const char* what) {
  if (v > INT_MAX) ctx.fail(what, " ", v, " exceeds the range of cuBLAS (int)");
  return static_cast<int>(v);
}

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The operands of one row-major GEMM C[m, n] = op(A) op(B), with the row-major column counts
// of A, B and C as leading dimensions (all dims positive).
struct GemmDims {
  bool ta, tb;
  int m, n, k;
  int lda, ldb, ldc;
};

GemmDims gemm_dims(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   int64_t lda, int64_t ldb, int64_t ldc) {
  GemmDims d;
  d.ta = ta, d.tb = tb;
  d.m = to_int(ctx, m, "rows"), d.n = to_int(ctx, n, "columns");
  d.k = to_int(ctx, k, "inner dimension");
  d.lda = to_int(ctx, lda, "leading dimension"), d.ldb = to_int(ctx, ldb, "leading dimension");
  d.ldc = to_int(ctx, ldc, "leading dimension");
  return d;
}

template <typename T, typename S = StorageOf<T>>
void gemm(const KernelContext& ctx, CudaContext& cc, const GemmDims& d, const S* a, const S* b,
          S* c) {
  using Scalar = typename GemmType<T>::Scalar;
  const Scalar one = Scalar(1), zero = Scalar(0);
  const cudaDataType_t dt = GemmType<T>::kData;
  SPIRE_CUBLAS_CHECK(cublasGemmEx(cc.cublas(), op(d.tb), op(d.ta), d.n, d.m, d.k, &one, b, dt,
                                  d.ldb, a, dt, d.lda, &zero, c, dt, d.ldc,
                                  GemmType<T>::compute(ctx), CUBLAS_GEMM_DEFAULT));
}

template <typename T, typename S = StorageOf<T>>
void gemm_strided_batched(const KernelContext& ctx, CudaContext& cc, const GemmDims& d, const S* a,
                          int64_t stride_a, const S* b, int64_t stride_b, S* c, int64_t stride_c,
                          int64_t batch) {
  using Scalar = typename GemmType<T>::Scalar;
  const Scalar one = Scalar(1), zero = Scalar(0);
  const cudaDataType_t dt = GemmType<T>::kData;
  for (int64_t t0 = 0; t0 < batch; t0 += kMaxBatchChunk) {
    const int count = static_cast<int>(std::min(kMaxBatchChunk, batch - t0));
    SPIRE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cc.cublas(), op(d.tb), op(d.ta), d.n, d.m, d.k, &one, b + t0 * stride_b, dt, d.ldb,
        stride_b, a + t0 * stride_a, dt, d.lda, stride_a, &zero, c + t0 * stride_c, dt, d.ldc,
        stride_c, count, GemmType<T>::compute(ctx), CUBLAS_GEMM_DEFAULT));
  }
}

// f32 -> f16 / bf16 bits and back, with the functors of the Cast kernels.
__global__ void to_half_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n,
                               bool bf16) {
  const functors::ToHalf f{bf16};
  SPIRE_GRID_STRIDE_LOOP(i, n) { y[i] = f(x[i]); }
}
__global__ void from_half_kernel(const uint16_t* __restrict__ x, float* __restrict__ y, int64_t n,
                                 bool bf16) {
  const functors::FromHalf<float> f{bf16};
  SPIRE_GRID_STRIDE_LOOP(i, n) { y[i] = f(x[i]); }
}

// An f32 MatMul with compute_dtype f16 / bf16: the operands converted into 16-bit scratch
// copies, the 16-bit GEMM (f32 accumulation, the product rounded to 16 bits), the product
// widened into the f32 output: the Cast -> MatMul -> Cast graph's kernels in one node.
template <typename Half>
void mixed_matmul(KernelContext& ctx, CudaContext& cc, const kernels::MatMulDims& md,
                  const Tensor& a, const Tensor& b, float* c) {
  const bool bf16 = std::is_same_v<Half, BF16Tag>;
  const int64_t na = a.num_elements(), nb = b.num_elements(), nc = md.m * md.n;
  Scratch ha(cc, sizeof(uint16_t) * static_cast<size_t>(na));
  Scratch hb(cc, sizeof(uint16_t) * static_cast<size_t>(nb));
  Scratch hc(cc, sizeof(uint16_t) * static_cast<size_t>(nc));
  to_half_kernel<<<blocks_for(cc, na), kThreads, 0, cc.stream()>>>(a.data<float>(),
                                                                   ha.as<uint16_t>(), na, bf16);
  SPIRE_CUDA_LAUNCH_CHECK();
  to_half_kernel<<<blocks_for(cc, nb), kThreads, 0, cc.stream()>>>(b.data<float>(),
                                                                   hb.as<uint16_t>(), nb, bf16);
  SPIRE_CUDA_LAUNCH_CHECK();
  gemm<Half>(ctx, cc, gemm_dims(ctx, md.ta, md.tb, md.m, md.n, md.k, a.dim(1), b.dim(1), md.n),
             ha.as<uint16_t>(), hb.as<uint16_t>(), hc.as<uint16_t>());
  from_half_kernel<<<blocks_for(cc, nc), kThreads, 0, cc.stream()>>>(hc.as<uint16_t>(), c,
                                                                     nc, bf16);
  SPIRE_CUDA_LAUNCH_CHECK();
}

// The product op(a) op(b) (dims md) into c, on ctx's device.
template <typename T>
void matmul_into(KernelContext& ctx, const kernels::MatMulDims& md, const Tensor& a, const Tensor& b,
                 StorageOf<T>* c) {
  using S = StorageOf<T>;
  const int64_t m = md.m, n = md.n, k = md.k;
  if (m == 0 || n == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (k == 0) {
    SPIRE_CUDA_CHECK(cudaMemsetAsync(c, 0, m * n * sizeof(S), cc.stream()));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const DType half = ctx.attr<DType>("compute_dtype");
    if (half == DType::BF16) return mixed_matmul<BF16Tag>(ctx, cc, md, a, b, c);
    if (half == DType::F16) return mixed_matmul<F16Tag>(ctx, cc, md, a, b, c);
  }
  gemm<T>(ctx, cc, gemm_dims(ctx, md.ta, md.tb, m, n, k, a.dim(1), b.dim(1), n), elements<T>(a),
          elements<T>(b), c);
}

template <typename T>
void matmul_kernel(KernelContext& ctx) {
  const kernels::MatMulDims md = kernels::matmul_dims(ctx);
  Tensor& c = ctx.allocate_output(0, Shape{md.m, md.n});
  matmul_into<T>(ctx, md, ctx.input(0), ctx.input(1), mutable_elements<T>(c));
}

// FusedMatMul: the product, then the node's epilogue program over it (in output 0 when the
// program keeps the product's shape: a bias, an activation).
template <typename T>
void fused_matmul_kernel(KernelContext& ctx) {
  const kernels::MatMulDims md = kernels::in_product(ctx, [&] { return kernels::matmul_dims(ctx); });
  CudaEpilogue<T> epilogue(ctx, Shape{md.m, md.n}, 2);
  matmul_into<T>(ctx, md, ctx.input(0), ctx.input(1), epilogue.product());
  epilogue.finish(ctx);
}

// Output batch dims and, per operand, its stride in matrices along each of them (0 where
// the operand is broadcast; kernels::batch_strides), as in the CPU kernel's batch_offsets.
struct BatchPointers {
  int rank = 0;
  int64_t dims[kMaxBatchRank] = {};
  int64_t stride_a[kMaxBatchRank] = {};
  int64_t stride_b[kMaxBatchRank] = {};
};

// Entry t of the broadcast batch: pa[t], pb[t], pc[t] point at its matrices.
template <typename T>
__global__ void batch_pointers_kernel(BatchPointers bp, int64_t total, const T* a, int64_t a_size,
                                      const T* b, int64_t b_size, T* c, int64_t c_size,
                                      const T** pa, const T** pb, T** pc) {
  SPIRE_GRID_STRIDE_LOOP(t, total) {
    int64_t rest = t, oa = 0, ob = 0;
    for (int d = bp.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % bp.dims[d];
      rest /= bp.dims[d];
      oa += idx * bp.stride_a[d];
      ob += idx * bp.stride_b[d];
    }
    pa[t] = a + oa * a_size;
    pb[t] = b + ob * b_size;
    pc[t] = c + t * c_size;
  }
}

template <typename T>
void batch_matmul_kernel(KernelContext& ctx) {
  using S = StorageOf<T>;
  const kernels::BatchMatMulShapes s = kernels::batch_matmul_shapes(ctx);
  Tensor& c = ctx.allocate_output(0, s.out_shape());
  const Shape& batch = s.batch;
  const int64_t total = s.total;
  const bool ta = s.d.ta, tb = s.d.tb;
  const int64_t m = s.d.m, n = s.d.n, k = s.d.k;
  const int64_t ar = s.ar, ac = s.ac, br = s.br, bc = s.bc;
  if (total == 0 || m == 0 || n == 0) return;
  CudaContext& cc = context(ctx);
  DeviceGuard guard(cc.device());
  if (k == 0) {
    SPIRE_CUDA_CHECK(cudaMemsetAsync(c.raw_data(), 0, c.num_elements() * sizeof(S), cc.stream()));
    return;
  }
  const S* pa = elements<T>(ctx.input(0));
  const S* pb = elements<T>(ctx.input(1));
  S* pc = mutable_elements<T>(c);
  const int64_t count_a = s.count_a, count_b = s.count_b;
  if (!ta && count_b == 1 && count_a == total && total * m <= INT32_MAX) {
    // b is shared by every batch entry: one (total * m) x n GEMM.
    gemm<T>(ctx, cc, gemm_dims(ctx, false, tb, total * m, n, k, ac, bc, n), pa, pb, pc);
    return;
  }
  const GemmDims d = gemm_dims(ctx, ta, tb, m, n, k, ac, bc, n);
  // An operand with as many matrices as the output batch has them in output order (its
  // batch dims equal the output's up to leading or size-1 dims that are 1 there too).
  const bool simple_a = count_a == total || count_a == 1;
  const bool simple_b = count_b == total || count_b == 1;
  if (simple_a && simple_b) {
    gemm_strided_batched<T>(ctx, cc, d, pa, count_a == 1 ? 0 : ar * ac, pb,
                            count_b == 1 ? 0 : br * bc, pc, m * n, total);
    return;
  }
  if (batch.rank() > kMaxBatchRank)
    ctx.fail("CUDA BatchMatMul supports at most ", kMaxBatchRank, " broadcast batch dims");
  BatchPointers bp;
  bp.rank = batch.rank();
  for (int i = 0; i < bp.rank; ++i) bp.dims[i] = batch[i];
  const std::vector<int64_t> sa = kernels::batch_strides(s.batch_a, batch.dims());
  const std::vector<int64_t> sb = kernels::batch_strides(s.batch_b, batch.dims());
  std::copy(sa.begin(), sa.end(), bp.stride_a);
  std::copy(sb.begin(), sb.end(), bp.stride_b);
  Scratch ptrs(cc, 3 * static_cast<size_t>(total) * sizeof(void*));
  const S** arr_a = ptrs.as<const S*>();
  const S** arr_b = arr_a + total;
  S** arr_c = reinterpret_cast<S**>(static_cast<char*>(ptrs.data()) + 2 * total * sizeof(void*));
  batch_pointers_kernel<S><<<blocks_for(cc, total), kThreads, 0, cc.stream()>>>(
      bp, total, pa, ar * ac, pb, br * bc, pc, m * n, arr_a, arr_b, arr_c);
  SPIRE_CUDA_LAUNCH_CHECK();
  using Scalar = typename GemmType<T>::Scalar;
  const Scalar one = Scalar(1), zero = Scalar(0);
  const cudaDataType_t dt = GemmType<T>::kData;
  for (int64_t t0 = 0; t0 < total; t0 += kMaxBatchChunk) {
    const int count = static_cast<int>(std::min(kMaxBatchChunk, total - t0));
    SPIRE_CUBLAS_CHECK(cublasGemmBatchedEx(cc.cublas(), op(d.tb), op(d.ta), d.n, d.m, d.k, &one,
                                           reinterpret_cast<const void* const*>(arr_b + t0), dt,
                                           d.ldb, reinterpret_cast<const void* const*>(arr_a + t0),
                                           dt, d.lda, &zero,
                                           reinterpret_cast<void* const*>(arr_c + t0), dt, d.ldc,
                                           count, GemmType<T>::compute(ctx), CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

SPIRE_STATIC_INIT(cuda_matmul_kernels) {
  auto& r = KernelRegistry::global();
  r.add("MatMul", DeviceType::CUDA, DType::F32, matmul_kernel<float>);
  r.add("MatMul", DeviceType::CUDA, DType::F64, matmul_kernel<double>);
  r.add("FusedMatMul", DeviceType::CUDA, DType::F32, fused_matmul_kernel<float>);
  r.add("FusedMatMul", DeviceType::CUDA, DType::F64, fused_matmul_kernel<double>);
  for (DType t : {DType::F32, DType::F64}) register_epilogue(DeviceType::CUDA, "MatMul", t, "FusedMatMul");
  r.add("BatchMatMul", DeviceType::CUDA, DType::F32, batch_matmul_kernel<float>);
  r.add("BatchMatMul", DeviceType::CUDA, DType::F64, batch_matmul_kernel<double>);
  r.add("MatMul", DeviceType::CUDA, DType::F16, matmul_kernel<F16Tag>);
  r.add("MatMul", DeviceType::CUDA, DType::BF16, matmul_kernel<BF16Tag>);
  r.add("BatchMatMul", DeviceType::CUDA, DType::F16, batch_matmul_kernel<F16Tag>);
  r.add("BatchMatMul", DeviceType::CUDA, DType::BF16, batch_matmul_kernel<BF16Tag>);
}

}  // namespace spire::cuda

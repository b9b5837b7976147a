// CPU GEMM (f32 / f64) used by Spire's CPU matmul and conv2d kernels: single-threaded, or split
// over a ThreadPool (the overloads taking one).
//
// A BLIS/GotoBLAS-style implementation: operands are packed into cache-blocked panels and
// multiplied by a register-blocked micro-kernel. The instruction set (AVX-512, AVX2+FMA or a
// portable generic path) is chosen once at run time, so the library itself is built for
// baseline x86-64 (or any other architecture) without -march flags.
#pragma once

#include <cstdint>
#include <functional>

namespace spire {
class ThreadPool;
}

namespace spire::cpu {

/// C = alpha * op(A) * op(B) + beta * C, all row-major. op(X) is X or X^T per the flag.
/// op(A) is m x k, op(B) is k x n, C is m x n. lda/ldb/ldc are row strides (elements) of the
/// stored matrices. When beta == 0, C is overwritten and never read (it may hold NaN poison).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

/// The same product split over `pool` (null or one thread: the calls above). C is cut into
/// per-thread macro-panels along its larger dimension (aligned to whole register tiles), each an
/// independent GEMM that packs its own panels; every element is still summed in the same order,
/// so results are bitwise identical to the single-threaded call for any thread count. Small
/// products run on the calling thread.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          ThreadPool* pool);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, ThreadPool* pool);

/// Told, once per block of C, that C's rows [i0, i1) and columns [j0, j1) hold their final
/// values, while the block is still in the core's cache: an epilogue (bias, activation) that
/// rewrites them there saves a pass over C. Called from the threads that computed the block,
/// possibly at once for disjoint blocks; every element of C is in exactly one block.
using GemmEpilogue = std::function<void(int64_t i0, int64_t i1, int64_t j0, int64_t j1)>;

/// The threaded product above, with `epilogue` told of each finished block.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          ThreadPool* pool, const GemmEpilogue& epilogue);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, ThreadPool* pool, const GemmEpilogue& epilogue);

namespace detail {

/// Instruction-set variants of the GEMM. Exposed only so tests and benchmarks can exercise every
/// code path on one machine; kernels should call gemm() above, which picks the best variant.
enum class GemmIsa { kGeneric, kAvx2, kAvx512 };

/// Whether `isa` can run on this CPU (kGeneric always can).
bool gemm_isa_supported(GemmIsa isa);
/// The variant gemm() dispatches to on this CPU.
GemmIsa gemm_best_isa();

/// Depth (KC) of the packed blocks of the AVX-512 f32 tiles (all three; f64 keeps 128):
/// kShallow 128, whose 32 KiB B~ micro-panel of the main tile stays in L1; kDeep 384, which
/// reads and writes C a third as often for k >= 384 while the 96 KiB micro-panel streams from
/// L2. gemm() takes kDeep where each core has at least 2 MiB of L2 (the 1.5 MiB B~ block then
/// stays there; Intel Sapphire Rapids and later), kShallow elsewhere (AMD Zen's 1 MiB). The
/// depth sets where a product's k is split into partial sums, so f32 results differ in their
/// last bits between CPUs of the two kinds (as they do between instruction sets); on one CPU
/// they stay the same for any thread count.
enum class GemmDepth { kShallow, kDeep };
/// The depth gemm() uses on this CPU (from the L2 size the C library reports).
GemmDepth gemm_best_depth();
/// A core's L2 cache in bytes as the C library reports it (sysconf); 0 when unknown.
int64_t l2_cache_bytes();

/// gemm() forced onto one variant (and depth: gemm_best_depth() unless given, split over
/// `pool` as the threaded gemm() when one is given); `isa` must be supported (unsupported
/// ones fall back to kGeneric).
void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc);
void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                   double beta, double* c, int64_t ldc);
void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc, GemmDepth depth,
                   ThreadPool* pool = nullptr);

}  // namespace detail
}  // namespace spire::cpu

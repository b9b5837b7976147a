// A bf16 GEMM for CPUs with AVX512-BF16 (AMD Zen 4/5, Intel Cooper Lake and later): the bf16
// MatMul kernel (kernels/cpu/matmul_kernels.cc) multiplies its 16-bit operands directly
// instead of widening both to f32 first. Same packed, cache-blocked structure as the f32 GEMM
// (kernels/cpu/gemm.h), with the k dimension packed in pairs: each VDPBF16PS adds the products
// of two consecutive k of 16 columns to f32 accumulators, twice the multiply-adds of an f32
// FMA per instruction. The products of bf16 values are exact in f32; each is added to the f32
// accumulator with rounding (the odd k, then the even one, as the instruction defines), with
// denormal inputs and results flushed to zero.
// On CPUs with AMX (Intel Sapphire Rapids and later, where Linux grants the process the tile
// data), AMX tiles multiply instead (TDPBF16PS, 16 x 16 f32 results of 16 rows of 32 bf16
// each; A packed row-major, k blocks sized to L2 (detail::amx_k_block) padded with zero
// pairs): the same exact products, added in the hardware's own order, so the last bits differ
// from VDPBF16PS's (still the same for any thread count). Asking for the tile data makes the
// process's signal stacks larger (Linux then refuses sigaltstack stacks below the AMX state's
// size).
// Where the CPU lacks AVX512-BF16 the caller keeps the widening path.
#pragma once

#include <cstdint>

namespace spire {
class ThreadPool;
}

namespace spire::cpu {

/// Whether gemm_bf16 can run on this CPU (AVX512-BF16 with AVX-512 F/BW/VL).
bool gemm_bf16_supported();

/// Whether gemm_bf16 runs on AMX tiles here: AMX-BF16 and AMX-TILE, Linux's permission for
/// the tile data (asked on the first call), and SPIRE_CPU_AMX not "0".
bool gemm_bf16_amx_supported();

/// The products gemm_bf16 can run: VDPBF16PS register tiles, or AMX tiles.
enum class Bf16Kernel { kAvx512Bf16, kAmx };

/// C (f32, row-major, row stride ldc, overwritten) = op(A) op(B) for bf16 A and B given as
/// their 16-bit patterns, row-major with row strides lda / ldb; op(X) is X or X^T per the
/// flag, op(A) m x k, op(B) k x n. Requires gemm_bf16_supported(). The product is split over
/// `pool` (may be null) by whole register tiles; every element's sum is the same for any
/// thread count.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool);
/// The same with f32 operands, each rounded to bf16 (nearest even, as the Cast op) while it
/// is packed: equal to gemm_bf16 on the Cast operands, without their copies. With
/// `round_output`, C is also rounded to bf16 precision as it is finished (the values of the
/// bf16 product widened back to f32).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool, bool round_output = false);

namespace detail {
/// On AMX tiles, a C of at least this many bytes (64-byte aligned, row stride a multiple of 16
/// floats) gets its final values by non-temporal stores, which leave its lines out of the
/// caches: measured on the GPT's products, 9 to 13 MB outputs gained and 3 MB ones lost.
constexpr int64_t kBf16StreamBytes = int64_t{4} << 20;

/// The k per packed block of the AMX kernel for a product with op(A) transposed or not, n
/// columns and depth k. op(A) = A: all of k in one block when a packed A and B block of that
/// depth fit in 80% of a core's L2 (at least 512 deep counts as fitting), else k split evenly
/// into the fewest blocks that fit (multiples of 32); C is read and written once per block.
/// op(A) = A transposed: blocks of 512. It depends on these and on the L2 size the OS reports
/// only: no thread count or row split changes where the k sums are cut (CPUs reporting
/// different L2 sizes may round differently).
int64_t amx_k_block(bool trans_a, int64_t n, int64_t k);

/// gemm_bf16 on the given kernel (for tests and benchmarks; kAmx needs
/// gemm_bf16_amx_supported()). Kernels should call gemm_bf16, which picks the fastest.
void gemm_bf16_with(Bf16Kernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                    float* c, int64_t ldc, ThreadPool* pool);
void gemm_bf16_with(Bf16Kernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float* c, int64_t ldc, ThreadPool* pool, bool round_output);
}  // namespace detail

}  // namespace spire::cpu

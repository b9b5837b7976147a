// Single-threaded comparison of spire::cpu::gemm against OpenBLAS cblas_sgemm / cblas_dgemm.
//
// Times both libraries in the same process on square row-major C = A * B (no transposes), best
// of several repetitions, and prints GFLOP/s and the spire/OpenBLAS ratio.
//
// Usage: gemm_vs_openblas [reps] [size...]   (defaults: 7 reps; f32 256 512 1024 2048, f64 1024)
// SPIRE_BENCH_ISA=generic|avx2|avx512 forces one of spire's variants (default: the dispatched one).
// Built by bench/CMakeLists.txt when OpenBLAS is installed; results in bench/README.md.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

namespace {

using Clock = std::chrono::steady_clock;
using spire::cpu::detail::GemmIsa;

const char* const kIsaNames[] = {"generic", "avx2", "avx512"};

/// The spire variant to time: SPIRE_BENCH_ISA if set (and supported), else the dispatched one.
GemmIsa bench_isa() {
  const char* env = std::getenv("SPIRE_BENCH_ISA");
  for (int i = 0; env != nullptr && i < 3; ++i)
    if (std::string(env) == kIsaNames[i] &&
        spire::cpu::detail::gemm_isa_supported(static_cast<GemmIsa>(i)))
      return static_cast<GemmIsa>(i);
  return spire::cpu::detail::gemm_best_isa();
}

template <class T>
std::vector<T> random_matrix(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(count));
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

/// Best wall time (seconds) of `reps` runs of fn, after one warm-up run.
template <class F>
double best_seconds(int reps, F&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

void blas_gemm(int64_t n, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}
void blas_gemm(int64_t n, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 0.0, c, n);
}

template <class T>
void compare(const char* type, int64_t n, int reps) {
  const auto a = random_matrix<T>(n * n, 1);
  const auto b = random_matrix<T>(n * n, 2);
  std::vector<T> c_spire(static_cast<size_t>(n * n)), c_blas(static_cast<size_t>(n * n));
  const double flops = 2.0 * n * n * n;
  // Fewer repetitions for the big sizes keep the whole run short.
  const int r = n >= 2048 ? std::max(2, reps / 2) : reps;

  const double t_spire = best_seconds(r, [&] {
    spire::cpu::detail::gemm_with_isa(bench_isa(), false, false, n, n, n, T(1), a.data(), n,
                                      b.data(), n, T(0), c_spire.data(), n);
  });
  const double t_blas = best_seconds(r, [&] { blas_gemm(n, a.data(), b.data(), c_blas.data()); });

  double max_diff = 0;
  for (size_t i = 0; i < c_spire.size(); ++i)
    max_diff = std::max(max_diff, std::abs(double(c_spire[i]) - double(c_blas[i])));

  const double g_spire = flops / t_spire * 1e-9, g_blas = flops / t_blas * 1e-9;
  std::printf("%-4s %6lld   %9.1f   %9.1f   %6.3f   %.1e\n", type, static_cast<long long>(n),
              g_spire, g_blas, g_spire / g_blas, max_diff);
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  std::vector<int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  const bool custom = !sizes.empty();
  if (!custom) sizes = {256, 512, 1024, 2048};

  std::printf("spire ISA: %s   OpenBLAS core: %s   (single thread, best of %d)\n",
              kIsaNames[static_cast<int>(bench_isa())],
              openblas_get_corename(), reps);
  std::printf("type      n   spire GF/s  OpenBLAS GF/s  ratio  max|diff|\n");
  for (int64_t n : sizes) compare<float>("f32", n, reps);
  for (int64_t n : custom ? sizes : std::vector<int64_t>{1024}) compare<double>("f64", n, reps);
  return 0;
}

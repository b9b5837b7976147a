// The machine's f32 FLOP limit, measured: T threads each run independent
// fused multiply-add chains in registers (no memory traffic) with the widest
// vector instructions the CPU has (AVX-512, else AVX2 + FMA, else SSE2
// multiply and add), and the program prints GFLOP/s per thread count. This
// is the ceiling bench/mnist_vs_tensorpack.sh divides the convnet step's
// rate by ("the convnet step at >= 60% of the machine's FLOP limit").
//
//   build/bench/flop_peak [max_threads=2] [seconds=1.0]
// Prints: PEAK <threads> <GFLOP/s> <isa>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 12;  // independent accumulators: covers FMA latency x 2 ports
constexpr long kInner = 1 << 16;

// Each returns the FLOPs done (two per lane per multiply-add).
__attribute__((target("avx512f"))) double fma_avx512(long rounds, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (long i = 0; i < kInner; ++i)
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  *sink = _mm512_reduce_add_ps(s);
  return 2.0 * 16 * kChains * static_cast<double>(kInner) * static_cast<double>(rounds);
}

__attribute__((target("avx2,fma"))) double fma_avx2(long rounds, float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (long i = 0; i < kInner; ++i)
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  float out[8];
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  _mm256_storeu_ps(out, s);
  *sink = out[0] + out[7];
  return 2.0 * 8 * kChains * static_cast<double>(kInner) * static_cast<double>(rounds);
}

double mul_add_sse2(long rounds, float* sink) {
  __m128 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m128 a = _mm_set1_ps(0.999999f), b = _mm_set1_ps(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (long i = 0; i < kInner; ++i)
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], a), b);
  float out[4];
  _mm_storeu_ps(out, acc[0]);
  *sink = out[0];
  return 2.0 * 4 * kChains * static_cast<double>(kInner) * static_cast<double>(rounds);
}

using Kernel = double (*)(long, float*);

// GFLOP/s of `threads` threads running `k` together for about `seconds`.
double measure(Kernel k, int threads, double seconds) {
  // Calibrate one thread's rounds per second first.
  float sink = 0;
  auto t0 = std::chrono::steady_clock::now();
  k(4, &sink);
  double per_round = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4;
  const long rounds = std::max(1L, static_cast<long>(seconds / std::max(per_round, 1e-6)));
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      flops[static_cast<size_t>(t)] = k(rounds, &sinks[static_cast<size_t>(t)]);
    });
  while (ready.load() < threads) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true);
  for (auto& th : pool) th.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double total = 0;
  for (double f : flops) total += f;
  for (float s : sinks)
    if (s == 12345.0f) std::printf(" ");  // keeps the results live
  return total / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const double seconds = argc > 2 ? std::max(0.05, std::atof(argv[2])) : 1.0;
  Kernel k = mul_add_sse2;
  std::string isa = "sse2";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    k = fma_avx512;
    isa = "avx512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    k = fma_avx2;
    isa = "avx2";
  }
  for (int t = 1; t <= max_threads; ++t) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) best = std::max(best, measure(k, t, seconds));
    std::printf("PEAK %d %.1f %s\n", t, best, isa.c_str());
    std::fflush(stdout);
  }
  return 0;
}

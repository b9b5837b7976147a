// Counter-based random numbers shared by the CPU and CUDA random kernels:
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11) plus the conversions the random ops need (uniform floats,
// Box-Muller normals, truncated normals), all SPIRE_HD inline functions.
//
// A draw is a pure function of (key, element index): element i of a draw
// whose stream offset is `offset` uses the 128-bit Philox counter
// (offset + i, sub) with sub = 0 (truncated normal re-draws bump sub), so
// any device, any thread layout and any chunking of the work produce the
// same values. The uniform bits and uniform floats are bit-identical on
// every device; values built from transcendental functions (normals) are
// computed in double precision and agree up to libm rounding differences.
//
// The key of a random node is derive_key(graph seed, op seed, node id):
// a splitmix64 mix of the graph seed with the op seed (or, when the op seed
// is 0, the node's id), so a graph built the same way draws the same
// numbers. The stream offset comes from SessionState::advance_rng, which
// advances per node and per session on every run.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/functors.h"  // SPIRE_HD

namespace spire::random {

// ---- key derivation --------------------------------------------------------

/// splitmix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
SPIRE_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The Philox key of a random node: a mix of the graph seed and the op seed
/// (or the node's id when the op seed is 0).
SPIRE_HD inline uint64_t derive_key(int64_t graph_seed, int64_t op_seed, int64_t node_id) {
  uint64_t g = splitmix64(static_cast<uint64_t>(graph_seed));
  uint64_t o = op_seed != 0 ? static_cast<uint64_t>(op_seed)
                            : (static_cast<uint64_t>(node_id) ^ 0xD1B54A32D192ED03ull);
  return splitmix64(g ^ splitmix64(o + 0x632BE59BD9B4E019ull));
}

// ---- Philox4x32-10 -----------------------------------------------------------

struct Philox4x32 {
  uint32_t v[4];
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

SPIRE_HD inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

/// Philox4x32 with 10 rounds: four 32-bit words from a 128-bit counter and
/// a 64-bit key (the Random123 reference algorithm).
SPIRE_HD inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kPhiloxM0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(kPhiloxM1, ctr.v[2], &hi1, &lo1);
    Philox4x32 next;
    next.v[0] = hi1 ^ ctr.v[1] ^ k0;
    next.v[1] = lo1;
    next.v[2] = hi0 ^ ctr.v[3] ^ k1;
    next.v[3] = lo0;
    ctr = next;
  }
  return ctr;
}

/// The four words for element `index` (stream offset already added) and
/// sub-counter `sub` under a 64-bit key.
SPIRE_HD inline Philox4x32 philox_bits(uint64_t key, uint64_t index, uint64_t sub = 0) {
  Philox4x32 c;
  c.v[0] = static_cast<uint32_t>(index);
  c.v[1] = static_cast<uint32_t>(index >> 32);
  c.v[2] = static_cast<uint32_t>(sub);
  c.v[3] = static_cast<uint32_t>(sub >> 32);
  return philox4x32_10(c, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

// ---- uniform floats ------------------------------------------------------------

/// Uniform f32 in [0, 1) from 32 random bits (24-bit resolution, exact).
SPIRE_HD inline float uniform_f32(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
/// Uniform f64 in [0, 1) from 64 random bits (53-bit resolution, exact).
SPIRE_HD inline double uniform_f64(uint32_t hi, uint32_t lo) {
  uint64_t b = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
}

/// Uniform in [0, 1) for dtype T from the words of one Philox call
/// (f32 uses word 0, f64 words 0 and 1).
template <typename T>
SPIRE_HD inline T uniform01(const Philox4x32& w) {
  if constexpr (sizeof(T) == 4) {
    return static_cast<T>(uniform_f32(w.v[0]));
  } else {
    return static_cast<T>(uniform_f64(w.v[0], w.v[1]));
  }
}

/// Uniform in [lo, hi) for dtype T; rounding that would reach `hi` is
/// pulled back to the largest T below it. An explicit fused multiply-add
/// keeps the rounding identical on CPUs and GPUs (nvcc would otherwise be
/// free to contract a*b+c differently from the host compiler).
template <typename T>
SPIRE_HD inline T uniform_range(const Philox4x32& w, T lo, T hi) {
  using std::fma;
  using std::nextafter;
  T v = fma(uniform01<T>(w), hi - lo, lo);
  if (v >= hi) v = nextafter(hi, lo);
  return v;
}

// ---- normals -------------------------------------------------------------------

/// Two independent standard normals (Box-Muller) from one Philox call,
/// computed in double. For f32 the two uniforms use 24 bits each (words 0
/// and 1), for f64 53 bits each (words 0,1 and 2,3).
template <typename T>
SPIRE_HD inline void box_muller(const Philox4x32& w, double* z0, double* z1) {
  using std::cos;
  using std::log;
  using std::sin;
  using std::sqrt;
  double u1, u2;
  if constexpr (sizeof(T) == 4) {
    u1 = static_cast<double>(uniform_f32(w.v[0]));
    u2 = static_cast<double>(uniform_f32(w.v[1]));
  } else {
    u1 = uniform_f64(w.v[0], w.v[1]);
    u2 = uniform_f64(w.v[2], w.v[3]);
  }
  // 1 - u1 is in (0, 1], so the log is finite.
  const double r = sqrt(-2.0 * log(1.0 - u1));
  const double theta = 6.283185307179586476925286766559 * u2;
  *z0 = r * cos(theta);
  *z1 = r * sin(theta);
}

/// Standard normal for element `index` (the cosine branch of Box-Muller).
template <typename T>
SPIRE_HD inline double standard_normal(uint64_t key, uint64_t index) {
  double z0, z1;
  box_muller<T>(philox_bits(key, index, 0), &z0, &z1);
  return z0;
}

/// Re-draw rounds of truncated_normal before giving up; each round yields two
/// candidates, both rejected with probability ~0.0021, so reaching the bound
/// (probability ~1e-170) does not happen in practice.
constexpr int kTruncatedMaxRounds = 64;

/// Standard normal restricted to (-2, 2) (TF's truncated_normal): candidates
/// from sub-counters 0, 1, ... until one lies within two standard
/// deviations. Bounded: after kTruncatedMaxRounds rounds a uniform value in
/// [-2, 2) is returned instead.
template <typename T>
SPIRE_HD inline double truncated_standard_normal(uint64_t key, uint64_t index) {
  Philox4x32 w{};
  for (int sub = 0; sub < kTruncatedMaxRounds; ++sub) {
    w = philox_bits(key, index, static_cast<uint64_t>(sub));
    double z0, z1;
    box_muller<T>(w, &z0, &z1);
    if (z0 > -2.0 && z0 < 2.0) return z0;
    if (z1 > -2.0 && z1 < 2.0) return z1;
  }
  return -2.0 + 4.0 * uniform_f64(w.v[0], w.v[1]);
}

/// The dropout rate as a threshold on the 53 bits uniform_f64 scales: uniform_f64(hi, lo) =
/// k * 2^-53 >= rate exactly when k >= ceil(rate * 2^53) (scaling by 2^53 is exact), so the
/// keep decision needs no floating point (and vectorizes).
SPIRE_HD inline uint64_t dropout_threshold(double rate) {
  const double t = ceil(rate * 9007199254740992.0);
  // (NaN keeps nothing, as uniform_f64 >= NaN never holds.)
  return t <= 0 ? 0 : !(t < 9007199254740992.0) ? (uint64_t{1} << 53) : static_cast<uint64_t>(t);
}

/// Keep decision of dropout for element `index` against dropout_threshold(rate): false with
/// probability `rate`; the same decision as uniform_f64(words 0, 1) >= rate.
SPIRE_HD inline bool dropout_keep_bits(uint64_t key, uint64_t index, uint64_t threshold) {
  Philox4x32 w = philox_bits(key, index, 0);
  return ((static_cast<uint64_t>(w.v[0]) << 32 | w.v[1]) >> 11) >= threshold;
}

/// Keep decision of dropout for element `index`: false with probability `rate`.
SPIRE_HD inline bool dropout_keep(uint64_t key, uint64_t index, double rate) {
  return dropout_keep_bits(key, index, dropout_threshold(rate));
}

}  // namespace spire::random

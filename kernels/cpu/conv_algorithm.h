// Per-shape choice between the CPU convolution algorithms (kernels/cpu/conv_kernels.cc):
// the direct kernels (kernels/cpu/direct_conv.h) and im2col + GEMM. Without measuring, a
// fixed rule picks (direct wherever it applies). With SessionOptions::measure_conv_algorithms
// the first call of each (pass, dtype, geometry, threads) runs both algorithms twice, keeps
// the faster in the session's ConvAlgorithmCache and returns its result; later calls run the
// cached choice only, as cuDNN's benchmark mode does.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/conv_geometry.h"

namespace spire::cpu {

enum class ConvAlgorithm : uint8_t { kGemm, kDirect };
enum class ConvPass : uint8_t { kForward, kInputGradient, kFilterGradient };

inline const char* conv_algorithm_name(ConvAlgorithm a) {
  return a == ConvAlgorithm::kDirect ? "direct" : "im2col+gemm";
}

/// The session's measured choices (a SessionState resource, so one per session).
class ConvAlgorithmCache {
 public:
  using Key = std::array<int64_t, 19>;
  static Key key(ConvPass pass, DType dtype, int threads, const kernels::ConvGeometry& g) {
    // (At stride 1, the only case with a choice, oh, ow, pt and pl fix the bottom and right
    // padding too.)
    return {static_cast<int64_t>(pass), static_cast<int64_t>(dtype), threads, g.n, g.h, g.w, g.c,
            g.kh, g.kw, g.o, g.oh, g.ow, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, 0};
  }
  bool find(const Key& k, ConvAlgorithm* out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = choices_.find(k);
    if (it == choices_.end()) return false;
    *out = it->second;
    return true;
  }
  /// Keeps the first choice stored for `k` (two towers measuring at once agree afterwards).
  ConvAlgorithm insert(const Key& k, ConvAlgorithm a) {
    std::lock_guard<std::mutex> lock(mu_);
    return choices_.emplace(k, a).first->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<Key, ConvAlgorithm> choices_;
};

/// Runs convolution pass `pass` of geometry `g` into `out` (`out_size` elements) with the
/// chosen algorithm: run(algorithm, destination) must write the whole result. `direct_ok`:
/// whether the direct kernel applies at all.
template <typename T, typename Run>
void run_conv_algorithm(KernelContext& ctx, ConvPass pass, const kernels::ConvGeometry& g,
                        bool direct_ok, T* out, int64_t out_size, Run&& run) {
  if (!direct_ok) return run(ConvAlgorithm::kGemm, out);
  if (!ctx.measure_algorithms() || out_size == 0) return run(ConvAlgorithm::kDirect, out);
  auto cache = ctx.state().resource<ConvAlgorithmCache>(
      "cpu_conv_algorithms", [] { return std::make_shared<ConvAlgorithmCache>(); });
  const auto key = ConvAlgorithmCache::key(pass, dtype_of<T>, ctx.num_threads(), g);
  ConvAlgorithm chosen;
  if (cache->find(key, &chosen)) return run(chosen, out);
  // Twice each, alternating (the first runs also pay for their scratch); the faster's best.
  std::vector<T> other(static_cast<size_t>(out_size));
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  const int64_t start = ctx.trace_now_ns();
  for (int trial = 0; trial < 2; ++trial) {
    for (ConvAlgorithm a : {ConvAlgorithm::kDirect, ConvAlgorithm::kGemm}) {
      const auto t0 = std::chrono::steady_clock::now();
      run(a, a == ConvAlgorithm::kDirect ? out : other.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double& b = best[a == ConvAlgorithm::kDirect ? 1 : 0];
      b = std::min(b, s);
    }
  }
  chosen = cache->insert(key, best[0] < best[1] ? ConvAlgorithm::kGemm : ConvAlgorithm::kDirect);
  if (chosen == ConvAlgorithm::kGemm)
    std::memcpy(out, other.data(), static_cast<size_t>(out_size) * sizeof(T));
  ctx.trace_event("conv algorithm search", "conv", start, ctx.trace_now_ns(),
                  {{"chosen", conv_algorithm_name(chosen)},
                   {"direct_ms", std::to_string(best[1] * 1e3)},
                   {"gemm_ms", std::to_string(best[0] * 1e3)}});
}

}  // namespace spire::cpu

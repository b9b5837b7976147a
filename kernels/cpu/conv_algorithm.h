// Per-shape choice between the CPU convolution algorithms (kernels/cpu/conv_kernels.cc):
// the direct kernels (kernels/cpu/direct_conv.h), im2col + GEMM, and Winograd F(2x2, 3x3)
// (kernels/cpu/winograd_conv.h). Without measuring, a fixed rule picks (direct wherever it
// applies, never Winograd). With SessionOptions::measure_conv_algorithms
// the first call of each (pass, dtype, geometry, threads) runs each algorithm twice, keeps
// the fastest in the session's ConvAlgorithmCache and returns its result; later calls run the
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
#include <string>
#include <utility>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/conv_geometry.h"

namespace spire::cpu {

enum class ConvAlgorithm : uint8_t { kGemm, kDirect, kWinograd };
enum class ConvPass : uint8_t { kForward, kInputGradient, kFilterGradient };

inline const char* conv_algorithm_name(ConvAlgorithm a) {
  return a == ConvAlgorithm::kDirect ? "direct" : a == ConvAlgorithm::kWinograd ? "winograd" : "im2col+gemm";
}
/// The algorithm's name in trace keys ("direct", "gemm", "winograd").
inline const char* conv_algorithm_key(ConvAlgorithm a) {
  return a == ConvAlgorithm::kDirect ? "direct" : a == ConvAlgorithm::kWinograd ? "winograd" : "gemm";
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

/// Which algorithms besides im2col + GEMM (which always does) apply to a pass.
struct ConvCandidates {
  bool direct = false;
  bool winograd = false;
};

/// Runs convolution pass `pass` of geometry `g` into `out` (`out_size` elements) with the
/// chosen algorithm: run(algorithm, destination) must write the whole result. Without
/// measuring, the fixed rule: direct where it applies, else im2col + GEMM (Winograd, which
/// rounds differently, only when measured).
template <typename T, typename Run>
void run_conv_algorithm(KernelContext& ctx, ConvPass pass, const kernels::ConvGeometry& g,
                        ConvCandidates can, T* out, int64_t out_size, Run&& run) {
  const ConvAlgorithm fixed = can.direct ? ConvAlgorithm::kDirect : ConvAlgorithm::kGemm;
  if ((!can.direct && !can.winograd) || !ctx.measure_algorithms() || out_size == 0) return run(fixed, out);
  auto cache = ctx.state().resource<ConvAlgorithmCache>(
      "cpu_conv_algorithms", [] { return std::make_shared<ConvAlgorithmCache>(); });
  const auto key = ConvAlgorithmCache::key(pass, dtype_of<T>, ctx.num_threads(), g);
  ConvAlgorithm chosen;
  if (cache->find(key, &chosen)) return run(chosen, out);
  // Each candidate twice, alternating (the first runs also pay for their scratch); the
  // fastest's best. The fixed rule's choice writes into `out`, the others into copies.
  std::vector<ConvAlgorithm> algos{fixed};
  if (fixed != ConvAlgorithm::kGemm) algos.push_back(ConvAlgorithm::kGemm);
  if (can.winograd) algos.push_back(ConvAlgorithm::kWinograd);
  std::vector<std::vector<T>> copies(algos.size() - 1, std::vector<T>(static_cast<size_t>(out_size)));
  std::vector<double> best(algos.size(), std::numeric_limits<double>::infinity());
  const int64_t start = ctx.trace_now_ns();
  for (int trial = 0; trial < 2; ++trial) {
    for (size_t a = 0; a < algos.size(); ++a) {
      const auto t0 = std::chrono::steady_clock::now();
      run(algos[a], a == 0 ? out : copies[a - 1].data());
      best[a] = std::min(best[a], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const size_t fastest = static_cast<size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  chosen = cache->insert(key, algos[fastest]);
  const size_t kept = static_cast<size_t>(std::find(algos.begin(), algos.end(), chosen) - algos.begin());
  if (kept > 0) std::memcpy(out, copies[kept - 1].data(), static_cast<size_t>(out_size) * sizeof(T));
  std::vector<std::pair<std::string, std::string>> args{{"chosen", conv_algorithm_name(chosen)}};
  for (size_t a = 0; a < algos.size(); ++a)
    args.emplace_back(std::string(conv_algorithm_key(algos[a])) + "_ms", std::to_string(best[a] * 1e3));
  ctx.trace_event("conv algorithm search", "conv", start, ctx.trace_now_ns(), args);
}

}  // namespace spire::cpu

// Data for the data-parallel trainer tests (multi-device towers, MPI ranks):
// random batches of a 4-feature, 3-class problem, and the whole batch of a
// step of k towers/ranks (their batches concatenated), so a data-parallel
// run can be compared with SimpleTrainer on the whole batch.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "train/dataflow.h"

namespace spire::testing {

/// `n` batches of `b` points: x uniform in [-1, 1)^4, label from a fixed rule.
inline std::vector<Datapoint> batches(int n, int b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x;
    std::vector<int64_t> y;
    for (int j = 0; j < b; ++j) {
      double v[4];
      for (double& e : v) e = u(rng), x.push_back(e);
      y.push_back(v[0] + v[1] > 0.3 ? 0 : (v[2] - v[3] > 0 ? 1 : 2));
    }
    out.push_back({Tensor::from_vector<double>({b, 4}, x), Tensor::from_vector<int64_t>({b}, y)});
  }
  return out;
}

/// Groups of k consecutive batches concatenated: what one step of k towers sees.
inline std::vector<Datapoint> concatenated(const std::vector<Datapoint>& bs, int k) {
  std::vector<Datapoint> out;
  for (size_t s = 0; s + static_cast<size_t>(k) <= bs.size(); s += static_cast<size_t>(k)) {
    std::vector<double> x;
    std::vector<int64_t> y;
    for (int j = 0; j < k; ++j) {
      auto xs = bs[s + static_cast<size_t>(j)][0].to_vector<double>();
      auto ys = bs[s + static_cast<size_t>(j)][1].to_vector<int64_t>();
      x.insert(x.end(), xs.begin(), xs.end());
      y.insert(y.end(), ys.begin(), ys.end());
    }
    out.push_back({Tensor::from_vector<double>({static_cast<int64_t>(y.size()), 4}, x),
                   Tensor::from_vector<int64_t>({static_cast<int64_t>(y.size())}, y)});
  }
  return out;
}

}  // namespace spire::testing

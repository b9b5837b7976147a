// Test support for the distributed trainers (threads and MPI ranks): a
// linear model whose SGD updates can be computed by hand, integer batches
// whose means are exact, and the hand-computed reference.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "layers/layers.h"
#include "train/config.h"
#include "train/dataflow.h"
#include "train/input_source.h"
#include "train/model_desc.h"
#include "train/session_init.h"
#include "train/trainer.h"

namespace spire::testing {

// cost = mean over the batch of x.w + sum(v * [1, 2, 4]): the gradient of w
// is the batch's mean x, that of v is [1, 2, 4], so SGD's updates can be
// computed by hand (and are exact in f64 with the integers used here).
// The gradients do not depend on the variables, so W workers' updates of a
// step equal W sequential single-worker steps (for any optimizer).
class LinearModel : public ModelDesc {
 public:
  explicit LinearModel(bool momentum = false, bool adam = false) : momentum_(momentum), adam_(adam) {}
  std::vector<InputDesc> inputs() const override { return {{"x", DType::F64, {-1, 4}}}; }
  Output build_graph(const std::vector<Output>& in) override {
    Output w = get_variable("w", Shape{4}, DType::F64);
    Output v = get_variable("v", Shape{3}, DType::F64);
    Output k = ops::constant(Tensor::from_vector<double>({3}, {1, 2, 4}));
    Output xw = ops::mean(ops::sum(ops::mul(in[0], w), {1}), {});
    return ops::add(xw, ops::sum(ops::mul(v, k)), "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override {
    if (adam_) return std::make_shared<AdamOptimizer>(0.25);
    if (momentum_) return std::make_shared<MomentumOptimizer>(0.5, 0.5);
    return std::make_shared<GradientDescentOptimizer>(0.5);
  }

 private:
  bool momentum_, adam_;
};

// cost = mean over the batch of (tanh(x.w + b) - y)^2, plain SGD (lr 0.1): gradients that
// depend on w and b, so W workers' updates of a step equal the hand-computed reference
// (tanh_sgd_reference: every worker's gradient taken at the step's starting w and b, applied in
// worker order) only if every worker read the values of the step before; a stale read gives
// others. Two variables, so two servers each hold one (w 32 bytes, b 8). (The learning
// rate is an f32 variable, as tensorpack's: the reference steps by 0.1f.)
class TanhModel : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override { return {{"x", DType::F64, {-1, 4}}, {"y", DType::F64, {-1}}}; }
  Output build_graph(const std::vector<Output>& in) override {
    Output w = get_variable("w", Shape{4}, DType::F64);
    Output b = get_variable("b", Shape{1}, DType::F64);
    Output p = ops::tanh(ops::add(ops::sum(ops::mul(in[0], w), {1}), b));
    return ops::mean(ops::square(ops::sub(p, in[1])), {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override { return std::make_shared<GradientDescentOptimizer>(0.1); }
};

// Batches of 2 rows for TanhModel: x in [-1, 1], y in [-0.75, 0.75]; another sequence per `seed`.
inline std::vector<Datapoint> tanh_batches(int n, int seed) {
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x, y;
    for (int j = 0; j < 8; ++j) x.push_back((static_cast<double>((seed * 7 + i * 3 + j * 5) % 9) - 4) / 4);
    for (int r = 0; r < 2; ++r) y.push_back((static_cast<double>((seed * 5 + i + r * 3) % 7) - 3) / 4);
    out.push_back({Tensor::from_vector<double>({2, 4}, x), Tensor::from_vector<double>({2}, y)});
  }
  return out;
}

inline const std::map<std::string, Tensor> kTanhInit = {{"w", Tensor::from_vector<double>({4}, {0.5, -0.25, 0.75, 0.1})},
                                                         {"b", Tensor::from_vector<double>({1}, {0.2})}};

// TanhModel's SGD by hand: each step, every worker's gradient at the step's starting w and b
// (its batch `step`), applied one after another in worker order. Returns w then b.
inline std::vector<double> tanh_sgd_reference(const std::function<std::vector<Datapoint>(int)>& data,
                                              int64_t steps, int workers) {
  std::vector<double> w = {0.5, -0.25, 0.75, 0.1, 0.2};  // w[4] is b
  for (int64_t s = 0; s < steps; ++s) {
    const std::vector<double> start = w;
    for (int wk = 0; wk < workers; ++wk) {
      const std::vector<Datapoint> d = data(wk);
      const Datapoint& b = d[static_cast<size_t>(s % static_cast<int64_t>(d.size()))];
      const auto x = b[0].to_vector<double>();
      const auto y = b[1].to_vector<double>();
      double g[5] = {0, 0, 0, 0, 0};
      for (int r = 0; r < 2; ++r) {
        double z = 0;
        for (int j = 0; j < 4; ++j) z += x[static_cast<size_t>(r * 4 + j)] * start[static_cast<size_t>(j)];
        const double p = std::tanh(z + start[4]);
        const double dz = 2 * (p - y[static_cast<size_t>(r)]) * (1 - p * p) / 2;  // mean over 2 rows
        for (int j = 0; j < 4; ++j) g[j] += dz * x[static_cast<size_t>(r * 4 + j)];
        g[4] += dz;
      }
      for (int j = 0; j < 5; ++j) w[static_cast<size_t>(j)] -= static_cast<double>(0.1f) * g[j];
    }
  }
  return w;
}

// Batches of 2 rows of small integers (exact means); a different sequence per `seed`.
inline std::vector<Datapoint> integer_batches(int n, int seed) {
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x;
    for (int j = 0; j < 8; ++j) x.push_back(static_cast<double>((seed * 7 + i * 3 + j * 5) % 9) - 4);
    out.push_back({Tensor::from_vector<double>({2, 4}, x)});
  }
  return out;
}

inline const std::map<std::string, Tensor> kLinearInit = {
    {"w", Tensor::from_vector<double>({4}, {1, 2, 3, 4})},
    {"v", Tensor::from_vector<double>({3}, {-1, 0, 1})},
};

// The hand-computed SGD reference: every worker's step applies
// lr * (its mean x over its towers' batches) to w and lr * [1, 2, 4] to v.
inline std::map<std::string, Tensor> sgd_reference(const std::function<std::vector<Datapoint>(int)>& data,
                                                   int64_t steps, int workers, int towers) {
  std::vector<double> w = {1, 2, 3, 4}, v = {-1, 0, 1};
  const double k[3] = {1, 2, 4};
  for (int64_t s = 0; s < steps; ++s)
    for (int wk = 0; wk < workers; ++wk) {
      const std::vector<Datapoint> d = data(wk);
      double g[4] = {0, 0, 0, 0};
      for (int t = 0; t < towers; ++t) {
        const auto x = d[static_cast<size_t>((s * towers + t) % static_cast<int64_t>(d.size()))][0].to_vector<double>();
        for (int j = 0; j < 4; ++j) g[j] += (x[static_cast<size_t>(j)] + x[static_cast<size_t>(4 + j)]) / 2 / towers;
      }
      for (int j = 0; j < 4; ++j) w[static_cast<size_t>(j)] -= 0.5 * g[j];
      for (int j = 0; j < 3; ++j) v[static_cast<size_t>(j)] -= 0.5 * k[j];
    }
  return {{"w", Tensor::from_vector<double>({4}, w)}, {"v", Tensor::from_vector<double>({3}, v)}};
}

/// The variables of a SimpleTrainer that restored `checkpoint` into the
/// linear model with Momentum (and trained no step).
inline std::map<std::string, Tensor> linear_values_restored_from(const std::string& checkpoint) {
  SimpleTrainer simple;
  TrainConfig cfg;
  cfg.model = std::make_shared<LinearModel>(/*momentum=*/true);
  cfg.data = std::make_shared<FeedInput>(std::make_shared<DataFromList>(integer_batches(1, 1), false));
  cfg.steps_per_epoch = 1;
  cfg.max_epoch = 0;
  cfg.monitors = std::vector<MonitorPtr>{};
  cfg.session_init = std::make_shared<CheckpointRestore>(checkpoint);
  launch_train_with_config(cfg, simple);
  return get_variable_values(simple.session());
}

}  // namespace spire::testing

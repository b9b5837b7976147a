// Google Benchmark of causal self-attention forward + backward on the CPU: the fused
// ScaledDotProductAttention op (and its gradient op) against the same attention built from
// primitive ops (batch_matmul, scale, additive -inf mask, softmax, batch_matmul; their
// gradients). One step runs out and the gradients of <w, out> w.r.t. q, k and v, f32.
// Shapes are nanoGPT's: the CPU "baby" configuration (B 12, H 4, T 64, D 32) and
// shakespeare_char (B 64, H 6, T 256, D 64). Arguments: fused (1) or primitive (0), the
// configuration (0 baby, 1 shakespeare_char), threads; e.g. BM_CausalAttention/1/0/2.
#include <benchmark/benchmark.h>

#include <cmath>
#include <limits>
#include <random>

#include "spire.h"

using namespace spire;

namespace {

struct Shape4 {
  int64_t b, h, t, d;
};
const Shape4 kConfigs[] = {{12, 4, 64, 32}, {64, 6, 256, 64}};

Tensor random_f32(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t(DType::F32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Output primitive_attention(const Output& q, const Output& k, const Output& v, int64_t t, int64_t d) {
  Output s = ops::mul(ops::batch_matmul(q, k, false, true),
                      ops::constant(Tensor::scalar<float>(1.0f / std::sqrt(static_cast<float>(d)))));
  Tensor mask(DType::F32, Shape{t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      mask.data<float>()[i * t + j] = j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
  return ops::batch_matmul(ops::softmax(ops::add(s, ops::constant(mask))), v);
}

void BM_CausalAttention(benchmark::State& state) {
  const bool fused = state.range(0) != 0;
  const Shape4 c = kConfigs[state.range(1)];
  Graph g;
  DefaultGraphGuard guard(g);
  const Shape shape{c.b, c.h, c.t, c.d};
  Output q = ops::placeholder(DType::F32, shape, "q");
  Output k = ops::placeholder(DType::F32, shape, "k");
  Output v = ops::placeholder(DType::F32, shape, "v");
  Output out = fused ? ops::scaled_dot_product_attention(q, k, v, true)
                     : primitive_attention(q, k, v, c.t, c.d);
  std::vector<Output> fetch = gradients({out}, {q, k, v}, {ops::constant(random_f32(shape, 4))});
  fetch.push_back(out);
  SessionOptions o;
  o.num_threads = static_cast<int>(state.range(2));
  Session s(g, o);
  FeedDict feeds = {{q, random_f32(shape, 1)}, {k, random_f32(shape, 2)}, {v, random_f32(shape, 3)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run(fetch, feeds));
  // Tokens (B * T) per second through one forward + backward.
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(c.b * c.t),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CausalAttention)
    ->ArgNames({"fused", "config", "threads"})
    ->ArgsProduct({{1, 0}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

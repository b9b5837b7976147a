// Google Benchmark programs for Spire's CPU kernels and executor, all run
// through a Session as a user would: f32 matmul (GFLOP/s), elementwise add
// and sum reduction (GB/s), conv2d forward/backward on MNIST- and
// CIFAR-sized batches, and executor overhead per node on a chain of 1000
// tiny nodes, and one Adam step fused vs per variable. Matmul and conv2d take a thread count as their last argument
// (SessionOptions::num_threads), e.g. MatMulF32/1024/2.
#include <benchmark/benchmark.h>

#include <random>

#include "spire.h"

using namespace spire;

namespace {

Tensor random_f32(const Shape& s, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t(DType::F32, s);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = u(rng);
  return t;
}

// A session using `threads` CPU threads.
SessionOptions with_threads(int64_t threads) {
  SessionOptions o;
  o.num_threads = static_cast<int>(threads);
  return o;
}

void BM_MatMulF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {n, n}, "a");
  Output b = ops::placeholder(DType::F32, {n, n}, "b");
  Output c = ops::matmul(a, b);
  Session s(g, with_threads(state.range(1)));
  FeedDict feeds = {{a, random_f32({n, n}, 1)}, {b, random_f32({n, n}, 2)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run({c}, feeds));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MatMulF32)
    ->ArgsProduct({{256, 512, 1024, 2048}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_AddF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {n}, "a");
  Output b = ops::placeholder(DType::F32, {n}, "b");
  Output c = ops::add(a, b);
  Session s(g);
  FeedDict feeds = {{a, random_f32({n}, 1)}, {b, random_f32({n}, 2)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run({c}, feeds));
  // Bytes moved: read a and b, write c.
  state.SetBytesProcessed(state.iterations() * 3 * n * 4);
}
BENCHMARK(BM_AddF32)->RangeMultiplier(4)->Range(1 << 20, 1 << 26)->Unit(benchmark::kMillisecond)->UseRealTime();

// The exact GELU and its gradient on GPT baby's MLP activation ([768, 512], uniform in [-1, 1]),
// one thread: elements per second.
void BM_GeluF32(benchmark::State& state) {
  const bool grad = state.range(0) != 0;
  Graph g;
  DefaultGraphGuard guard(g);
  const Shape shape{768, 512};
  Output x = ops::placeholder(DType::F32, shape, "x");
  Output dy = ops::placeholder(DType::F32, shape, "dy");
  Output y = grad ? ops::gelu_grad(dy, x) : ops::gelu(x);
  Session s(g, with_threads(1));
  FeedDict feeds = {{x, random_f32(shape, 1)}, {dy, random_f32(shape, 2)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run({y}, feeds));
  state.SetItemsProcessed(state.iterations() * shape.num_elements());
}
BENCHMARK(BM_GeluF32)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SumF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {n}, "a");
  Output c = ops::sum(a);
  Session s(g);
  FeedDict feeds = {{a, random_f32({n}, 1)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run({c}, feeds));
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_SumF32)->RangeMultiplier(4)->Range(1 << 20, 1 << 26)->Unit(benchmark::kMillisecond)->UseRealTime();

// conv2d on NHWC batches: {batch, size, size, in_channels} with a 3x3 filter, SAME padding.
// part 0: forward; 1: both gradients; 2: the input gradient alone; 3: the filter gradient alone.
void conv_bench(benchmark::State& state, int part) {
  const int64_t batch = state.range(0), size = state.range(1), cin = state.range(2), cout = state.range(3);
  const SessionOptions options = with_threads(state.range(4));
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {batch, size, size, cin}, "x");
  Output w = ops::placeholder(DType::F32, {3, 3, cin, cout}, "w");
  Output y = ops::conv2d(x, w, {1, 1}, "SAME");
  Output dy = ops::placeholder(DType::F32, {batch, size, size, cout}, "dy");
  std::vector<Output> fetches = {y};
  if (part == 1) fetches = gradients({y}, {x, w}, {dy});
  if (part == 2) fetches = gradients({y}, {x}, {dy});
  if (part == 3) fetches = gradients({y}, {w}, {dy});
  Session s(g, options);
  FeedDict feeds = {{x, random_f32({batch, size, size, cin}, 1)}, {w, random_f32({3, 3, cin, cout}, 2)}};
  if (part != 0) feeds.push_back({dy, random_f32({batch, size, size, cout}, 3)});
  for (auto _ : state) benchmark::DoNotOptimize(s.run(fetches, feeds));
  double flops = 2.0 * batch * size * size * cout * 9 * cin * (part == 1 ? 2 : 1);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
void BM_Conv2DForward(benchmark::State& state) { conv_bench(state, 0); }
void BM_Conv2DBackward(benchmark::State& state) { conv_bench(state, 1); }
void BM_Conv2DBackpropInput(benchmark::State& state) { conv_bench(state, 2); }
void BM_Conv2DBackpropFilter(benchmark::State& state) { conv_bench(state, 3); }
// MNIST-sized: 64 x 28x28x1 -> 32 channels, and 64 x 14x14x32 -> 64; CIFAR-sized: 64 x 32x32x3 -> 64,
// 64 x 16x16x64 -> 128; each on 1 and 2 threads.
#define CONV_ARGS                                                                          \
  ->Args({64, 28, 1, 32, 1})->Args({64, 28, 1, 32, 2})->Args({64, 14, 32, 64, 1})         \
      ->Args({64, 14, 32, 64, 2})->Args({64, 32, 3, 64, 1})->Args({64, 32, 3, 64, 2})     \
      ->Args({64, 16, 64, 128, 1})->Args({64, 16, 64, 128, 2})->Unit(benchmark::kMillisecond) \
      ->UseRealTime()
BENCHMARK(BM_Conv2DForward) CONV_ARGS;
BENCHMARK(BM_Conv2DBackward) CONV_ARGS;
// ResNet-20's three stages at batch 128 (32x32x16, 16x16x32, 8x8x64; 3x3, stride 1), 1 thread:
// each part alone, to compare with PyTorch's convolution and its two gradients.
#define RESNET20_ARGS                                                                       \
  ->Args({128, 32, 16, 16, 1})->Args({128, 16, 32, 32, 1})->Args({128, 8, 64, 64, 1})    \
      ->Unit(benchmark::kMillisecond)->UseRealTime()
BENCHMARK(BM_Conv2DForward) RESNET20_ARGS;
BENCHMARK(BM_Conv2DBackpropInput) RESNET20_ARGS;
BENCHMARK(BM_Conv2DBackpropFilter) RESNET20_ARGS;

// Executor overhead: a chain of 1000 tiny nodes on a scalar. Identity nodes
// measure the executor alone (no allocation); Neg nodes add a tiny kernel
// and an output allocation per node.
void chain_bench(benchmark::State& state, bool identity) {
  const int nodes = 1000;
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {}, "x");
  Output y = x;
  for (int i = 0; i < nodes; ++i) y = identity ? ops::identity(y) : ops::neg(y);
  Session s(g);
  FeedDict feeds = {{x, Tensor::scalar<float>(1)}};
  for (auto _ : state) benchmark::DoNotOptimize(s.run({y}, feeds));
  // Seconds per node (printed with SI prefixes, e.g. 250n = 250 ns).
  state.counters["s/node"] = benchmark::Counter(
      static_cast<double>(nodes) * state.iterations(),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void BM_ExecutorChainIdentity(benchmark::State& state) { chain_bench(state, true); }
void BM_ExecutorChainNeg(benchmark::State& state) { chain_bench(state, false); }
BENCHMARK(BM_ExecutorChainIdentity)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ExecutorChainNeg)->Unit(benchmark::kMicrosecond);

// One optimizer step on `vars` variables of `size` elements with constant
// gradients: the fused Adam op (one op for all variables) vs the
// per-variable graph of small ops. Args: vars, size, fused (1/0).
void BM_AdamUpdate(benchmark::State& state) {
  const int64_t vars = state.range(0), size = state.range(1);
  Graph g;
  DefaultGraphGuard guard(g);
  GradsAndVars gv;
  for (int64_t i = 0; i < vars; ++i) {
    Output v = get_variable("v" + std::to_string(i), {size}, DType::F32);
    gv.push_back({ops::constant(random_f32({size}, static_cast<uint64_t>(i) + 1)), v});
  }
  AdamOptimizer opt(1e-3);
  opt.set_use_fused_ops(state.range(2) != 0);
  Node* step = opt.apply_gradients(gv);
  Node* init = global_variables_initializer();
  Session s(g);
  s.run({}, {}, {init});
  for (auto _ : state) s.run({}, {}, {step});
}
BENCHMARK(BM_AdamUpdate)
    ->ArgsProduct({{100}, {1000}, {1, 0}})
    ->Args({300, 100, 1})->Args({300, 100, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

// One full training step (forward, backward, Adam update; batch 128, f32,
// CPU) of the same two models in Spire and in libtorch, in the same process:
//   convnet: tensorpack's MNIST example (input [128,28,28,1] scaled to
//            [-1,1]; Conv 32 3x3 SAME ReLU, MaxPool 2, Conv x2, MaxPool 2,
//            Conv, FC 512 ReLU, Dropout 0.5, FC 10; softmax cross-entropy;
//            Adam 1e-3). Spire builds it with layers/layers.h in NHWC,
//            libtorch with torch::nn modules in NCHW (its native layout).
//   mlp:     784-512-512-10 ReLU, softmax cross-entropy, Adam 1e-3.
// Each runs at 1 and 2 threads (SessionOptions::num_threads,
// torch::set_num_threads + OpenBLAS's own thread count), with fixed random
// inputs, warm-up steps, then the median and best of N timed steps (wall
// clock) and the median process CPU time per step (all threads). Built
// only when CMake finds libtorch (bench/CMakeLists.txt).
//
// Usage: train_step_vs_libtorch [steps=30] [warmup=5] [max_threads=2] [spire|torch]
// (the last argument times only one engine, e.g. to profile it).
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "layers/layers.h"
#include "layers/optimizers.h"
#include "spire.h"

namespace {

constexpr int64_t kBatch = 128;

struct Timing {
  double best_ms = 0, median_ms = 0;
  double cpu_ms = 0;  // median process CPU time per step (all threads; shows load effects)
};

double process_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

Timing time_steps(const std::function<void()>& step, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms, cpu;
  for (int i = 0; i < steps; ++i) {
    const double c0 = process_cpu_ms();
    auto t0 = std::chrono::steady_clock::now();
    step();
    auto t1 = std::chrono::steady_clock::now();
    cpu.push_back(process_cpu_ms() - c0);
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  return {ms.front(), ms[ms.size() / 2], cpu[cpu.size() / 2]};
}

// Fixed inputs shared by both engines: images in [0, 1), labels in [0, 10).
struct Data {
  std::vector<float> images;  // [128, 784]
  std::vector<int32_t> labels;
};

Data make_data() {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(0, 1);
  Data d;
  d.images.resize(kBatch * 784);
  for (auto& v : d.images) v = u(rng);
  d.labels.resize(kBatch);
  for (auto& l : d.labels) l = static_cast<int32_t>(rng() % 10);
  return d;
}

// ---- Spire -------------------------------------------------------------------

spire::Output spire_convnet(const spire::Output& image) {
  using namespace spire;
  Conv2DOptions conv = Conv2DOptions().activation(activations::relu());
  Output x = image * 2.0 - 1.0;
  x = Conv2D("conv0", x, 32, 3, conv);
  x = MaxPooling("pool0", x, 2);
  x = Conv2D("conv1", x, 32, 3, conv);
  x = Conv2D("conv2", x, 32, 3, conv);
  x = MaxPooling("pool1", x, 2);
  x = Conv2D("conv3", x, 32, 3, conv);
  x = FullyConnected("fc0", x, 512, FullyConnectedOptions().activation(activations::relu()));
  x = Dropout("dropout", x, DropoutOptions().rate(0.5));
  return FullyConnected("fc1", x, 10);
}

spire::Output spire_mlp(const spire::Output& input) {
  using namespace spire;
  auto relu = FullyConnectedOptions().activation(activations::relu());
  Output x = FullyConnected("fc0", input, 512, relu);
  x = FullyConnected("fc1", x, 512, relu);
  return FullyConnected("fc2", x, 10);
}

Timing spire_step(bool convnet, int threads, const Data& d, int warmup, int steps) {
  using namespace spire;
  Graph g;
  DefaultGraphGuard guard(g);
  const Shape in_shape = convnet ? Shape{kBatch, 28, 28, 1} : Shape{kBatch, 784};
  Output input = ops::placeholder(DType::F32, in_shape, "input");
  Output labels = ops::placeholder(DType::I32, {kBatch}, "labels");
  Output logits = convnet ? spire_convnet(input) : spire_mlp(input);
  Output loss = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, labels), {}, false,
                          "loss");
  AdamOptimizer opt(1e-3);
  Node* train_op = opt.minimize(loss);
  SessionOptions options;
  options.num_threads = threads;
  Session s(g, options);
  s.run_targets({global_variables_initializer()});
  FeedDict feeds = {{input, Tensor::from_vector<float>(in_shape, d.images)},
                    {labels, Tensor::from_vector<int32_t>({kBatch}, d.labels)}};
  return time_steps([&] { s.run({loss}, feeds, {train_op}); }, warmup, steps);
}

// ---- libtorch ------------------------------------------------------------------

struct TorchConvNet : torch::nn::Module {
  torch::nn::Conv2d c0{nullptr}, c1{nullptr}, c2{nullptr}, c3{nullptr};
  torch::nn::Linear fc0{nullptr}, fc1{nullptr};
  TorchConvNet() {
    auto conv = [](int64_t in) { return torch::nn::Conv2dOptions(in, 32, 3).padding(1); };
    c0 = register_module("c0", torch::nn::Conv2d(conv(1)));
    c1 = register_module("c1", torch::nn::Conv2d(conv(32)));
    c2 = register_module("c2", torch::nn::Conv2d(conv(32)));
    c3 = register_module("c3", torch::nn::Conv2d(conv(32)));
    fc0 = register_module("fc0", torch::nn::Linear(7 * 7 * 32, 512));
    fc1 = register_module("fc1", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x * 2 - 1;
    x = torch::max_pool2d(torch::relu(c0(x)), 2);
    x = torch::relu(c1(x));
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    x = torch::relu(c3(x));
    x = torch::relu(fc0(x.flatten(1)));
    x = torch::dropout(x, 0.5, is_training());
    return fc1(x);
  }
};

struct TorchMlp : torch::nn::Module {
  torch::nn::Linear fc0{nullptr}, fc1{nullptr}, fc2{nullptr};
  TorchMlp() {
    fc0 = register_module("fc0", torch::nn::Linear(784, 512));
    fc1 = register_module("fc1", torch::nn::Linear(512, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc0(x));
    x = torch::relu(fc1(x));
    return fc2(x);
  }
};

// Debian's libtorch does not pass its thread count on to OpenBLAS (a pthreads
// build with its own pool): set both.
void set_torch_threads(int threads) {
  torch::set_num_threads(threads);
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    fn(threads);
}

template <typename Net>
Timing torch_step(int threads, const Data& d, bool nchw_image, int warmup, int steps) {
  set_torch_threads(threads);
  torch::manual_seed(0);
  auto net = std::make_shared<Net>();
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  std::vector<int64_t> shape = nchw_image ? std::vector<int64_t>{kBatch, 1, 28, 28}
                                          : std::vector<int64_t>{kBatch, 784};
  torch::Tensor input = torch::from_blob(const_cast<float*>(d.images.data()), shape,
                                         torch::kFloat32).clone();
  torch::Tensor labels = torch::from_blob(const_cast<int32_t*>(d.labels.data()), {kBatch},
                                          torch::kInt32).to(torch::kInt64);
  return time_steps(
      [&] {
        opt.zero_grad();
        torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(input), labels);
        loss.backward();
        opt.step();
        (void)loss.item<float>();
      },
      warmup, steps);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int warmup = argc > 2 ? std::atoi(argv[2]) : 5;
  const int max_threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string only = argc > 4 ? argv[4] : "";
  if (steps < 1 || warmup < 0 || max_threads < 1 || (only != "" && only != "spire" && only != "torch")) {
    std::fprintf(stderr, "usage: %s [steps>=1] [warmup>=0] [max_threads>=1] [spire|torch]\n", argv[0]);
    return 2;
  }
  const Data d = make_data();
  std::printf("training step, batch %lld, f32, CPU; %d warm-up + %d timed steps (ms: median / best)\n",
              static_cast<long long>(kBatch), warmup, steps);
  std::printf("libtorch %s\n\n", TORCH_VERSION);
  std::printf("| model | threads | Spire ms/step | libtorch ms/step | Spire/libtorch | Spire/libtorch best | CPU ms/step Spire / libtorch |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (bool convnet : {true, false}) {
    std::map<int, Timing> sp, tc;
    for (int t = 1; t <= max_threads; ++t) {
      if (only != "torch") sp[t] = spire_step(convnet, t, d, warmup, steps);
      if (only != "spire")
        tc[t] = convnet ? torch_step<TorchConvNet>(t, d, true, warmup, steps)
                        : torch_step<TorchMlp>(t, d, false, warmup, steps);
    }
    double torch_best = 1e300;
    for (auto& [t, tm] : tc) torch_best = std::min(torch_best, tm.median_ms);
    if (tc.empty()) torch_best = 0;
    for (int t = 1; t <= max_threads; ++t)
      std::printf("| %s | %d | %.2f / %.2f | %.2f / %.2f | %.2f | %.2f | %.1f / %.1f |\n",
                  convnet ? "convnet" : "mlp", t, sp[t].median_ms, sp[t].best_ms, tc[t].median_ms,
                  tc[t].best_ms, sp[t].median_ms / tc[t].median_ms, sp[t].median_ms / torch_best,
                  sp[t].cpu_ms, tc[t].cpu_ms);
    std::fflush(stdout);
  }
  return 0;
}

// K independent towers on K CPU devices vs the same K towers on one device:
// the executor's lanes running devices at the same time. Each tower is one
// training step of the MNIST convnet (examples/mnist_model.h: forward,
// backward, Adam) with its own variables and its own batch; one kernel
// thread per device in both configurations, so the only difference is
// whether the towers run side by side (one lane per device) or one after the
// other (one lane). Prints the median step time of each configuration,
// images/s and the ratio parallel / serial throughput.
//
//   ./build/bench/parallel_towers [--towers 1,2,4] [--batch 128] [--steps 5] [--windows 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "examples/mnist_model.h"
#include "spire.h"

using namespace spire;

namespace {

struct Options {
  std::vector<int> towers{1, 2, 4};
  int64_t batch = 128;
  int steps = 5;
  int windows = 5;
  int warmup = 2;
};

int parse_positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < 1 || x > 1 << 20)
    throw Error("parallel_towers: " + flag + " needs a positive integer, got '" + v + "'");
  return static_cast<int>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: parallel_towers [--towers 1,2,4] [--batch 128] [--steps 5] [--windows 5]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error("parallel_towers: '" + a + "' needs a value (see --help)");
    std::string v = argv[++i];
    if (a == "--towers") {
      o.towers.clear();
      size_t start = 0;
      while (start <= v.size()) {
        size_t comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        o.towers.push_back(parse_positive(a, v.substr(start, comma - start)));
        start = comma + 1;
      }
    } else if (a == "--batch") {
      o.batch = parse_positive(a, v);
    } else if (a == "--steps") {
      o.steps = parse_positive(a, v);
    } else if (a == "--windows") {
      o.windows = parse_positive(a, v);
    } else {
      throw Error("parallel_towers: unknown argument '" + a + "' (see --help)");
    }
  }
  return o;
}

// K towers, tower k on cpu:k (parallel) or all on cpu:0 (serial); each its own
// variables, batch and Adam step. Returns the median seconds per step of all K.
double time_towers(int k, bool parallel, const Options& o) {
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(7);
  std::vector<Node*> train_ops;
  FeedDict feeds;
  for (int t = 0; t < k; ++t) {
    DeviceScope d(g, Device::cpu(parallel ? t : 0));
    VariableScopeGuard vs("tower" + std::to_string(t));
    NameScope ns(g, "tower" + std::to_string(t));
    Output images = ops::placeholder(DType::F32, {o.batch, 28, 28}, "images");
    Output labels = ops::placeholder(DType::I64, {o.batch}, "labels");
    Output logits = spire_examples::mnist_convnet_logits(images);
    Output cost = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, labels));
    AdamOptimizer opt(1e-3);
    train_ops.push_back(opt.minimize(cost));
    Tensor x(DType::F32, {o.batch, 28, 28});
    Tensor y(DType::I64, {o.batch});
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = static_cast<float>((i * 37 + t) % 256);
    for (int64_t i = 0; i < o.batch; ++i) y.data<int64_t>()[i] = (i + t) % 10;
    feeds.push_back({images, x});
    feeds.push_back({labels, y});
  }
  SessionOptions so;
  so.num_cpu_devices = parallel ? k : 1;
  so.num_threads = parallel ? k : 1;  // one kernel thread per device either way
  Session s(g, so);
  s.run_targets({global_variables_initializer()});
  for (int i = 0; i < o.warmup; ++i) s.run_targets(train_ops, feeds);
  std::vector<double> per_step;
  for (int w = 0; w < o.windows; ++w) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.steps; ++i) s.run_targets(train_ops, feeds);
    per_step.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps);
  }
  std::sort(per_step.begin(), per_step.end());
  return per_step[per_step.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    std::printf("MNIST convnet training step (Adam), batch %lld per tower, 1 kernel thread per device;\n"
                "median of %d windows of %d steps\n\n",
                static_cast<long long>(o.batch), o.windows, o.steps);
    std::printf("%6s  %22s  %22s  %8s\n", "towers", "K devices: ms, img/s", "1 device: ms, img/s",
                "ratio");
    for (int k : o.towers) {
      const double par = time_towers(k, true, o);
      const double ser = time_towers(k, false, o);
      const double images = static_cast<double>(k * o.batch);
      std::printf("%6d  %9.1f ms %8.0f/s  %9.1f ms %8.0f/s  %7.2fx\n", k, par * 1e3, images / par,
                  ser * 1e3, images / ser, ser / par);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

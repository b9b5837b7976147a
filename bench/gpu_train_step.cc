// One training step of tensorpack's MNIST convnet on cuda:0: the model of
// examples/mnist_convnet.cc (input [B, 28, 28] in 0..255 scaled to [-1, 1];
// Conv 32 3x3 SAME ReLU, MaxPool 2, Conv x2, MaxPool 2, Conv, FC 512 ReLU,
// Dropout 0.5 (on), FC 10; mean sparse softmax cross-entropy + 1e-5 * L2 of
// the FC weights; Adam 1e-3), forward, backward and update, the whole graph
// under DeviceScope(cuda:0). Unlike the example's trainer it runs the bare
// train op (no accuracy or moving-average summaries).
//
// One random batch (images uniform in [0, 255), labels in [0, 10)), two ways:
//   resident: held in Variables on the GPU (set once); a step feeds nothing;
//   fed:      fed from host tensors every step (includes the host-to-device
//             copy of the batch, as a trainer's input pipeline would).
// Batches 128 and 512. After warm-up steps, several windows of S steps, each
// ended by spire::synchronize_device; ms/step is the median window (best
// beside it), images/s = batch / median. Also prints the loss before and
// after the timed steps (fetched outside the timing; it should fall, since
// the batch is fixed) and the GPU memory peak from the caching allocator.
//
// Usage: gpu_train_step [--quick] [--batch N] [--steps S] [--windows W]
//                       [--warmup N] [--tf32] [--csv FILE] [--help]
//   --tf32 also times each configuration with SessionOptions::allow_tf32.
// Exits 0 with a message when no CUDA device is visible. Built only with
// -DSPIRE_CUDA=ON (bench/CMakeLists.txt); bench/gpu_check.sh runs it; the
// same step in PyTorch is bench/mnist_step_torch.py.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device_backend.h"
#include "examples/mnist_model.h"
#include "spire.h"

namespace {

using namespace spire;

const Device kGpu = Device::cuda(0);

struct Options {
  std::vector<int64_t> batches = {128, 512};
  int steps = 50;
  int windows = 7;
  int warmup = 20;
  bool tf32 = false;
  std::string csv;
};

void usage(const char* argv0) {
  std::printf(
      "Usage: %s [--quick] [--batch N] [--steps S] [--windows W] [--warmup N] [--tf32]\n"
      "          [--csv FILE]\n"
      "Times the MNIST convnet training step (forward, backward, Adam; dropout on) on cuda:0.\n"
      "  --quick      3 windows of 10 steps after 5 warm-up steps\n"
      "  --batch N    only batch N (default: 128 and 512)\n"
      "  --steps S    steps per timed window (default 50)\n"
      "  --windows W  timed windows; ms/step is the median window (default 7)\n"
      "  --warmup N   untimed steps first (default 20)\n"
      "  --tf32       also time with SessionOptions::allow_tf32 = true\n"
      "  --csv FILE   also write the rows as CSV\n",
      argv0);
}

int parse_int(const std::string& flag, const char* v, int min) {
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < min || x > 1000000) {
    std::fprintf(stderr, "gpu_train_step: %s: expected an integer >= %d, got '%s'\n", flag.c_str(),
                 min, v);
    std::exit(2);
  }
  return static_cast<int>(x);
}

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--quick") {
      o->steps = 10;
      o->windows = 3;
      o->warmup = 5;
      continue;
    }
    if (a == "--tf32") {
      o->tf32 = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_train_step: unknown or incomplete argument '%s' (see --help)\n",
                   a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--batch") o->batches = {parse_int(a, v, 1)};
    else if (a == "--steps") o->steps = parse_int(a, v, 1);
    else if (a == "--windows") o->windows = parse_int(a, v, 1);
    else if (a == "--warmup") o->warmup = parse_int(a, v, 0);
    else if (a == "--csv") o->csv = v;
    else {
      std::fprintf(stderr, "gpu_train_step: unknown argument '%s' (see --help)\n", a.c_str());
      std::exit(2);
    }
  }
  return true;
}

// ---- the model (examples/mnist_model.h, as examples/mnist_convnet.cc builds it) ---------

// Returns the total cost; `input` is [B, 28, 28] f32 in 0..255, `label` [B] i64.
Output build_model(const Output& input, const Output& label) {
  Output logits = spire_examples::mnist_convnet_logits(input);
  Output cost = ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, label), {}, false,
                          "cross_entropy_loss");
  Output wd_cost = regularize_cost("fc.*/W", 1e-5, "regularize_loss");
  return ops::add(cost, wd_cost, "total_cost");
}

// ---- one configuration ------------------------------------------------------------------

struct Result {
  int64_t batch = 0;
  bool resident = false;
  bool tf32 = false;
  double median_ms = 0, best_ms = 0;
  double loss_before = 0, loss_after = 0;
  double peak_mib = 0;
  std::string error;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result run_config(int64_t batch, bool resident, bool tf32, const Options& o) {
  Result r;
  r.batch = batch;
  r.resident = resident;
  r.tf32 = tf32;
  std::fprintf(stderr, "measuring batch %lld, %s%s...\n", static_cast<long long>(batch),
               resident ? "resident" : "fed", tf32 ? ", allow_tf32" : "");

  // The batch on the host: images uniform in [0, 255), labels in [0, 10).
  Tensor images(DType::F32, {batch, 28, 28});
  Tensor labels(DType::I64, {batch});
  {
    uint64_t x = 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(batch);
    auto next = [&] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    float* p = images.data<float>();
    for (int64_t i = 0; i < images.num_elements(); ++i)
      p[i] = static_cast<float>(next() >> 40) * (255.0f / 16777216.0f);
    int64_t* q = labels.data<int64_t>();
    for (int64_t i = 0; i < batch; ++i) q[i] = static_cast<int64_t>(next() % 10);
  }

  Graph g;
  DefaultGraphGuard graph_guard(g);
  Output input, label, loss;
  Node* train_op = nullptr;
  {
    DeviceScope on_gpu(g, kGpu);
    if (resident) {
      input = ops::variable({batch, 28, 28}, DType::F32, "input");
      label = ops::variable({batch}, DType::I64, "label");
    } else {
      input = ops::placeholder(DType::F32, {batch, 28, 28}, "input");
      label = ops::placeholder(DType::I64, {batch}, "label");
    }
    loss = build_model(input, label);
    AdamOptimizer opt(1e-3);
    train_op = opt.minimize(loss);
  }
  SessionOptions so;
  so.allow_tf32 = tf32;
  Session s(g, so);
  s.run_targets({global_variables_initializer()});
  FeedDict feeds;
  if (resident) {
    s.set_variable_value(input.node, images);
    s.set_variable_value(label.node, labels);
  } else {
    feeds = {{input, images}, {label, labels}};
  }
  Allocator* gpu_alloc = get_allocator(kGpu);
  spire::synchronize_device(kGpu);
  gpu_alloc->reset_peak();

  r.loss_before = s.run({loss}, feeds)[0].item<double>();
  for (int i = 0; i < o.warmup; ++i) s.run_targets({train_op}, feeds);
  spire::synchronize_device(kGpu);
  std::vector<double> ms;
  for (int w = 0; w < o.windows; ++w) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.steps; ++i) s.run_targets({train_op}, feeds);
    spire::synchronize_device(kGpu);
    ms.push_back(seconds_since(t0) * 1e3 / o.steps);
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  r.best_ms = ms.front();
  r.loss_after = s.run({loss}, feeds)[0].item<double>();
  r.peak_mib = static_cast<double>(gpu_alloc->memory_stats().peak_in_use) / (1 << 20);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, &o)) {
    usage(argv[0]);
    return 0;
  }
  if (spire::device_count(DeviceType::CUDA) == 0) {
    std::printf("gpu_train_step: skipped: no CUDA device visible to Spire (no GPU or driver, or a "
                "build without the CUDA backend)\n");
    return 0;
  }
  std::printf("gpu_train_step: MNIST convnet training step on cuda:0 (Adam, dropout on); "
              "%d warm-up steps, %d windows of %d steps, ms/step = median window (best)\n",
              o.warmup, o.windows, o.steps);
  std::fflush(stdout);

  std::vector<Result> results;
  bool failed = false;
  std::vector<bool> tf32_modes = {false};
  if (o.tf32) tf32_modes.push_back(true);
  for (bool tf32 : tf32_modes) {
    for (int64_t batch : o.batches) {
      for (bool resident : {true, false}) {
        try {
          results.push_back(run_config(batch, resident, tf32, o));
        } catch (const std::exception& e) {
          Result r;
          r.batch = batch;
          r.resident = resident;
          r.tf32 = tf32;
          r.error = e.what();
          std::fprintf(stderr, "  FAILED: %s\n", e.what());
          results.push_back(r);
          failed = true;
        }
        try {
          spire::synchronize_device(kGpu);
          get_allocator(kGpu)->empty_cache();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "  after the run: %s\n", e.what());
          failed = true;
        }
      }
    }
  }

  std::printf("\n## gpu_train_step table\n\n");
  std::printf("| batch | input | TF32 | ms/step (median) | ms/step (best) | images/s | loss before -> "
              "after | peak GPU MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    const char* input = r.resident ? "resident" : "fed";
    if (!r.error.empty()) {
      std::string e = r.error.substr(0, 160);
      std::replace(e.begin(), e.end(), '|', '/');
      std::replace(e.begin(), e.end(), '\n', ' ');
      std::printf("| %lld | %s | %s | FAILED: %s | | | | |\n", static_cast<long long>(r.batch),
                  input, r.tf32 ? "on" : "off", e.c_str());
      continue;
    }
    const bool finite = std::isfinite(r.loss_before) && std::isfinite(r.loss_after);
    if (!finite) failed = true;
    std::printf("| %lld | %s | %s | %.3f | %.3f | %.0f | %.4f -> %.4f%s | %.0f |\n",
                static_cast<long long>(r.batch), input, r.tf32 ? "on" : "off", r.median_ms,
                r.best_ms, 1e3 * static_cast<double>(r.batch) / r.median_ms, r.loss_before,
                r.loss_after, finite ? "" : " (NOT FINITE)", r.peak_mib);
  }

  if (!o.csv.empty()) {
    FILE* f = std::fopen(o.csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "gpu_train_step: cannot write %s\n", o.csv.c_str());
      return 1;
    }
    std::fprintf(f, "batch,input,tf32,ms_median,ms_best,images_per_s,loss_before,loss_after,"
                    "peak_mib,error\n");
    for (const Result& r : results) {
      std::string e = r.error;
      std::replace(e.begin(), e.end(), '"', '\'');
      std::replace(e.begin(), e.end(), '\n', ' ');
      std::fprintf(f, "%lld,%s,%d,%.4f,%.4f,%.1f,%.6f,%.6f,%.1f,\"%s\"\n",
                   static_cast<long long>(r.batch), r.resident ? "resident" : "fed", r.tf32 ? 1 : 0,
                   r.median_ms, r.best_ms,
                   r.median_ms > 0 ? 1e3 * static_cast<double>(r.batch) / r.median_ms : 0.0,
                   r.loss_before, r.loss_after, r.peak_mib, e.c_str());
    }
    std::fclose(f);
  }
  return failed ? 1 : 0;
}

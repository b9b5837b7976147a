// One ResNet training step in Spire, timed, with the process's peak resident memory:
// the Spire half of bench/resnet_vs_torch.sh (bench/resnet_step_torch.py is the PyTorch
// half and prints the same line). The models are examples/resnet/resnet_model.cc's:
// resnet20 is tensorpack's cifar10-resnet.py (preactivation ResNet-20, 32x32x3 images,
// 10 classes, weight decay 2e-4), resnet50 its resnet_model.py ResNet-50 (224x224x3,
// 1000 classes, weight decay 1e-4), both with ImageNetModel's cost (cross-entropy + L2 of
// the '/W' weights). A step is forward, backward, the SGD update (MomentumOptimizer lr
// 0.1, momentum 0.9, Nesterov: one fused op) and BatchNorm's moving-average updates (the
// UPDATE_OPS collection, as tests/examples/resnet_parity_test.cc runs them), on one
// random batch fed every step (fake data, as tensorflow/benchmarks: N(0, 1) images,
// uniform labels) with SessionOptions::num_threads = --threads.
//
// After --warmup untimed steps it times --windows windows of --steps steps; images/s is
// batch / the median window's seconds per step; cpu_ms_per_step is the process's CPU
// time (all threads) over the timed steps, a check on a shared machine. Peak resident
// memory is VmHWM of /proc/self/status at the end (the whole process: libraries, graph,
// variables, activations). The last line is machine-readable:
//
//   RESULT engine=spire model=M batch=B threads=T images_per_s=X ms_per_step=X
//          ms_best=X cpu_ms_per_step=X peak_rss_mib=X start_rss_mib=X loss_first=X
//          loss_last=X part=P step_peak_mib=X
//
// (one line; start_rss_mib is VmRSS before the graph is built; step_peak_mib is the
// session's report of one step after the timing, Session::memory_stats: the most bytes in
// use on the device at once, variables, activations and kernel scratch included). --part forward|backward
// times less than a step, to see where a step's time goes: forward = the training-mode
// forward pass and the cost; backward = that and every gradient, without the updates.
//
// --device gpu builds the graph under DeviceScope(cuda:0) (variables, the step and the
// batch fed from the host every step, as PyTorch's half with --device cuda), times windows
// ended by synchronize_device, and adds device_peak_mib (the CUDA allocator's peak bytes in
// use) to the RESULT line; --tf32 1 lets cuBLAS/cuDNN use TF32 (off by default).
//
//   build/bench/resnet_step --model resnet50 --batch 32 --threads 2 [--steps 2]
//                           [--windows 3] [--warmup 2] [--part step] [--lr 0.1]
//                           [--device cpu|gpu] [--tf32 0|1] [--trace FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "examples/resnet/resnet_model.h"
#include "bench/bench_util.h"
#include "core/device_backend.h"
#include "spire.h"

using namespace spire;

namespace {

using spire::bench::proc_status_mib;

struct Options {
  std::string model = "resnet20";
  int64_t batch = 0;  // 0: 128 for resnet20, 32 for resnet50
  int threads = 1;
  int steps = 0;  // per window; 0: 10 for resnet20, 2 for resnet50
  int windows = 3;
  int warmup = -1;  // -1: 3 for resnet20, 2 for resnet50
  std::string part = "step";
  double lr = 0.1;
  bool gpu = false;
  bool tf32 = false;
  std::string trace;  // --trace FILE: Chrome trace of 3 steps after the timing
};

const char* kUsage =
    "usage: resnet_step [--model resnet20|resnet50] [--batch B] [--threads T] [--steps S]\n"
    "                   [--windows W] [--warmup N] [--part step|forward|backward] [--lr LR]\n"
    "                   [--device cpu|gpu] [--tf32 0|1] [--trace FILE]\n"
    "One training step of a tensorpack ResNet (resnet20: 32x32, batch 128 by default;\n"
    "resnet50: 224x224, batch 32), timed: images/s of the median of W windows of S steps\n"
    "after N warm-up steps, and the peak resident memory (VmHWM). Ends with a RESULT line.\n"
    "--trace FILE: afterwards, traces 3 more steps into FILE (Chrome trace JSON, for Perfetto)\n";

long parse_int(const std::string& flag, const std::string& v, long lo, long hi) {
  return spire::bench::parse_int_flag("resnet_step", flag, v, lo, hi);
}

// Returns false when --help was asked for.
bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return false;
    }
    if (i + 1 >= argc) throw Error("resnet_step: '" + a + "' needs a value (see --help)");
    const std::string v = argv[++i];
    if (a == "--model") {
      if (v != "resnet20" && v != "resnet50")
        throw Error("resnet_step: --model is resnet20 or resnet50, got '" + v + "'");
      o.model = v;
    } else if (a == "--batch") {
      o.batch = parse_int(a, v, 1, 1 << 16);
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_int(a, v, 1, 1024));
    } else if (a == "--steps") {
      o.steps = static_cast<int>(parse_int(a, v, 1, 1 << 20));
    } else if (a == "--windows") {
      o.windows = static_cast<int>(parse_int(a, v, 1, 1 << 20));
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(parse_int(a, v, 0, 1 << 20));
    } else if (a == "--part") {
      if (v != "step" && v != "forward" && v != "backward")
        throw Error("resnet_step: --part is step, forward or backward, got '" + v + "'");
      o.part = v;
    } else if (a == "--device") {
      if (v != "cpu" && v != "gpu")
        throw Error("resnet_step: --device is cpu or gpu, got '" + v + "'");
      o.gpu = v == "gpu";
    } else if (a == "--trace") {
      o.trace = v;
    } else if (a == "--tf32") {
      o.tf32 = parse_int(a, v, 0, 1) == 1;
    } else if (a == "--lr") {
      char* end = nullptr;
      o.lr = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.lr >= 0) || !std::isfinite(o.lr))
        throw Error("resnet_step: --lr needs a number >= 0, got '" + v + "'");
    } else {
      throw Error("resnet_step: unknown argument '" + a + "' (see --help)");
    }
  }
  const bool r20 = o.model == "resnet20";
  if (o.batch == 0) o.batch = r20 ? 128 : 32;
  if (o.steps == 0) o.steps = r20 ? 10 : 2;
  if (o.warmup < 0) o.warmup = r20 ? 3 : 2;
  return true;
}



int run(const Options& o) {
  const double start_rss = proc_status_mib("VmRSS");
  const bool r20 = o.model == "resnet20";
  const int64_t size = r20 ? 32 : 224, classes = r20 ? 10 : 1000;
  const double weight_decay = r20 ? 2e-4 : 1e-4;

  const Device device = o.gpu ? Device::cuda(0) : Device::cpu(0);
  if (o.gpu && spire::device_count(DeviceType::CUDA) == 0)
    throw Error("resnet_step: --device gpu, but no CUDA device is visible to Spire (no GPU or "
                "driver, or a build without the CUDA backend)");
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(1234);
  DeviceScope on_device(g, device);
  Output image = ops::placeholder(DType::F32, {o.batch, size, size, 3}, "image");
  Output label = ops::placeholder(DType::I64, {o.batch}, "label");
  Output cost;
  {
    TowerContext tower("", true);
    Output logits = r20 ? spire_examples::cifar_resnet(image, 20, classes,
                                                       spire_examples::CifarResNetMode::kPreact)
                        : spire_examples::imagenet_resnet(image, 50, classes);
    cost = spire_examples::classification_cost(logits, label, weight_decay);
  }
  MomentumOptimizer opt(o.lr, 0.9, /*use_nesterov=*/true);
  GradsAndVars grads = opt.compute_gradients(cost);
  std::vector<Node*> targets;
  if (o.part == "backward") {
    for (const GradAndVar& gv : grads) targets.push_back(gv.first.node);
  } else if (o.part == "step") {
    targets.push_back(opt.apply_gradients(grads));
    for (const Output& u : g.get_collection(GraphKeys::UPDATE_OPS)) targets.push_back(u.node);
  }

  std::mt19937_64 rng(42);
  Tensor x(DType::F32, Shape{o.batch, size, size, 3});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = normal(rng);
  Tensor y(DType::I64, Shape{o.batch});
  std::uniform_int_distribution<int64_t> pick(0, classes - 1);
  for (int64_t i = 0; i < o.batch; ++i) y.data<int64_t>()[i] = pick(rng);
  const FeedDict feeds = {{image, x}, {label, y}};

  SessionOptions so;
  so.num_threads = o.threads;
  so.allow_tf32 = o.tf32;
  Session s(g, so);
  s.run_targets({global_variables_initializer(&g)});
  // Fetching the cost copies it to the host, which waits for the step's device work.
  auto step = [&] { return s.run({cost}, feeds, targets)[0].element_as_double(0); };
  Allocator* device_alloc = get_allocator(device);
  if (o.gpu) {
    spire::synchronize_device(device);
    device_alloc->reset_peak();
  }

  std::fprintf(stderr, "resnet_step: %s batch %lld on %s, %d threads, part %s: %d warm-up steps, "
               "%d windows of %d steps\n", o.model.c_str(), static_cast<long long>(o.batch),
               device.to_string().c_str(), o.threads, o.part.c_str(), o.warmup, o.windows, o.steps);
  double loss_first = std::nan(""), loss_last = std::nan("");
  for (int i = 0; i < o.warmup; ++i) {
    loss_last = step();
    if (i == 0) loss_first = loss_last;
  }
  const spire::bench::WindowTimes t = spire::bench::time_windows(
      o.windows, o.steps,
      [&] {
        loss_last = step();
        if (std::isnan(loss_first)) loss_first = loss_last;
      },
      [&] {
        if (o.gpu) spire::synchronize_device(device);  // the last step's updates too
      },
      [&](int w, double seconds) {
        std::fprintf(stderr, "resnet_step: window %d: %.1f ms/step, loss %.4f\n", w, seconds * 1e3, loss_last);
      });
  const double median = t.median();
  // The session's own report of one step's peak: every tensor and scratch buffer in use on
  // the device at once (variables included), after warm-up.
  if (o.gpu) spire::synchronize_device(device);
  const double device_peak_before = static_cast<double>(device_alloc->memory_stats().peak_in_use);
  s.reset_peak_memory(device);
  step();
  if (o.gpu) spire::synchronize_device(device);
  const double step_peak_mib = static_cast<double>(s.memory_stats(device).peak_in_use) / (1 << 20);
  std::string device_fields;
  if (o.gpu) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " device=gpu tf32=%d device_peak_mib=%.1f", o.tf32 ? 1 : 0,
                  std::max(device_peak_before, static_cast<double>(device_alloc->memory_stats().peak_in_use)) /
                      (1 << 20));
    device_fields = buf;
  }
  if (!o.trace.empty()) {
    std::vector<StepStats> traced(3);
    for (StepStats& st : traced) s.run({cost}, feeds, targets, &st);
    write_chrome_trace(o.trace, traced, 0, "resnet_step " + o.model);
    std::fprintf(stderr, "resnet_step: trace of 3 steps in %s\n%s", o.trace.c_str(),
                 op_time_summary(traced).c_str());
  }
  std::printf("RESULT engine=spire model=%s batch=%lld threads=%d images_per_s=%.2f "
              "ms_per_step=%.2f ms_best=%.2f cpu_ms_per_step=%.2f peak_rss_mib=%.1f start_rss_mib=%.1f "
              "loss_first=%.4f loss_last=%.4f part=%s step_peak_mib=%.1f%s\n",
              o.model.c_str(), static_cast<long long>(o.batch), o.threads,
              static_cast<double>(o.batch) / median, median * 1e3, t.best() * 1e3,
              t.cpu_per_step * 1e3, proc_status_mib("VmHWM"), start_rss, loss_first, loss_last,
              o.part.c_str(), step_peak_mib, device_fields.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    if (!parse(argc, argv, o)) return 0;
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

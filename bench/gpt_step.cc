// One GPT training step in Spire, timed, with the process's peak resident memory: the Spire
// half of bench/gpt_vs_torch.sh (bench/nanogpt_torch.py step is the PyTorch half and prints
// the same RESULT line). The model is examples/gpt/gpt_model.cc's nanoGPT; a step is
// forward, backward, clip_grad_norm_(1.0) and AdamW (lr 1e-3, betas 0.9/0.99, weight decay
// 0.1 on the rank-2 variables), on one random batch of tokens fed every step, dropout off.
// --precision bf16 runs the matmuls in bf16 with f32 master weights (PyTorch's half runs
// under torch.autocast("cpu", bfloat16)).
//
// After --warmup untimed steps it times --windows windows of --steps steps; tokens/s is
// batch * block_size / the median window's seconds per step. The last line:
//
//   RESULT engine=spire config=C precision=P threads=T tokens_per_s=X ms_per_step=X
//          ms_best=X cpu_ms_per_step=X peak_rss_mib=X start_rss_mib=X loss_last=X
//          step_peak_mib=X (the session's report of one step's peak, Session::memory_stats)
//
// --device gpu builds the graph under DeviceScope(cuda:0) (the batch fed from the host every
// step), ends each window with synchronize_device and adds device_peak_mib (the CUDA
// allocator's peak bytes in use) to the RESULT line (PyTorch's half: --device cuda).
//
//   build/bench/gpt_step --config baby|shakespeare_char [--batch B] [--threads T]
//                        [--precision f32|bf16] [--steps S] [--windows W] [--warmup N]
//                        [--device cpu|gpu]
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/device_backend.h"
#include "examples/gpt/gpt_model.h"
#include "spire.h"

using namespace spire;

namespace {

using spire::bench::proc_status_mib;

struct Options {
  std::string config = "baby";
  int64_t batch = 0;  // 0: 12 (baby), 8 (shakespeare_char)
  int threads = 1;
  std::string precision = "f32";
  int steps = 0;   // 0: 10 (baby), 2 (shakespeare_char)
  int windows = 3;
  int warmup = 2;
  bool gpu = false;
  std::string trace;  // --trace FILE: Chrome trace of 3 steps after the timing
};

const char* kUsage =
    "usage: gpt_step [--config baby|shakespeare_char] [--batch B] [--threads T]\n"
    "                [--precision f32|bf16] [--steps S] [--windows W] [--warmup N]\n"
    "                [--device cpu|gpu] [--trace FILE]\n"
    "One nanoGPT training step (forward, backward, clipping, AdamW), timed: tokens/s of the\n"
    "median of W windows of S steps after N warm-up steps, and the peak resident memory.\n"
    "--trace FILE: afterwards, traces 3 more steps into FILE (Chrome trace JSON, for Perfetto)\n"
    "and prints where their time went, per op type, to stderr.\n";

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return false;
    }
    if (i + 1 >= argc) throw Error("gpt_step: '" + a + "' needs a value (see --help)");
    const std::string v = argv[++i];
    auto num = [&](long lo, long hi) { return spire::bench::parse_int_flag("gpt_step", a, v, lo, hi); };
    if (a == "--config") {
      if (v != "baby" && v != "shakespeare_char")
        throw Error("gpt_step: --config is baby or shakespeare_char, got '" + v + "'");
      o.config = v;
    } else if (a == "--batch") {
      o.batch = num(1, 1 << 16);
    } else if (a == "--threads") {
      o.threads = static_cast<int>(num(1, 1024));
    } else if (a == "--precision") {
      if (v != "f32" && v != "bf16") throw Error("gpt_step: --precision is f32 or bf16, got '" + v + "'");
      o.precision = v;
    } else if (a == "--device") {
      if (v != "cpu" && v != "gpu") throw Error("gpt_step: --device is cpu or gpu, got '" + v + "'");
      o.gpu = v == "gpu";
    } else if (a == "--steps") {
      o.steps = static_cast<int>(num(1, 1 << 20));
    } else if (a == "--windows") {
      o.windows = static_cast<int>(num(1, 1 << 20));
    } else if (a == "--trace") {
      o.trace = v;
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(num(0, 1 << 20));
    } else {
      throw Error("gpt_step: unknown argument '" + a + "' (see --help)");
    }
  }
  const bool baby = o.config == "baby";
  if (o.batch == 0) o.batch = baby ? 12 : 8;
  if (o.steps == 0) o.steps = baby ? 10 : 2;
  return true;
}



int run(const Options& o) {
  const double start_rss = proc_status_mib("VmRSS");
  spire_examples::GptConfig c;  // baby: 4 layers, 4 heads, 128 wide, context 64
  if (o.config == "shakespeare_char") c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256;
  c.vocab_size = 65;
  const int64_t T = c.block_size;
  const Device device = o.gpu ? Device::cuda(0) : Device::cpu(0);
  if (o.gpu && spire::device_count(DeviceType::CUDA) == 0)
    throw Error("gpt_step: --device gpu, but no CUDA device is visible to Spire");
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(1234);
  DeviceScope on_device(g, device);
  set_precision_policy(o.precision == "bf16" ? PrecisionPolicy::kMixedBFloat16 : PrecisionPolicy::kFloat32);
  Output idx = ops::placeholder(DType::I64, {o.batch, T}, "idx");
  Output targets = ops::placeholder(DType::I64, {o.batch, T}, "targets");
  Output loss;
  {
    TowerContext tower("", true);
    loss = spire_examples::gpt_loss(spire_examples::gpt_logits(idx, c), targets);
  }
  auto adamw = std::make_shared<AdamWOptimizer>(1e-3, 0.1, 0.9, 0.99, 1e-8);
  adamw->set_weight_decay_filter(decay_if_rank_at_least(2));
  Node* train_op = apply_grad_processors(adamw, {GlobalNormClip(1.0, ClipNormSemantics::kTorch)})->minimize(loss);

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> pick(0, c.vocab_size - 1);
  Tensor x(DType::I64, Shape{o.batch, T}), y(DType::I64, Shape{o.batch, T});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<int64_t>()[i] = pick(rng), y.data<int64_t>()[i] = pick(rng);
  const FeedDict feeds = {{idx, x}, {targets, y}};
  SessionOptions so;
  so.num_threads = o.threads;
  Session s(g, so);
  s.run_targets({global_variables_initializer(&g)});
  auto step = [&] { return s.run({loss}, feeds, {train_op})[0].element_as_double(0); };
  Allocator* device_alloc = get_allocator(device);
  if (o.gpu) spire::synchronize_device(device), device_alloc->reset_peak();

  std::fprintf(stderr, "gpt_step: %s (%.2fM parameters) batch %lld x %lld, %s, %d threads: %d warm-up steps, "
               "%d windows of %d steps\n", o.config.c_str(), c.num_parameters() / 1e6,
               static_cast<long long>(o.batch), static_cast<long long>(T), o.precision.c_str(), o.threads,
               o.warmup, o.windows, o.steps);
  double loss_last = 0;
  for (int i = 0; i < o.warmup; ++i) loss_last = step();
  const spire::bench::WindowTimes t = spire::bench::time_windows(
      o.windows, o.steps, [&] { loss_last = step(); },
      [&] {
        if (o.gpu) spire::synchronize_device(device);
      },
      [](int, double) {});
  const double median = t.median();
  char gpu_fields[80] = "";
  if (o.gpu)
    std::snprintf(gpu_fields, sizeof gpu_fields, " device=gpu device_peak_mib=%.1f",
                  static_cast<double>(device_alloc->memory_stats().peak_in_use) / (1 << 20));
  // The session's report of one step's peak (Session::memory_stats: every tensor and scratch
  // buffer in use on the device at once, variables included).
  if (o.gpu) spire::synchronize_device(device);
  s.reset_peak_memory(device);
  loss_last = step();
  if (o.gpu) spire::synchronize_device(device);
  const double step_peak_mib = static_cast<double>(s.memory_stats(device).peak_in_use) / (1 << 20);
  std::printf("RESULT engine=spire config=%s precision=%s threads=%d tokens_per_s=%.1f ms_per_step=%.2f "
              "ms_best=%.2f cpu_ms_per_step=%.2f peak_rss_mib=%.1f start_rss_mib=%.1f loss_last=%.4f "
              "step_peak_mib=%.1f%s\n",
              o.config.c_str(), o.precision.c_str(), o.threads, static_cast<double>(o.batch * T) / median,
              median * 1e3, t.best() * 1e3, t.cpu_per_step * 1e3, proc_status_mib("VmHWM"), start_rss,
              loss_last, step_peak_mib, gpu_fields);
  if (!o.trace.empty()) {
    std::vector<StepStats> traced(3);
    for (StepStats& st : traced) s.run({loss}, feeds, {train_op}, &st);
    write_chrome_trace(o.trace, traced, 0, "gpt_step " + o.config + " " + o.precision);
    std::fprintf(stderr, "gpt_step: trace of 3 steps in %s\n%s", o.trace.c_str(),
                 op_time_summary(traced).c_str());
  }
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

// Allreduce bus bandwidth of a communicator on N devices, as nccl-tests
// defines it: algbw = S / t for S bytes per participant, busbw = algbw x
// 2(N-1)/N (the bandwidth each link of an ideal ring would need). As in
// nccl-tests, the busbw column times the communicator alone on preallocated
// buffers, one thread per participant (the executor's lane threads); the
// "graph op" column times the AllReduce node run by a Session (inputs
// resident in variables, a fresh output per run), the way training uses it.
// Each row also prints a copy of S bytes measured in the same run as the
// ceiling to compare with (CPU: memcpy on one thread; GPU: a
// device-to-device copy on cuda:0), and busbw / copy.
//
//   ./build/bench/allreduce_bandwidth [--devices 2,4,8] [--min 4K] [--max 256M]
//       [--device cpu|cuda] [--communicator ring|nccl]
// bench/gpu_check.sh runs it on GPUs with Spire's ring and with NCCL.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spire.h"

using namespace spire;

namespace {

struct Options {
  std::vector<int> devices{2, 4, 8};
  DeviceType type = DeviceType::CPU;
  std::string communicator = "ring";
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  double min_seconds = 0.2;  // per measurement
};

int64_t parse_size(const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string unit(end);
  double m = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (end == v.c_str() || m < 0 || x <= 0) throw Error("allreduce_bandwidth: bad size '" + v + "' (e.g. 4K, 256M)");
  return static_cast<int64_t>(x * m);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: allreduce_bandwidth [--devices 2,4,8] [--min 4K] [--max 256M] [--seconds 0.2]\n"
                  "                           [--device cpu|cuda] [--communicator ring|nccl]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error("allreduce_bandwidth: '" + a + "' needs a value");
    std::string v = argv[++i];
    if (a == "--devices") {
      o.devices.clear();
      size_t s = 0;
      while (s <= v.size()) {
        size_t c = v.find(',', s);
        if (c == std::string::npos) c = v.size();
        o.devices.push_back(std::atoi(v.substr(s, c - s).c_str()));
        if (o.devices.back() < 1) throw Error("allreduce_bandwidth: bad device count in '" + v + "'");
        s = c + 1;
      }
    } else if (a == "--min") {
      o.min_bytes = parse_size(v);
    } else if (a == "--max") {
      o.max_bytes = parse_size(v);
    } else if (a == "--device") {
      o.type = Device::parse(v).type;
    } else if (a == "--communicator") {
      if (v != "ring" && v != "nccl") throw Error("allreduce_bandwidth: --communicator is ring or nccl");
      o.communicator = v;
    } else if (a == "--seconds") {
      o.min_seconds = std::atof(v.c_str());
    } else {
      throw Error("allreduce_bandwidth: unknown argument '" + a + "'");
    }
  }
  return o;
}

using Clock = std::chrono::steady_clock;

// Median seconds per call of fn, with enough calls to fill min_seconds (at
// least 3 timed windows after a warm-up call).
template <typename Fn>
double time_it(Fn fn, double min_seconds) {
  fn();
  auto t0 = Clock::now();
  fn();
  double one = std::chrono::duration<double>(Clock::now() - t0).count();
  int reps = std::max(1, static_cast<int>(min_seconds / 3 / std::max(one, 1e-7)));
  std::vector<double> windows;
  for (int w = 0; w < 3; ++w) {
    auto s = Clock::now();
    for (int r = 0; r < reps; ++r) fn();
    windows.push_back(std::chrono::duration<double>(Clock::now() - s).count() / reps);
  }
  std::sort(windows.begin(), windows.end());
  return windows[1];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    const bool gpu = o.type == DeviceType::CUDA;
    if (gpu && device_count(DeviceType::CUDA) == 0) {
      std::printf("skipped: no CUDA device is visible (or this build has no CUDA backend)\n");
      return 0;
    }
    std::printf("## allreduce_bandwidth table (%s, communicator %s)\n", gpu ? "GPUs" : "CPU devices",
                o.communicator.c_str());
    std::printf("allreduce (sum, f32) on N %s, one lane each; busbw = algbw * 2(N-1)/N (nccl-tests);\n"
                "copy = %s copying S bytes, measured in the same run.\n\n",
                gpu ? "GPUs" : "CPU devices", gpu ? "cuda:0" : "one thread (memcpy)");
    std::printf("%3s %10s %10s %10s %10s %10s %8s %12s\n", "N", "size", "time us", "algbw GB/s",
                "busbw GB/s", "copy GB/s", "bus/copy", "graph op us");
    for (int n : o.devices) {
      for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
        const int64_t count = bytes / 4;
        Graph g;
        DefaultGraphGuard guard(g);
        std::vector<Output> xs;
        std::vector<Device> devs;
        for (int k = 0; k < n; ++k) {
          devs.push_back(Device{o.type, k});
          DeviceScope d(g, devs.back());
          xs.push_back(ops::variable({count}, DType::F32, "x" + std::to_string(k)));
        }
        dist::CollectiveOptions co;
        co.communicator = o.communicator;
        Node* ar = dist::all_reduce(xs, dist::ReduceOp::kSum, co)[0].node;
        SessionOptions so;
        so.num_cpu_devices = gpu ? 1 : n;
        so.num_threads = gpu ? 1 : n;
        Session s(g, so);
        for (int k = 0; k < n; ++k) s.set_variable_value(xs[k].node, Tensor::full(DType::F32, {count}, k + 1));
        const double t_op = time_it([&] {
          s.run_targets({ar});
          for (const Device& d : devs) synchronize_device(d);  // GPU work is asynchronous
        }, o.min_seconds);
        // The communicator alone (the session's, as the node uses it), one lane thread per
        // participant, on preallocated buffers.
        auto comm = s.resource<dist::Communicator>(dist::communicator_key(o.communicator, devs));
        if (!comm) throw Error("allreduce_bandwidth: the session made no communicator");
        std::vector<Tensor> ins, outs;
        for (int k = 0; k < n; ++k) {
          ins.push_back(Tensor::full(DType::F32, {count}, k + 1).to(devs[k]));
          outs.push_back(Tensor(DType::F32, {count}, devs[k]));
        }
        LaneThreads lanes;
        RunContext run;
        run.timeout = std::chrono::seconds(600);
        uint64_t key = 0;
        const double t = time_it([&] {
          dist::CollectiveCall call;
          call.key = {&lanes, 0, ++key};
          call.name = "allreduce_bandwidth";
          call.run = &run;
          std::vector<std::function<void()>> tasks;
          for (int k = 0; k < n; ++k)
            tasks.push_back([&, k] {
              std::vector<dist::Participant> part{{k, ins[k], outs[k]}};
              comm->allreduce(call, part, dist::ReduceOp::kSum);
            });
          lanes.run(tasks);
          for (const Device& d : devs) synchronize_device(d);
        }, o.min_seconds);
        // The ceiling: the same bytes copied once (one CPU thread, or on cuda:0).
        double tc = 0;
        if (gpu) {
          Tensor a = Tensor::full(DType::F32, {count}, 1).to(devs[0]);
          tc = time_it([&] {
            Tensor b = a.clone();
            synchronize_device(devs[0]);
          }, o.min_seconds / 2);
        } else {
          std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
          tc = time_it([&] { std::memcpy(dst.data(), src.data(), src.size()); }, o.min_seconds / 2);
        }
        const double algbw = static_cast<double>(bytes) / t / 1e9;
        const double busbw = algbw * 2.0 * (n - 1) / n;
        const double cpy = static_cast<double>(bytes) / tc / 1e9;
        char size[32];
        if (bytes >= (1 << 20)) std::snprintf(size, sizeof size, "%lld MiB", static_cast<long long>(bytes >> 20));
        else std::snprintf(size, sizeof size, "%lld KiB", static_cast<long long>(bytes >> 10));
        std::printf("%3d %10s %10.1f %10.2f %10.2f %10.2f %8.2f %12.1f\n", n, size, t * 1e6, algbw,
                    busbw, cpy, busbw / cpy, t_op * 1e6);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

// Allreduce across MPI ranks: Spire's ring over MPI point-to-point
// (MpiAlgorithm::kRing) against MPI_Allreduce (MpiAlgorithm::kMpi) in the
// same run, f32 sum, sizes from --min to --max (powers of 4). Prints the
// median time of --reps calls (after a warm-up), bus bandwidth as
// nccl-tests defines it (S/t x 2(n-1)/n) and the ring/MPI time ratio (> 1:
// the ring is faster). Run under mpirun, e.g.
//   mpirun -np 2 build/bench/mpi_allreduce_bandwidth [--min 4K] [--max 64M] [--reps 9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/mpi_communicator.h"

using namespace spire;
using namespace spire::dist;

namespace {

int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (!unit.empty()) throw_error("bad size '", s, "' (use e.g. 4K, 64M)");
  return static_cast<int64_t>(v);
}

std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// Median seconds of `reps` allreduces of `count` floats (after one warm-up).
double time_allreduce(MpiCommunicator& comm, int64_t count, int reps) {
  Tensor in(DType::F32, Shape{count}), out(DType::F32, Shape{count});
  for (int64_t i = 0; i < count; ++i) in.data<float>()[i] = static_cast<float>(i % 7);
  std::vector<Participant> parts{{0, in, out}};
  CollectiveCall call;
  call.name = "bench";
  std::vector<double> secs;
  for (int r = 0; r <= reps; ++r) {
    std::vector<Participant> none;
    comm.barrier(call, none);
    auto t0 = std::chrono::steady_clock::now();
    comm.allreduce(call, parts, ReduceOp::kSum);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) secs.push_back(s);
  }
  std::sort(secs.begin(), secs.end());
  return secs[secs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t lo = 4 << 10, hi = 64 << 20;
    int reps = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string k = argv[i], v = argv[i + 1];
      if (k == "--min") lo = parse_size(v);
      else if (k == "--max") hi = parse_size(v);
      else if (k == "--reps") reps = std::max(1, std::atoi(v.c_str()));
      else throw_error("unknown argument ", k);
    }
    MpiRuntime& rt = MpiRuntime::get();
    MpiCommunicator ring(Device::cpu(), 120, MpiAlgorithm::kRing);
    MpiCommunicator mpi(Device::cpu(), 120, MpiAlgorithm::kMpi);
    const int n = rt.size();
    if (rt.rank() == 0)
      std::printf("allreduce f32 sum, %d ranks, median of %d\n%10s %12s %12s %12s %12s %8s\n", n, reps,
                  "size", "ring time", "ring busbw", "MPI time", "MPI busbw", "MPI/ring");
    for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
      const int64_t count = bytes / 4;
      double tr = time_allreduce(ring, count, reps);
      double tm = time_allreduce(mpi, count, reps);
      const double factor = 2.0 * (n - 1) / n;
      if (rt.rank() == 0)
        std::printf("%10s %10.1f us %9.2f GB/s %9.1f us %9.2f GB/s %8.2f\n", human(bytes).c_str(), tr * 1e6,
                    bytes / tr * factor / 1e9, tm * 1e6, bytes / tm * factor / 1e9, tm / tr);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

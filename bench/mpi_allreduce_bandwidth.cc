// Allreduce across MPI ranks: Spire's default (MpiAlgorithm::kAuto: the
// measured link model picks recursive doubling, halving-doubling or the ring
// per size), each of the three forced, against MPI_Allreduce
// (MpiAlgorithm::kMpi) in the same run, f32 sum, sizes from --min to --max
// (powers of 4), the calls of the five interleaved. Prints the median time
// of --reps calls of each (after a warm-up),
// bus bandwidth as nccl-tests defines it (S/t x 2(n-1)/n), the algorithm
// auto chose, and the MPI/Spire time ratio (> 1: Spire is faster). Run
// under mpirun, e.g.
//   mpirun -np 2 build/bench/mpi_allreduce_bandwidth [--min 4K] [--max 256M] [--reps 9] [--segment 256K]
//       [--wire-segment 63K]   (MpiCommunicator's segments within and across hosts; default: its own)
//       [--warm 1]   (untimed calls of the same communicator before each timed one: a call's
//                     time depends on the one before it; see below)
//       [--min-seconds 0.3]   (more reps, up to 101, where --reps rounds of the five take less)
//       [--csv FILE --setting NAME]   (rows for bench/scaling_sim.py fit and
//                                      bench/plot_scaling.py, with a memcpy row per size)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Seconds of a benchmark's repeated calls: the median (what the tables and
// bench/scaling_sim.py use) and the fastest (noise on a shared machine only
// adds time; on the dev VM the fastest varied between runs as much as the
// median did, so it is written beside it, not instead).
struct Timing {
  double median = 0.0;
  double best = 0.0;
};

Timing timing_of(std::vector<double> secs) {
  std::sort(secs.begin(), secs.end());
  return {secs[secs.size() / 2], secs.front()};
}

// Seconds of `reps` allreduces of `count` floats on each of `comms`,
// interleaved (rep r calls every communicator once, starting at r % k), so
// every algorithm sees the same conditions over the run; one warm-up each.
// `warm` untimed calls of the same communicator come before each timed
// one: over TCP a call after one that sent whole buffers (recursive
// doubling, MPI_Allreduce) was 20-25% slower than after a segmented one,
// so without them the order of the communicators shows in their times (2
// ranks, 4 MiB: the ring 1.21 ms right after auto's ring, 1.55 ms as auto
// right after MPI_Allreduce). A training loop calls one algorithm per
// bucket again and again: warm calls measure that.
// A call's time is the slowest rank's (each rank times its own call after
// a barrier; the times are gathered once all reps are done).
// `min_seconds` > 0: more reps where `reps` rounds of calls would take less
// (the warm-up round's slowest rank times it; at most 101 reps), so the
// median of a few-ms call rests on more than a handful of calls: one such
// row varied 20-60% between runs at 7 reps on the dev VM.
std::vector<Timing> time_allreduces(const std::vector<MpiCommunicator*>& comms, int64_t count, int reps, int warm,
                                    double min_seconds) {
  Tensor in(DType::F32, Shape{count}), out(DType::F32, Shape{count});
  for (int64_t i = 0; i < count; ++i) in.data<float>()[i] = static_cast<float>(i % 7);
  std::vector<Participant> parts{{0, in, out}};
  CollectiveCall call;
  call.name = "bench";
  const size_t k = comms.size();
  std::vector<std::vector<double>> secs(k);
  for (int r = -1; r < reps; ++r) {
    const auto round_start = std::chrono::steady_clock::now();
    for (size_t j = 0; j < k; ++j) {
      MpiCommunicator& comm = *comms[(j + static_cast<size_t>(std::max(r, 0))) % k];
      std::vector<Participant> none;
      for (int w = 0; w < warm; ++w) comm.allreduce(call, parts, ReduceOp::kSum);
      comm.barrier(call, none);
      auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(call, parts, ReduceOp::kSum);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) secs[(j + static_cast<size_t>(r)) % k].push_back(s);
    }
    if (r == -1 && min_seconds > 0) {
      // Every rank must run as many rounds: the slowest rank's round decides.
      Tensor mine(DType::F64, Shape{1}), slowest(DType::F64, Shape{1});
      mine.data<double>()[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count();
      std::vector<Participant> p{{0, mine, slowest}};
      CollectiveCall agree;
      agree.name = "bench round";
      comms.back()->allreduce(agree, p, ReduceOp::kMax);
      const double round = std::max(slowest.data<double>()[0], 1e-9);
      reps = std::max(reps, std::min(101, static_cast<int>(std::ceil(min_seconds / round))));
    }
  }
  // Every call's slowest rank: one max-allreduce of all the times (MPI's).
  const size_t per = static_cast<size_t>(reps);
  Tensor mine(DType::F64, Shape{static_cast<int64_t>(k * per)}), slowest(DType::F64, Shape{static_cast<int64_t>(k * per)});
  for (size_t j = 0; j < k; ++j)
    for (size_t r = 0; r < per; ++r) mine.data<double>()[j * per + r] = secs[j][r];
  std::vector<Participant> p{{0, mine, slowest}};
  CollectiveCall gather;
  gather.name = "bench times";
  comms.back()->allreduce(gather, p, ReduceOp::kMax);
  std::vector<Timing> result;
  for (size_t j = 0; j < k; ++j)
    result.push_back(
        timing_of(std::vector<double>(slowest.data<double>() + j * per, slowest.data<double>() + (j + 1) * per)));
  return result;
}

// Seconds of `reps` memcpys of `bytes` on every rank at once (after a
// barrier; rank 0's): the copy ceiling the plots draw beside the allreduces.
Timing time_memcpy(MpiCommunicator& comm, int64_t bytes, int reps) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
  CollectiveCall call;
  call.name = "memcpy";
  std::vector<double> secs;
  for (int r = -1; r < reps; ++r) {
    std::vector<Participant> none;
    comm.barrier(call, none);
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) secs.push_back(s);
  }
  return timing_of(secs);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t lo = 4 << 10, hi = 256 << 20;
    int reps = 9;
    int warm = 0;
    double min_seconds = 0.0;
    std::string csv_path, setting = "default";
    int64_t segment = 256 << 10;  // the pipelined algorithms' segment (MpiCommunicator's default)
    int64_t wire_segment = 0;     // across hosts (0: MpiCommunicator's choice, TCP's eager limit)
    for (int i = 1; i < argc; i += 2) {
      std::string k = argv[i];
      if (i + 1 >= argc) throw_error("argument ", k, " needs a value");
      std::string v = argv[i + 1];
      if (k == "--min") lo = parse_size(v);
      else if (k == "--max") hi = parse_size(v);
      else if (k == "--reps") reps = std::max(1, std::atoi(v.c_str()));
      else if (k == "--warm") warm = std::max(0, std::atoi(v.c_str()));
      else if (k == "--min-seconds") min_seconds = std::max(0.0, std::atof(v.c_str()));
      else if (k == "--csv") csv_path = v;
      else if (k == "--setting") setting = v;
      else if (k == "--segment") segment = parse_size(v);
      else if (k == "--wire-segment") wire_segment = parse_size(v);
      else throw_error("unknown argument ", k);
    }
    MpiRuntime& rt = MpiRuntime::get();
    // --csv FILE: rank 0 appends one row per size and communicator
    // (setting, ranks, hosts, bytes, algorithm, median seconds, fastest) for
    // bench/scaling_sim.py fit; --setting names the machine/link setting.
    // (Opened first: a rank that cannot open it fails before any collective.)
    std::FILE* csv = nullptr;
    if (rt.rank() == 0 && !csv_path.empty()) {
      std::FILE* probe = std::fopen(csv_path.c_str(), "r");
      const bool fresh = probe == nullptr;
      if (probe) std::fclose(probe);
      csv = std::fopen(csv_path.c_str(), "a");
      if (!csv) throw_error("--csv: cannot open '", csv_path, "' for appending");
      if (fresh) std::fprintf(csv, "setting,ranks,hosts,bytes,algorithm,seconds,best\n");
    }
    MpiCommunicator spire(Device::cpu(), 120, MpiAlgorithm::kAuto, segment, wire_segment);
    MpiCommunicator ring(Device::cpu(), 120, MpiAlgorithm::kRing, segment, wire_segment);
    MpiCommunicator rd(Device::cpu(), 120, MpiAlgorithm::kRecursiveDoubling, segment, wire_segment);
    MpiCommunicator hd(Device::cpu(), 120, MpiAlgorithm::kHalvingDoubling, segment, wire_segment);
    MpiCommunicator mpi(Device::cpu(), 120, MpiAlgorithm::kMpi, segment, wire_segment);
    const int n = rt.size();
    // Hosts: the ranks that are first on theirs, counted.
    int hosts = 1;
    {
      Tensor first(DType::F32, Shape{1}), count(DType::F32, Shape{1});
      first.data<float>()[0] = rt.local_rank() == 0 ? 1.0f : 0.0f;
      std::vector<Participant> p{{0, first, count}};
      CollectiveCall call;
      call.name = "hosts";
      mpi.allreduce(call, p, ReduceOp::kSum);
      hosts = static_cast<int>(count.data<float>()[0]);
    }
    if (rt.rank() == 0)
      std::printf("segments: %lld KiB to rank %d, %lld KiB to rank %d (%s transport between ranks of a host)\n",
                  static_cast<long long>(spire.segment_bytes_to(n - 1) >> 10), n - 1,
                  static_cast<long long>(spire.segment_bytes_to(n > 1 ? 1 : 0) >> 10), n > 1 ? 1 : 0,
                  rt.shared_memory_transport() ? "shared-memory" : "no shared-memory");
    if (rt.rank() == 0)
      std::printf("allreduce f32 sum, %d ranks, median of %d%s; busbw in GB/s\n%10s %12s %8s %5s %8s %8s %8s %8s %12s %9s\n",
                  n, reps, min_seconds > 0 ? " or more calls (--min-seconds)" : "", "size", "Spire time", "busbw", "(alg)", "ring", "rec-dbl", "halv-dbl", "MPI", "MPI time",
                  "MPI/Spire");
    for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
      const int64_t count = bytes / 4;
      const std::vector<Timing> t = time_allreduces({&spire, &ring, &rd, &hd, &mpi}, count, reps, warm, min_seconds);
      const double ta = t[0].median, tr = t[1].median, td = t[2].median, th = t[3].median, tm = t[4].median;
      const MpiAlgorithm a = spire.last_allreduce_algorithm();
      const char* chose = a == MpiAlgorithm::kRing ? "ring" : a == MpiAlgorithm::kHalvingDoubling ? "hd" : "rd";
      const double factor = 2.0 * (n - 1) / n;
      auto bw = [&](double t) { return bytes / t * factor / 1e9; };
      if (rt.rank() == 0)
        std::printf("%10s %9.1f us %8.2f %5s %8.2f %8.2f %8.2f %8.2f %9.1f us %9.2f\n", human(bytes).c_str(), ta * 1e6,
                    bw(ta), chose, bw(tr), bw(td), bw(th), bw(tm), tm * 1e6, tm / ta);
      const Timing tc = csv_path.empty() ? Timing{} : time_memcpy(mpi, bytes, reps);
      if (csv) {
        const char* names[6] = {"auto", "ring", "rd", "hd", "mpi", "memcpy"};
        for (int j = 0; j < 6; ++j) {
          const Timing& row = j < 5 ? t[static_cast<size_t>(j)] : tc;
          std::fprintf(csv, "%s,%d,%d,%lld,%s,%.9g,%.9g\n", setting.c_str(), n, hosts, static_cast<long long>(bytes),
                       names[j], row.median, row.best);
        }
        std::fflush(csv);
      }
    }
    if (csv) std::fclose(csv);
    if (rt.rank() == 0) {
      const MpiLinkModel m = spire.link_model();
      std::printf("link model (ranks 0-%d): alpha %.2f us (ping-pong %.2f us, a collective's step %.2f us), "
                  "beta %.2f GB/s, reduction %.2f GB/s\n",
                  n - 1, m.alpha * 1e6, m.link_alpha * 1e6, m.step_alpha * 1e6, 1e-9 / m.beta, 1e-9 / m.gamma);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    // The other ranks stop at once instead of timing out in a collective.
    MpiRuntime::get().announce_failure(e.what(), 2.0);
    return 1;
  }
}

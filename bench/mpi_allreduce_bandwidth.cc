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
//       [--core-probe 0]   (every round counts; see CoreProbe below)
//       [--near-ns 200]   (a round counts between probes up to this many ns, or
//                          2x the run's fastest probe if that is less; default: the latter)
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/mpi/mpi_algorithms.h"
#include "dist/mpi/mpi_communicator.h"
#include "dist/mpi/mpi_link_model.h"
#include "dist/mpi/mpi_runtime.h"

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

// How far apart the cores of two ranks are right now. Under a hypervisor
// the host may move the vCPUs between its cores: for seconds at a time
// they sit near each other or far apart (another CCD), and every byte
// that ranks on different cores exchange costs much more when far,
// flipping mid-run (bench/DISTRIBUTED.md says how much on the development VM).
// No model of one machine fits both, so the benchmark measures
// which one it is on: rank 0 and the first rank bound to another core
// ping-pong a cache line in shared memory (2048 round trips, the fastest
// batch of 64) before every round of calls and after the last; a round
// counts only when the probes on both sides of it are within 2x of the
// fastest probe of the run, and rounds go on (up to 4x --reps) until
// --reps of them count. A run that is far from its start to its end finds
// no near probe to compare with: --near-ns gives it the machine's (the
// calibration measures it first), and rows where no round counted say
// so (kept 0). Off (every round counts) when the ranks are not each bound
// to one CPU, or all on one, or where the partner cannot open rank 0's
// shared memory (another machine). Each probe also times a fixed loop on both
// ranks (alu_us: a diagnostic of the cores' speed, not a filter).
class CoreProbe {
 public:
  CoreProbe(MpiCommunicator& comm, bool wanted) : comm_(comm) {
    MpiRuntime& rt = MpiRuntime::get();
    const int n = rt.size(), me = rt.rank();
    // Each rank's CPU (when bound to exactly one), gathered by a sum.
    int cpu = -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpu = c;
    Tensor mine(DType::F64, Shape{n + 1}), all(DType::F64, Shape{n + 1});
    std::fill(mine.data<double>(), mine.data<double>() + n + 1, 0.0);
    mine.data<double>()[me] = cpu + 1;
    if (me == 0) mine.data<double>()[n] = static_cast<double>(getpid());
    sum(mine, all);
    const double* a = all.data<double>();
    const int cpu0 = static_cast<int>(a[0]) - 1;
    // The partner shares rank 0's host where one can (the probe's memory is
    // that host's); else a rank on another "host" is tried, which works
    // only where the hosts share the machine (the test hosts: network
    // namespaces); on a real one it cannot open the memory, and the probe
    // is off (below).
    const std::vector<int>& host = rt.hosts();
    const auto other_core = [&](int r) { return cpu0 >= 0 && a[r] >= 1 && static_cast<int>(a[r]) - 1 != cpu0; };
    for (int r = 1; r < n && partner_ < 0; ++r)
      if (other_core(r) && (host.size() != static_cast<size_t>(n) || host[r] == host[0])) partner_ = r;
    for (int r = 1; r < n && partner_ < 0; ++r)
      if (other_core(r)) partner_ = r;
    if (!wanted) partner_ = -1;
    if (partner_ < 0) return;
    name_ = "/spire-core-probe-" + std::to_string(static_cast<long long>(a[n]));
    role_ = me == 0 ? 1 : me == partner_ ? 2 : 0;
    // Rank 0 makes the segment (a leftover of the same name, from a run
    // that died before unlinking it, is removed first), the partner opens
    // it, rank 0 unlinks it once it is open or anything failed. A success
    // flag is summed so that every rank learns of a failure at once; where
    // the partner cannot open it, the probe is off (every round counts).
    struct Unlink {
      const std::string* name = nullptr;
      ~Unlink() {
        if (name) shm_unlink(name->c_str());
      }
    } unlink_at_end;
    double ok = 1.0;
    if (role_ == 1) {
      bool made = open_segment(O_CREAT | O_EXCL | O_RDWR);
      if (!made && errno == EEXIST) {
        shm_unlink(name_.c_str());
        made = open_segment(O_CREAT | O_EXCL | O_RDWR);
      }
      if (made) unlink_at_end.name = &name_;
      ok = made ? 1.0 : 0.0;
    }
    if (agreed_failures(ok)) throw_error("core probe: rank 0 cannot make shared memory '", name_, "'");
    if (role_ == 2) ok = open_segment(O_RDWR) ? 1.0 : 0.0;
    if (agreed_failures(ok)) {
      if (role_ == 1)
        std::fprintf(stderr, "core probe off: rank %d cannot open rank 0's shared memory '%s'\n", partner_,
                     name_.c_str());
      partner_ = -1;
      role_ = 0;
    }
  }
  CoreProbe(const CoreProbe&) = delete;
  CoreProbe& operator=(const CoreProbe&) = delete;
  ~CoreProbe() {
    if (flag_) munmap(flag_, kBytes);
  }

  bool enabled() const { return partner_ >= 0; }
  int partner() const { return partner_; }

  /// Collective (every rank calls it): the round trip in ns between rank
  /// 0's core and the partner's, on every rank; 0 when off.
  double measure() {
    if (partner_ < 0) return 0.0;
    std::vector<Participant> none;
    CollectiveCall call;
    call.name = "core probe";
    comm_.barrier(call, none);
    double ns = 0.0;
    if (role_ != 0) {
      std::atomic<uint64_t>& f = *flag_;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      double fastest = 1e30;
      for (int batch = 0; batch < 32; ++batch) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 64; ++i) {
          // Rank 0 writes odd values, its partner answers with the next even one.
          const uint64_t want = role_ == 1 ? seq_ + 2 : seq_ + 1;
          if (role_ == 1) f.store(seq_ + 1, std::memory_order_release);
          for (uint64_t spins = 1; f.load(std::memory_order_acquire) != want; ++spins)
            if (spins % 4096 == 0 && std::chrono::steady_clock::now() > deadline)
              throw_error("core probe: rank ", role_ == 1 ? partner_ : 0, " did not answer within 10 s");
          if (role_ == 2) f.store(seq_ + 2, std::memory_order_release);
          seq_ += 2;
        }
        fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      if (role_ == 1) ns = fastest / 64 * 1e9;
    }
    const double alu = role_ != 0 ? alu_us() : 0.0;
    Tensor mine(DType::F64, Shape{3}), all(DType::F64, Shape{3});
    mine.data<double>()[0] = ns;
    mine.data<double>()[1] = role_ == 1 ? alu : 0.0;
    mine.data<double>()[2] = role_ == 2 ? alu : 0.0;
    sum(mine, all);  // also the closing barrier
    last_alu_us_ = std::max(all.data<double>()[1], all.data<double>()[2]);
    return all.data<double>()[0];
  }
  /// The slower of the two probing ranks' alu_us() at the last measure().
  double last_alu_us() const { return last_alu_us_; }

  /// Microseconds of a fixed integer loop (the fastest of 16): how fast
  /// this core runs now. A diagnostic written beside the probe (the CSV's
  /// alu_us): on a shared host a core's speed changes between runs minutes
  /// apart (the host's clocks and neighbours), and with it some of the time
  /// of a near run.
  static double alu_us() {
    double best = 1e30;
    for (int b = 0; b < 16; ++b) {
      uint64_t x0 = 1, x1 = 2, x2 = 3, x3 = 4;
      const auto t0 = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < 20000; ++i) {
        x0 += x1 ^ i; x1 += x2 ^ i; x2 += x3 ^ i; x3 += x0 ^ i;
      }
      asm volatile("" : : "r"(x0 + x1 + x2 + x3));
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best * 1e6;
  }

 private:
  static constexpr size_t kBytes = 4096;

  bool open_segment(int flags) {
    const int fd = shm_open(name_.c_str(), flags, 0600);
    if (fd < 0) return false;
    void* p = MAP_FAILED;
    if (ftruncate(fd, kBytes) == 0) p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return false;
    if (flags & O_CREAT) flag_ = new (p) std::atomic<uint64_t>(0);
    else flag_ = static_cast<std::atomic<uint64_t>*>(p);
    return true;
  }
  bool agreed_failures(double ok) {
    Tensor mine(DType::F64, Shape{1}), all(DType::F64, Shape{1});
    mine.data<double>()[0] = 1.0 - ok;
    sum(mine, all);
    return all.data<double>()[0] > 0;
  }
  void sum(Tensor& in, Tensor& out) {
    std::vector<Participant> p{{0, in, out}};
    CollectiveCall call;
    call.name = "core probe";
    comm_.allreduce(call, p, ReduceOp::kSum);
  }

  MpiCommunicator& comm_;
  int partner_ = -1;
  int role_ = 0;  // 1: rank 0, 2: its partner, 0: neither
  std::string name_;
  std::atomic<uint64_t>* flag_ = nullptr;
  uint64_t seq_ = 0;
  double last_alu_us_ = 0.0;
};

// Seconds of a benchmark's repeated calls: the median (what the tables and
// bench/scaling_sim.py use) and the fastest (noise on a shared machine only
// adds time, but the fastest can vary between runs as much as the median
// does, so it is written beside it, not instead); with the core probe, the
// median probe of the rounds that counted, and how many did.
struct Timing {
  double median = 0.0;
  double best = 0.0;
  double probe_ns = 0.0;
  double alu_us = 0.0;
  int kept = 0;
  int rounds = 0;
};

Timing timing_of(std::vector<double> secs) {
  std::sort(secs.begin(), secs.end());
  return {secs[secs.size() / 2], secs.front()};
}

// Seconds of `reps` allreduces of `count` floats on each of `comms`,
// interleaved (rep r calls every communicator once, starting at r % k), so
// every algorithm sees the same conditions over the run; one warm-up each.
// `warm` untimed calls of the same communicator come before each timed
// one: over TCP a call right after one that sent whole buffers (recursive
// doubling, MPI_Allreduce) is slower than after a segmented one, so
// without them the order of the communicators shows in their times. A
// training loop calls one algorithm per bucket again and again: warm calls
// measure that.
// A call's time is the slowest rank's (each rank times its own call after
// a barrier; the times are gathered once all reps are done).
// `min_seconds` > 0: more reps where `reps` rounds of calls would take less
// (the warm-up round's slowest rank times it; at most 101 reps), so the
// median of a few-ms call rests on more than a handful of calls, which on
// a shared machine vary too much between runs.
// `probe` on: a round counts only between two near probes (CoreProbe);
// rounds go on until `reps` count or 4x `reps` have run. `fastest_probe`
// is the run's fastest probe so far (updated).
std::vector<Timing> time_allreduces(const std::vector<MpiCommunicator*>& comms, int64_t count, int reps, int warm,
                                    double min_seconds, CoreProbe& probe, double& fastest_probe) {
  Tensor in(DType::F32, Shape{count}), out(DType::F32, Shape{count});
  for (int64_t i = 0; i < count; ++i) in.data<float>()[i] = static_cast<float>(i % 7);
  std::vector<Participant> parts{{0, in, out}};
  CollectiveCall call;
  call.name = "bench";
  const size_t k = comms.size();
  std::vector<std::vector<double>> secs(k);
  std::vector<double> probes;  // probes[r] before round r, probes[r + 1] after it
  std::vector<double> speeds;  // the probes' ALU times (CoreProbe::last_alu_us)
  auto near = [&](double ns) { return ns <= 2.0 * fastest_probe; };
  auto counted = [&](size_t r) { return !probe.enabled() || (near(probes[r]) && near(probes[r + 1])); };
  int rounds = 0;
  for (int r = -1;; ++r) {
    if (r >= 0) {
      // Rounds that count so far (every rank computes the same from the
      // probes, which every rank has): stop at `reps`, or at 4x `reps` run.
      size_t good = 0;
      for (size_t q = 0; q + 1 < probes.size(); ++q) good += counted(q) ? 1 : 0;
      if (static_cast<int>(good) >= reps || r >= 4 * reps || (!probe.enabled() && r >= reps)) break;
      if (probes.empty()) probes.push_back(probe.measure()), speeds.push_back(probe.last_alu_us());
      fastest_probe = std::min(fastest_probe, probes.back());
    }
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
    if (r >= 0) {
      ++rounds;
      probes.push_back(probe.measure());
      speeds.push_back(probe.last_alu_us());
      fastest_probe = std::min(fastest_probe, probes.back());
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
  const size_t per = static_cast<size_t>(rounds);
  Tensor mine(DType::F64, Shape{static_cast<int64_t>(k * per)}), slowest(DType::F64, Shape{static_cast<int64_t>(k * per)});
  for (size_t j = 0; j < k; ++j)
    for (size_t r = 0; r < per; ++r) mine.data<double>()[j * per + r] = secs[j][r];
  std::vector<Participant> p{{0, mine, slowest}};
  CollectiveCall gather;
  gather.name = "bench times";
  comms.back()->allreduce(gather, p, ReduceOp::kMax);
  // The rounds that count, judged by the fastest probe of the run so far;
  // all of them when none does (the row's probe then says so).
  std::vector<size_t> keep;
  for (size_t r = 0; r < per; ++r)
    if (counted(r)) keep.push_back(r);
  const int kept = static_cast<int>(keep.size());
  if (keep.empty())
    for (size_t r = 0; r < per; ++r) keep.push_back(r);
  std::vector<double> kept_probes, kept_speeds;
  for (size_t r : keep) kept_probes.push_back(probes[r]), kept_speeds.push_back(speeds[r]);
  std::vector<Timing> result;
  for (size_t j = 0; j < k; ++j) {
    std::vector<double> t;
    for (size_t r : keep) t.push_back(slowest.data<double>()[j * per + r]);
    Timing timing = timing_of(t);
    timing.probe_ns = timing_of(kept_probes).median;
    timing.alu_us = timing_of(kept_speeds).median;
    timing.kept = kept;
    timing.rounds = static_cast<int>(per);
    result.push_back(timing);
  }
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
    bool core_probe = true;
    double near_ns = 0.0;  // a round counts between probes up to this (0: 2x the run's fastest probe)
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
      else if (k == "--core-probe") core_probe = v != "0";
      else if (k == "--near-ns") near_ns = std::max(0.0, std::atof(v.c_str()));
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
      if (fresh) std::fprintf(csv, "setting,ranks,hosts,bytes,algorithm,seconds,best,probe_ns,kept,rounds,alu_us\n");
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
    CoreProbe probe(mpi, core_probe);
    double fastest_probe = near_ns > 0 ? near_ns / 2 : 1e30;
    if (rt.rank() == 0) {
      if (probe.enabled())
        std::printf("core probe: rank 0 and rank %d (another core); a round counts between probes within 2x of "
                    "the fastest (the 'probe' column: their median round trip, the rounds that counted of all)\n",
                    probe.partner());
      else
        std::printf("core probe: off (%s); every round counts\n",
                    core_probe ? "the ranks are not each bound to one CPU, or all share one" : "--core-probe 0");
      std::printf("allreduce f32 sum, %d ranks, median of %d%s; busbw in GB/s\n%10s %12s %8s %5s %8s %8s %8s %8s %12s %9s %16s\n",
                  n, reps, min_seconds > 0 ? " or more calls (--min-seconds)" : "", "size", "Spire time", "busbw", "(alg)",
                  "ring", "rec-dbl", "halv-dbl", "MPI", "MPI time", "MPI/Spire", "probe");
    }
    for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
      const int64_t count = bytes / 4;
      const std::vector<Timing> t =
          time_allreduces({&spire, &ring, &rd, &hd, &mpi}, count, reps, warm, min_seconds, probe, fastest_probe);
      const double ta = t[0].median, tr = t[1].median, td = t[2].median, th = t[3].median, tm = t[4].median;
      const MpiAlgorithm a = spire.last_allreduce_algorithm();
      const char* chose = a == MpiAlgorithm::kRing ? "ring" : a == MpiAlgorithm::kHalvingDoubling ? "hd" : "rd";
      const double factor = 2.0 * (n - 1) / n;
      auto bw = [&](double t) { return bytes / t * factor / 1e9; };
      if (rt.rank() == 0)
        std::printf("%10s %9.1f us %8.2f %5s %8.2f %8.2f %8.2f %8.2f %9.1f us %9.2f %6.0f ns %3d/%-3d\n",
                    human(bytes).c_str(), ta * 1e6, bw(ta), chose, bw(tr), bw(td), bw(th), bw(tm), tm * 1e6, tm / ta,
                    t[0].probe_ns, t[0].kept, t[0].rounds);
      const Timing tc = csv_path.empty() ? Timing{} : time_memcpy(mpi, bytes, reps);
      if (csv) {
        const char* names[6] = {"auto", "ring", "rd", "hd", "mpi", "memcpy"};
        for (int j = 0; j < 6; ++j) {
          const Timing& row = j < 5 ? t[static_cast<size_t>(j)] : tc;
          const Timing& run = t[0];  // the size's probe (the memcpy row has none of its own)
          std::fprintf(csv, "%s,%d,%d,%lld,%s,%.9g,%.9g,%.4g,%d,%d,%.4g\n", setting.c_str(), n, hosts,
                       static_cast<long long>(bytes), names[j], row.median, row.best, run.probe_ns, run.kept, run.rounds,
                       run.alu_us);
        }
        std::fflush(csv);
      }
    }
    if (csv) std::fclose(csv);
    if (rt.rank() == 0) {
      const MpiLinkModel m = spire.link_model();
      std::printf("link model (ranks 0-%d): alpha %.2f us (ping-pong %.2f us, a collective's step %.2f us), "
                  "beta %.2f GB/s, reduction %.2f GB/s\n",
                  m.link_peer, m.alpha * 1e6, m.link_alpha * 1e6, m.step_alpha * 1e6, 1e-9 / m.beta, 1e-9 / m.gamma);
      if (m.host_beta > 0)
        std::printf("link model inside rank 0's host: alpha %.2f us, beta %.2f GB/s\n", m.host_alpha * 1e6,
                    1e-9 / m.host_beta);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    // The other ranks stop at once instead of timing out in a collective.
    MpiRuntime::get().announce_failure(e.what(), 2.0);
    return 1;
  }
}

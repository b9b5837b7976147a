// Spire's in-process ring (see dist/in_process_ring.h), the CPU RingDevice
// and the RingDevice factory table.
#include "dist/in_process_ring.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "dist/ring_device.h"
#include "dist/ring_schedule.h"
#include "kernels/functors.h"

namespace spire::dist {

// ---- reductions and the communicator interface's helpers -----------------------

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name, const std::string& what) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean" || name == "average" || name == "avg") return ReduceOp::kMean;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  throw_error(what, ": unknown reduction '", name, "' (expected sum, mean, max or min)");
}

void check_participants(const Communicator& comm, const CollectiveCall& call,
                        const std::vector<Participant>& parts) {
  const int local = static_cast<int>(comm.devices().size());
  SPIRE_CHECK(!parts.empty(), "collective '", call.name, "' on ", comm.name(),
              ": called with no participant");
  std::vector<bool> seen(static_cast<size_t>(local), false);
  for (const auto& p : parts) {
    SPIRE_CHECK(p.local >= 0 && p.local < local, "collective '", call.name, "' on ", comm.name(),
                ": participant ", p.local, " does not exist (", local, " local participants)");
    SPIRE_CHECK(!seen[static_cast<size_t>(p.local)], "collective '", call.name, "' on ",
                comm.name(), ": participant ", p.local, " appears twice in one call");
    seen[static_cast<size_t>(p.local)] = true;
    const Device& d = comm.devices()[static_cast<size_t>(p.local)];
    for (const Tensor* t : {&p.input, &p.output})
      SPIRE_CHECK(!t->defined() || t->device() == d, "collective '", call.name, "' on ",
                  comm.name(), ": participant ", p.local, " (", d.to_string(),
                  ") passed a tensor on ", t->device().to_string());
  }
}

// ---- RingDevice factories ---------------------------------------------------------

namespace {

// The CPU half: plain loops on the calling (lane) thread.
class CpuRingDevice final : public RingDevice {
 public:
  void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, int64_t n,
               int64_t divisor) override {
    visit_dtype(dtype, "ring allreduce", [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, bool>) {
        throw_error("ring allreduce: bool tensors cannot be reduced");
      } else {
        T* d = static_cast<T*>(dst);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(b);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kMean:
            if (divisor > 1) {
              const T div = static_cast<T>(divisor);
              for (int64_t i = 0; i < n; ++i) d[i] = functors::Add{}(x[i], y[i]) / div;
            } else {
              for (int64_t i = 0; i < n; ++i) d[i] = functors::Add{}(x[i], y[i]);
            }
            break;
          case ReduceOp::kMax:
            for (int64_t i = 0; i < n; ++i) d[i] = functors::Maximum{}(x[i], y[i]);
            break;
          case ReduceOp::kMin:
            for (int64_t i = 0; i < n; ++i) d[i] = functors::Minimum{}(x[i], y[i]);
            break;
        }
      }
    });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
  void scale_down(DType dtype, void* dst, const void* src, int64_t n, int64_t divisor) override {
    visit_dtype(dtype, "ring allreduce", [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, bool>) {
        const T div = static_cast<T>(divisor);
        for (int64_t i = 0; i < n; ++i) static_cast<T*>(dst)[i] = static_cast<const T*>(src)[i] / div;
      }
    });
  }
};

struct FactoryTable {
  std::mutex mu;
  std::map<DeviceType, RingDeviceFactory> factories;
};

FactoryTable& factory_table() {
  static FactoryTable* t = new FactoryTable;  // never destroyed (used during exit)
  return *t;
}

}  // namespace

void register_ring_device(DeviceType type, RingDeviceFactory factory) {
  auto& t = factory_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.factories[type] = std::move(factory);
}

std::unique_ptr<RingDevice> make_ring_device(const Device& device, int64_t units) {
  if (device.is_cpu()) return std::make_unique<CpuRingDevice>();
  auto& t = factory_table();
  RingDeviceFactory f;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.factories.find(device.type);
    if (it != t.factories.end()) f = it->second;
  }
  if (!f)
    throw_error("Spire's ring has no implementation for ", device.to_string(),
                " in this build (configure with SPIRE_CUDA=ON for GPUs)");
  return f(device, units);
}

// ---- one collective instance ----------------------------------------------------

namespace {

// Per-participant progress: 0 = not arrived, 1 = arrived, 2 + u = unit u done.
class ProgressBoard {
 public:
  explicit ProgressBoard(int n) : progress_(static_cast<size_t>(n)) {
    for (auto& p : progress_) p.store(0);
  }
  int64_t get(int p) const { return progress_[static_cast<size_t>(p)].load(); }
  void publish(int p, int64_t value) {
    progress_[static_cast<size_t>(p)].store(value);
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      cv_.notify_all();
    }
  }
  // Wakes every waiter (a participant failed).
  void wake_all() {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  // Waits until participant p's progress reaches `target`, or `failed()`
  // turns true (then returns false). Spins briefly (yielding, as lanes may
  // outnumber cores), then blocks with the run's cancellation and timeout.
  template <typename Failed, typename What>
  bool wait(int p, int64_t target, const RunContext& run, Failed failed, What what) {
    for (int spin = 0; spin < 64; ++spin) {
      if (get(p) >= target) return true;
      if (failed()) return false;
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);
    struct Done {
      std::atomic<int>& s;
      ~Done() { s.fetch_sub(1); }
    } done{sleepers_};
    wait_until(lock, cv_, run, [&] { return get(p) >= target || failed(); }, what);
    return get(p) >= target;
  }

 private:
  std::vector<std::atomic<int64_t>> progress_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

const char* kind_name(int kind) {
  static const char* names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};
  return names[kind];
}

}  // namespace

struct InProcessRing::Instance {
  struct Slot {
    Tensor in, out, work;  // work: the partial sums the successor reads (allreduce: out)
    std::unique_ptr<RingDevice> dev;
  };
  Instance(Kind k, ReduceOp o, int r, DType dt, int64_t c, int participants, int64_t seg)
      : kind(k), op(o), root(r), dtype(dt), count(c), n(participants),
        schedule(participants, c, seg), board(participants),
        slots(static_cast<size_t>(participants)) {}

  Kind kind;
  ReduceOp op;
  int root;
  DType dtype;
  int64_t count;  // elements of each input
  int n;
  RingSchedule schedule;
  ProgressBoard board;
  std::vector<Slot> slots;
  int64_t units = 0;
  int first_participant = -1;  // who set the signature (guarded by the ring's mu_)
  int arrived = 0;             // guarded by the ring's mu_
  int departed = 0;            // guarded by the ring's mu_

  std::atomic<bool> failed{false};
  std::mutex failure_mu;
  std::string failure;  // guarded by failure_mu; set before failed
  bool failure_is_cancellation = false;

  void fail(const std::string& message, bool cancellation) {
    {
      std::lock_guard<std::mutex> lock(failure_mu);
      if (failed.load()) return;
      failure = message;
      failure_is_cancellation = cancellation;
      failed.store(true);
    }
    board.wake_all();
  }
  [[noreturn]] void rethrow_failure() {
    std::string msg;
    bool cancel;
    {
      std::lock_guard<std::mutex> lock(failure_mu);
      msg = failure;
      cancel = failure_is_cancellation;
    }
    if (cancel) throw Cancelled(msg);
    throw Error(msg);
  }
};

InProcessRing::InProcessRing(std::vector<Device> devices, RingOptions options)
    : devices_(std::move(devices)), options_(options) {
  SPIRE_CHECK(!devices_.empty(), "InProcessRing: no devices");
  for (size_t i = 0; i < devices_.size(); ++i) {
    SPIRE_CHECK(devices_[i].type == devices_[0].type, "InProcessRing: devices ",
                devices_[0].to_string(), " and ", devices_[i].to_string(),
                " are of different types");
    for (size_t j = 0; j < i; ++j)
      SPIRE_CHECK(devices_[i] != devices_[j], "InProcessRing: device ", devices_[i].to_string(),
                  " appears twice");
  }
  SPIRE_CHECK(options_.segment_bytes >= 16, "InProcessRing: segment_bytes must be >= 16");
}

InProcessRing::~InProcessRing() = default;

std::string InProcessRing::name() const {
  std::string s = "ring(";
  for (size_t i = 0; i < devices_.size(); ++i) s += (i ? "," : "") + devices_[i].to_string();
  return s + ")";
}

size_t InProcessRing::open_instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instances_.size();
}

std::shared_ptr<InProcessRing::Instance> InProcessRing::join(const CollectiveCall& call, Kind kind,
                                                             ReduceOp op, int root,
                                                             const std::vector<Participant>& parts) {
  const int n = static_cast<int>(devices_.size());
  auto where = [&] { return str_cat(kind_name(static_cast<int>(kind)), " '", call.name, "' on ", name()); };
  // This call's view of the collective, and what is wrong with it (if anything).
  std::string problem;
  DType dtype = DType::F32;
  int64_t count = 0;
  for (size_t i = 0; i < parts.size() && problem.empty(); ++i) {
    const Participant& p = parts[i];
    const Device& d = devices_[static_cast<size_t>(p.local)];
    if (kind == Kind::kBarrier) break;
    if (!p.input.defined() || !p.output.defined()) {
      problem = str_cat("participant ", p.local, " (", d.to_string(), ") passed an undefined tensor");
      break;
    }
    if (p.input.dtype() != p.output.dtype()) {
      problem = str_cat("participant ", p.local, " has input ", p.input.type_string(), " but output ",
                        p.output.type_string());
      break;
    }
    const int64_t in = p.input.num_elements(), out = p.output.num_elements();
    int64_t want_out = in;
    if (kind == Kind::kAllGather) want_out = in * n;
    if (kind == Kind::kReduceScatter) {
      if (in % n != 0) {
        problem = str_cat("participant ", p.local, "'s input has ", in,
                          " elements, not a multiple of the ", n, " participants");
        break;
      }
      want_out = in / n;
    }
    if (out != want_out) {
      problem = str_cat("participant ", p.local, " (", d.to_string(), ") has an output of ", out,
                        " elements for an input of ", in, " (expected ", want_out, ")");
      break;
    }
    if (i == 0) {
      dtype = p.input.dtype();
      count = in;
    } else if (p.input.dtype() != dtype || in != count) {
      problem = str_cat("participants ", parts[0].local, " and ", p.local, " of one call pass ",
                        dtype_name(dtype), " x ", count, " and ", p.input.type_string());
    }
  }
  if (problem.empty() && kind == Kind::kBroadcast && (root < 0 || root >= n))
    problem = str_cat("root ", root, " is not a participant (", n, " participants)");

  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = instances_[call.key];
  if (!slot) {
    const size_t esize = kind == Kind::kBarrier ? 4 : dtype_size(dtype);
    slot = std::make_shared<Instance>(kind, op, root, dtype, count, n,
                                      static_cast<int64_t>(std::max<size_t>(1, options_.segment_bytes / esize)));
    Instance& I = *slot;
    const int64_t seg = I.schedule.segment_elems;
    const int64_t whole = std::max<int64_t>(1, (I.count + seg - 1) / seg);
    switch (kind) {
      case Kind::kAllReduce: I.units = n > 1 ? I.schedule.allreduce_units() : 0; break;
      case Kind::kReduceScatter: I.units = n > 1 ? I.schedule.rs_units() : 0; break;
      case Kind::kBroadcast: I.units = whole; break;
      case Kind::kAllGather: I.units = n * whole; break;
      case Kind::kBarrier: I.units = 0; break;
    }
    I.first_participant = parts[0].local;
  }
  std::shared_ptr<Instance> inst = slot;
  Instance& I = *inst;
  const int first = parts[0].local;
  if (problem.empty() && !I.failed.load()) {
    // The first difference from the participant that opened the instance.
    const std::string other = str_cat(" where participant ", I.first_participant, " ");
    std::string diff;
    if (I.kind != kind)
      diff = str_cat("called ", kind_name(static_cast<int>(kind)), other, "called ",
                     kind_name(static_cast<int>(I.kind)));
    else if (kind != Kind::kBarrier && I.dtype != dtype)
      diff = str_cat("passed ", dtype_name(dtype), other, "passed ", dtype_name(I.dtype));
    else if (kind != Kind::kBarrier && I.count != count)
      diff = str_cat("passed ", count, " elements", other, "passed ", I.count);
    else if ((kind == Kind::kAllReduce || kind == Kind::kReduceScatter) && I.op != op)
      diff = str_cat("asked for ", reduce_op_name(op), other, "asked for ", reduce_op_name(I.op));
    else if (kind == Kind::kBroadcast && I.root != root)
      diff = str_cat("named root ", root, other, "named root ", I.root);
    if (!diff.empty())
      problem = str_cat("the participants disagree: participant ", first, " (",
                        devices_[static_cast<size_t>(first)].to_string(), ") ", diff);
  }
  const int np = static_cast<int>(parts.size());
  if (!problem.empty() || I.failed.load()) {
    // Fail every participant of this instance with the same message; this
    // call arrives and leaves at once.
    if (!problem.empty()) I.fail(str_cat(where(), ": ", problem), false);
    I.arrived += np;
    I.departed += np;
    close_if_done(call.key, inst);
    I.rethrow_failure();
  }
  for (const auto& p : parts) {
    Instance::Slot& s = I.slots[static_cast<size_t>(p.local)];
    s.in = p.input;
    s.out = p.output;
    if (kind == Kind::kReduceScatter && n > 1)
      s.work = Tensor(I.dtype, Shape{I.count}, devices_[static_cast<size_t>(p.local)]);
    else
      s.work = p.output;
    s.dev = make_ring_device(devices_[static_cast<size_t>(p.local)], I.units);
  }
  I.arrived += np;
  return inst;
}

void InProcessRing::leave(const CollectiveCall& call, const std::shared_ptr<Instance>& inst,
                          int participants) {
  std::lock_guard<std::mutex> lock(mu_);
  inst->departed += participants;
  close_if_done(call.key, inst);
}

void InProcessRing::close_if_done(const CollectiveKey& key, const std::shared_ptr<Instance>& inst) {
  if (inst->departed < inst->arrived) return;
  auto it = instances_.find(key);
  if (it == instances_.end() || it->second != inst) return;
  if (inst->departed >= inst->n) {
    instances_.erase(it);
    return;
  }
  if (!inst->failed.load()) return;
  // A failed instance some participants have not reached yet stays, so they
  // fail with the same message instead of waiting for peers that left; the
  // oldest such instances are dropped beyond a bound (their late
  // participants then end by their run's cancellation or timeout).
  failed_.push_back(key);
  while (failed_.size() > kMaxFailedInstances) {
    auto old = instances_.find(failed_.front());
    if (old != instances_.end() && old->second->failed.load()) instances_.erase(old);
    failed_.pop_front();
  }
}

void InProcessRing::run(Kind kind, const CollectiveCall& call, std::vector<Participant>& parts,
                        ReduceOp op, int root) {
  check_participants(*this, call, parts);
  std::shared_ptr<Instance> inst = join(call, kind, op, root, parts);
  Instance& I = *inst;
  const int n = I.n;
  const RingSchedule& sch = I.schedule;
  const size_t esize = kind == Kind::kBarrier ? 0 : dtype_size(I.dtype);
  static const RunContext kNoRun{};
  const RunContext& run = call.run ? *call.run : kNoRun;
  auto bytes = [&](const Tensor& t, int64_t elem) { return static_cast<char*>(t.raw_data()) + elem * static_cast<int64_t>(esize); };

  // Waits until participant q reached `target`, then orders p's device after it.
  auto wait_for = [&](int p, int q, int64_t target) {
    if (q == p) return;
    bool ok = I.board.wait(q, target, run, [&] { return I.failed.load(); }, [&] {
      return str_cat(kind_name(static_cast<int>(kind)), " '", call.name, "' on ", name(),
                     ": participant ", p, " (", devices_[static_cast<size_t>(p)].to_string(),
                     ") waiting for participant ", q, " (", devices_[static_cast<size_t>(q)].to_string(),
                     target <= 1 ? ") to arrive" : str_cat(") to finish unit ", target - 2, " of ", I.units));
    });
    if (!ok) I.rethrow_failure();
    I.slots[static_cast<size_t>(p)].dev->after_peer(*I.slots[static_cast<size_t>(q)].dev, target - 2);
  };

  // The work of participant p's unit u.
  auto do_unit = [&](int p, int64_t u) {
    Instance::Slot& me = I.slots[static_cast<size_t>(p)];
    switch (kind) {
      case Kind::kAllReduce:
      case Kind::kReduceScatter: {
        const int64_t K = sch.segments();
        const int q = sch.pred(p);
        if (u < sch.rs_units()) {
          const int s = static_cast<int>(u / K);
          const int64_t k = u % K;
          const int c = sch.rs_chunk(p, s);
          const auto [b, e] = sch.segment(c, k);
          wait_for(p, q, s == 0 ? 1 : 2 + sch.rs_unit(s - 1, k));
          const Instance::Slot& prev = I.slots[static_cast<size_t>(q)];
          const bool last = s == n - 2;
          void* dst = (kind == Kind::kReduceScatter && last) ? bytes(me.out, b - sch.chunk_begin(c))
                                                              : bytes(me.work, b);
          if (e > b)
            me.dev->combine(I.op, I.dtype, dst, bytes(me.in, b), bytes(s == 0 ? prev.in : prev.work, b),
                            e - b, last && I.op == ReduceOp::kMean ? n : 1);
        } else {
          const int64_t v = u - sch.rs_units();
          const int s = static_cast<int>(v / K);
          const int64_t k = v % K;
          const auto [b, e] = sch.segment(sch.ag_chunk(p, s), k);
          wait_for(p, q, 2 + (s == 0 ? sch.rs_unit(n - 2, k) : sch.ag_unit(s - 1, k)));
          wait_for(p, sch.succ(p), 2 + sch.rs_unit(s, k));  // the successor is done reading it
          if (e > b)
            me.dev->copy(bytes(me.out, b), bytes(I.slots[static_cast<size_t>(q)].out, b),
                         static_cast<size_t>(e - b) * esize);
        }
        break;
      }
      case Kind::kBroadcast:
      case Kind::kAllGather: {
        if (kind == Kind::kBroadcast && p == I.root) break;  // copied before the units
        const int64_t seg = sch.segment_elems;
        const int64_t per = std::max<int64_t>(1, (I.count + seg - 1) / seg);
        const int src = kind == Kind::kBroadcast ? I.root : static_cast<int>(u / per);
        const int64_t k = u % per;
        const int64_t b = std::min(I.count, k * seg), e = std::min(I.count, (k + 1) * seg);
        const int64_t at = kind == Kind::kAllGather ? src * I.count : 0;
        wait_for(p, src, 1);
        if (e > b)
          me.dev->copy(bytes(me.out, at + b), bytes(I.slots[static_cast<size_t>(src)].in, b),
                       static_cast<size_t>(e - b) * esize);
        break;
      }
      case Kind::kBarrier:
        break;
    }
    I.board.publish(p, 2 + u);
    me.dev->published(u);
  };

  try {
    for (const auto& p : parts) {
      I.board.publish(p.local, 1);  // arrived
      I.slots[static_cast<size_t>(p.local)].dev->published(-1);
    }
    if (n == 1 && (kind == Kind::kAllReduce || kind == Kind::kReduceScatter)) {
      Instance::Slot& me = I.slots[0];  // a reduction over one participant is a copy
      me.dev->copy(me.out.raw_data(), me.in.raw_data(), static_cast<size_t>(I.count) * esize);
    } else if (kind == Kind::kBroadcast) {
      for (const auto& p : parts)
        if (p.local == I.root && I.count > 0)
          I.slots[static_cast<size_t>(p.local)].dev->copy(p.output.raw_data(), p.input.raw_data(),
                                                          static_cast<size_t>(I.count) * esize);
    }
    // Units in order; a group call interleaves its participants step by step.
    for (int64_t u = 0; u < I.units; ++u)
      for (const auto& p : parts) do_unit(p.local, u);
    // Leave together: nobody's buffers are released while a peer reads them.
    for (const auto& p : parts)
      for (int q = 0; q < n; ++q) wait_for(p.local, q, I.units + 1);
    std::vector<RingDevice*> peers;
    for (auto& s : I.slots) peers.push_back(s.dev.get());
    for (const auto& p : parts) I.slots[static_cast<size_t>(p.local)].dev->finish(peers);
  } catch (const Cancelled& e) {
    I.fail(e.what(), true);
    leave(call, inst, static_cast<int>(parts.size()));
    throw;
  } catch (const std::exception& e) {
    I.fail(e.what(), false);
    leave(call, inst, static_cast<int>(parts.size()));
    throw;
  }
  leave(call, inst, static_cast<int>(parts.size()));
}

void InProcessRing::allreduce(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) {
  run(Kind::kAllReduce, call, parts, op, 0);
}
void InProcessRing::broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) {
  run(Kind::kBroadcast, call, parts, ReduceOp::kSum, root);
}
void InProcessRing::allgather(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(Kind::kAllGather, call, parts, ReduceOp::kSum, 0);
}
void InProcessRing::reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                                   ReduceOp op) {
  run(Kind::kReduceScatter, call, parts, op, 0);
}
void InProcessRing::barrier(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(Kind::kBarrier, call, parts, ReduceOp::kSum, 0);
}

}  // namespace spire::dist

// Spire's in-process ring (see dist/comm/in_process_ring.h), the CPU RingDevice
// and the RingDevice factory table.
#include "dist/comm/in_process_ring.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "dist/comm/ring_device.h"
#include "dist/comm/ring_schedule.h"
#include "kernels/functors.h"

namespace spire::dist {

// ---- RingDevice factories ---------------------------------------------------------

namespace {

// The CPU half: plain loops on the calling (lane) thread.
class CpuRingDevice final : public RingDevice {
 public:
  void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, const Device&,
               int64_t n, int64_t divisor) override {
    if (dtype == DType::F16 || dtype == DType::BF16) {
      // 16-bit storage: each element combined in f32 and rounded once.
      const bool bf = dtype == DType::BF16;
      const functors::FromHalf<float> load{bf};
      const functors::ToHalf store{bf};
      uint16_t* d = static_cast<uint16_t*>(dst);
      const uint16_t* x = static_cast<const uint16_t*>(a);
      const uint16_t* y = static_cast<const uint16_t*>(b);
      const float div = static_cast<float>(divisor);
      for (int64_t i = 0; i < n; ++i) {
        const float u = load(x[i]), v = load(y[i]);
        float r = op == ReduceOp::kMax ? functors::Maximum{}(u, v)
                  : op == ReduceOp::kMin ? functors::Minimum{}(u, v)
                                         : u + v;
        if (divisor > 1 && (op == ReduceOp::kSum || op == ReduceOp::kMean)) r /= div;
        d[i] = store(r);
      }
      return;
    }
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
  void copy(void* dst, const void* src, const Device&, size_t bytes) override {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
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


}  // namespace

struct InProcessRing::Instance {
  struct Slot {
    Tensor in, out, work;  // work: the partial sums the successor reads (allreduce: out)
    std::unique_ptr<RingDevice> dev;
  };
  Instance(const CollectiveSignature& s, int participants, int64_t seg)
      : sig(s), n(participants), schedule(participants, s.count, seg), board(participants),
        slots(static_cast<size_t>(participants)) {}

  CollectiveSignature sig;  // set by the participant that opened the instance
  int n;
  RingSchedule schedule;
  ProgressBoard board;
  std::vector<Slot> slots;
  int64_t units = 0;
  int first_participant = -1;  // who set the signature (guarded by the ring's mu_)
  int arrived = 0;             // guarded by the ring's mu_
  int departed = 0;            // guarded by the ring's mu_
  bool in_failed_list = false;  // guarded by the ring's mu_

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

std::string InProcessRing::name() const { return "ring(" + device_list(devices_) + ")"; }

size_t InProcessRing::open_instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instances_.size();
}

std::shared_ptr<InProcessRing::Instance> InProcessRing::join(const CollectiveCall& call, Kind kind,
                                                             ReduceOp op, int root,
                                                             const std::vector<Participant>& parts) {
  const int n = static_cast<int>(devices_.size());
  std::string problem = participants_problem(*this, parts);
  // Participants that cannot be told apart cannot be told about the problem:
  // fail this call alone.
  if (!problem.empty() && (parts.empty() || parts[0].local < 0 || parts[0].local >= n))
    throw_error(collective_kind_name(kind), " '", call.name, "' on ", name(), ": ", problem);
  CollectiveSignature mine;
  if (problem.empty()) {
    mine = local_signature(kind, call, op, root, n, devices_, parts, &problem);
  } else {
    mine.kind = kind;
    mine.identity = collective_identity(call);
  }

  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = instances_[call.key];
  if (!slot) {
    const size_t esize = kind == Kind::kBarrier ? 4 : dtype_size(mine.dtype);
    slot = std::make_shared<Instance>(mine, n, static_cast<int64_t>(std::max<size_t>(1, options_.segment_bytes / esize)));
    Instance& I = *slot;
    const int64_t seg = I.schedule.segment_elems;
    const int64_t whole = std::max<int64_t>(1, (I.sig.count + seg - 1) / seg);
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
    const std::string diff = signature_difference(mine, I.sig, I.first_participant);
    if (!diff.empty())
      problem = str_cat("the participants disagree: participant ", first, " (",
                        devices_[static_cast<size_t>(first)].to_string(), ") ", diff);
  }
  const int np = static_cast<int>(parts.size());
  if (!problem.empty() || I.failed.load()) {
    // Fail every participant of this instance (with this call's problem,
    // unless it failed before); this call arrives and leaves at once.
    std::string message;
    if (!problem.empty()) {
      message = str_cat(collective_kind_name(kind), " '", call.name, "' on ", name(), ": ", problem);
      I.fail(message, false);
    }
    I.arrived += np;
    I.departed += np;
    close_if_done(call.key, inst);
    if (message.empty()) I.rethrow_failure();
    throw Error(message);
  }
  try {
    for (const auto& p : parts) {
      Instance::Slot& s = I.slots[static_cast<size_t>(p.local)];
      s.in = p.input;
      s.out = p.output;
      if (kind == Kind::kReduceScatter && n > 1)
        s.work = Tensor(I.sig.dtype, Shape{I.sig.count}, devices_[static_cast<size_t>(p.local)]);
      else
        s.work = p.output;
      s.dev = make_ring_device(devices_[static_cast<size_t>(p.local)], I.units);
    }
  } catch (const std::exception& e) {
    // (out of memory for the work buffer, no device half for this device type)
    I.fail(str_cat(collective_kind_name(kind), " '", call.name, "' on ", name(), ": participant ",
                   first, ": ", e.what()),
           false);
    I.arrived += np;
    I.departed += np;
    close_if_done(call.key, inst);
    I.rethrow_failure();
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
  if (!inst->failed.load() || inst->in_failed_list) return;
  inst->in_failed_list = true;
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
  std::shared_ptr<Instance> inst = join(call, kind, op, root, parts);
  Instance& I = *inst;
  const int n = I.n;
  const RingSchedule& sch = I.schedule;
  const size_t esize = kind == Kind::kBarrier ? 0 : dtype_size(I.sig.dtype);
  static const RunContext kNoRun{};
  const RunContext& run = call.run ? *call.run : kNoRun;
  auto bytes = [&](const Tensor& t, int64_t elem) { return static_cast<char*>(t.raw_data()) + elem * static_cast<int64_t>(esize); };

  // Waits until participant q reached `target`, then orders p's device after it.
  auto wait_for = [&](int p, int q, int64_t target) {
    if (q == p) return;
    bool ok = I.board.wait(q, target, run, [&] { return I.failed.load(); }, [&] {
      return str_cat(collective_kind_name(kind), " '", call.name, "' on ", name(),
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
            me.dev->combine(I.sig.op, I.sig.dtype, dst, bytes(me.in, b), bytes(s == 0 ? prev.in : prev.work, b),
                            devices_[static_cast<size_t>(q)], e - b,
                            last && I.sig.op == ReduceOp::kMean ? n : 1);
        } else {
          const int64_t v = u - sch.rs_units();
          const int s = static_cast<int>(v / K);
          const int64_t k = v % K;
          const auto [b, e] = sch.segment(sch.ag_chunk(p, s), k);
          wait_for(p, q, 2 + (s == 0 ? sch.rs_unit(n - 2, k) : sch.ag_unit(s - 1, k)));
          wait_for(p, sch.succ(p), 2 + sch.rs_unit(s, k));  // the successor is done reading it
          if (e > b)
            me.dev->copy(bytes(me.out, b), bytes(I.slots[static_cast<size_t>(q)].out, b),
                         devices_[static_cast<size_t>(q)], static_cast<size_t>(e - b) * esize);
        }
        break;
      }
      case Kind::kBroadcast:
      case Kind::kAllGather: {
        if (kind == Kind::kBroadcast && p == I.sig.root) break;  // copied before the units
        const int64_t seg = sch.segment_elems;
        const int64_t per = std::max<int64_t>(1, (I.sig.count + seg - 1) / seg);
        const int src = kind == Kind::kBroadcast ? I.sig.root : static_cast<int>(u / per);
        const int64_t k = u % per;
        const int64_t b = std::min(I.sig.count, k * seg), e = std::min(I.sig.count, (k + 1) * seg);
        const int64_t at = kind == Kind::kAllGather ? src * I.sig.count : 0;
        wait_for(p, src, 1);
        if (e > b)
          me.dev->copy(bytes(me.out, at + b), bytes(I.slots[static_cast<size_t>(src)].in, b),
                       devices_[static_cast<size_t>(src)], static_cast<size_t>(e - b) * esize);
        break;
      }
      case Kind::kBarrier:
        break;
    }
    // The device records its event first: a peer may act on the progress at once.
    me.dev->published(u);
    I.board.publish(p, 2 + u);
  };

  try {
    for (const auto& p : parts) {
      I.slots[static_cast<size_t>(p.local)].dev->published(-1);  // inputs ready (event first)
      I.board.publish(p.local, 1);                                // arrived
    }
    if (n == 1 && (kind == Kind::kAllReduce || kind == Kind::kReduceScatter)) {
      Instance::Slot& me = I.slots[0];  // a reduction over one participant is a copy
      me.dev->copy(me.out.raw_data(), me.in.raw_data(), devices_[0], static_cast<size_t>(I.sig.count) * esize);
    } else if (kind == Kind::kBroadcast) {
      for (const auto& p : parts)
        if (p.local == I.sig.root && I.sig.count > 0)
          I.slots[static_cast<size_t>(p.local)].dev->copy(p.output.raw_data(), p.input.raw_data(),
                                                          devices_[static_cast<size_t>(p.local)],
                                                          static_cast<size_t>(I.sig.count) * esize);
    }
    // Units in order; a group call interleaves its participants step by step.
    for (int64_t u = 0; u < I.units; ++u)
      for (const auto& p : parts) do_unit(p.local, u);
    // Leave together: nobody's buffers are released while a peer reads them
    // (on GPUs, after_peer makes each stream wait for every peer's last unit).
    for (const auto& p : parts)
      for (int q = 0; q < n; ++q) wait_for(p.local, q, I.units + 1);
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

}  // namespace spire::dist

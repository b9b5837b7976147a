// NCCL behind the Communicator interface (see nccl_communicator.h).
#include "dist/nccl/nccl_communicator.h"

#include <cstring>

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <thread>

#include "core/logger.h"
#include "kernels/cuda/cuda_context.h"

namespace spire::dist {

#define SPIRE_NCCL_CHECK(call)                                                               \
  do {                                                                                       \
    ncclResult_t spire_nccl_r_ = (call);                                                     \
    if (spire_nccl_r_ != ncclSuccess)                                                        \
      ::spire::throw_error("NCCL error at ", __FILE__, ":", __LINE__, ": ", #call, " failed: ", \
                           ncclGetErrorString(spire_nccl_r_));                               \
  } while (0)

namespace {

ncclDataType_t nccl_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::Bool: return ncclUint8;  // copies only (broadcast, allgather)
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    default: throw_error("NCCL: dtype ", dtype_name(dt), " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMean: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

}  // namespace

struct NcclCommunicator::Comms {
  std::vector<ncclComm_t> comms;
  /// Non-blocking communicators (across processes) are finalized within this bound first.
  bool nonblocking = false;
  double finalize_seconds = 60;
  /// Across processes, the communicator's own stream (null: the device's comm_stream()):
  /// HorovodTrainer's two NCCL communicators (buckets, and the other collectives) run on two
  /// lanes, and on one shared stream the ranks could queue their kernels in different orders,
  /// each waiting for the other's.
  cudaStream_t own_stream = nullptr;
  ~Comms() {
    using Clock = std::chrono::steady_clock;
    for (ncclComm_t c : comms) {
      if (!c) continue;
      if (nonblocking) {
        // Flush the pending work (ncclCommFinalize, polled), then free; one that does not
        // finish in time (a peer gone) is aborted instead of waited for.
        ncclResult_t state = ncclCommFinalize(c);
        const Clock::time_point deadline =
            Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(finalize_seconds));
        while (state == ncclInProgress && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (ncclCommGetAsyncError(c, &state) != ncclSuccess) state = ncclInternalError;
        }
        if (state != ncclSuccess) {
          ncclCommAbort(c);
          continue;
        }
      }
      ncclCommDestroy(c);
    }
    if (own_stream) cudaStreamDestroy(own_stream);
  }
};

// One call instance: the participants that arrived, and whether the group
// call was issued (or failed).
struct NcclCommunicator::Pending {
  CollectiveSignature sig;
  int first = -1;
  std::vector<Participant> parts;
  bool issued = false;
  std::string failure;
  int arrived = 0, departed = 0;
  bool in_failed_list = false;
  std::condition_variable cv;
};

namespace {

// Ends an NCCL group on every path (an exception inside a group would leave
// the thread's later NCCL calls nested in it).
struct GroupGuard {
  bool open = false;
  void start() {
    SPIRE_NCCL_CHECK(ncclGroupStart());
    open = true;
  }
  ncclResult_t end() {
    open = false;
    return ncclGroupEnd();
  }
  ~GroupGuard() {
    if (open) ncclGroupEnd();
  }
};

// Makes stream `later` of context `c` wait for the work queued on its
// stream `earlier` so far (a pooled event, on c's device).
void order_after(cuda::CudaContext& c, cudaStream_t earlier, cudaStream_t later) {
  cuda::DeviceGuard g(c.device());
  cuda::PooledEvent* e = c.events().acquire();
  SPIRE_CUDA_CHECK(cudaEventRecord(e->event, earlier));
  SPIRE_CUDA_CHECK(cudaStreamWaitEvent(later, e->event, 0));
  c.events().release(e);
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::vector<Device> devices)
    : devices_(std::move(devices)), comms_(std::make_unique<Comms>()) {
  SPIRE_CHECK(!devices_.empty(), "NcclCommunicator: no devices");
  std::vector<int> ids;
  for (size_t i = 0; i < devices_.size(); ++i) {
    SPIRE_CHECK(devices_[i].is_cuda(), "NcclCommunicator: ", devices_[i].to_string(), " is not a GPU");
    for (size_t j = 0; j < i; ++j)
      SPIRE_CHECK(devices_[i] != devices_[j], "NcclCommunicator: ", devices_[i].to_string(), " appears twice");
    ids.push_back(devices_[i].index);
    cuda::context_for(devices_[i].index);  // fails clearly for a device that does not exist
  }
  comms_->comms.resize(devices_.size(), nullptr);
  SPIRE_NCCL_CHECK(ncclCommInitAll(comms_->comms.data(), static_cast<int>(ids.size()), ids.data()));
}

NcclUniqueId nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId), "ncclUniqueId is 128 bytes");
  ncclUniqueId id;
  SPIRE_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.data(), &id, out.size());
  return out;
}

NcclCommunicator::NcclCommunicator(Device device, int rank, int nranks, const NcclUniqueId& id,
                                   NcclProcessOptions options)
    : devices_{device}, rank_(rank), nranks_(nranks), options_(std::move(options)),
      comms_(std::make_unique<Comms>()), across_processes_(true) {
  SPIRE_CHECK(device.is_cuda(), "NcclCommunicator: ", device.to_string(), " is not a GPU");
  SPIRE_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "NcclCommunicator: rank ", rank, " of ", nranks,
              " does not exist");
  SPIRE_CHECK(options_.timeout_seconds >= 0, "NcclCommunicator: timeout_seconds must be >= 0 (0: no limit), got ",
              options_.timeout_seconds);
  auto& c = cuda::context_for(device.index);  // fails clearly for a device that does not exist
  cuda::DeviceGuard g(c.device());
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), id.size());
  comms_->comms.resize(1, nullptr);
  comms_->nonblocking = true;
  // (Destruction is bounded all the same: without a limit, NCCL's finalize gets 10 s.)
  comms_->finalize_seconds = options_.timeout_seconds > 0 ? options_.timeout_seconds : 10;
  SPIRE_CUDA_CHECK(cudaStreamCreateWithFlags(&comms_->own_stream, cudaStreamNonBlocking));
  // Non-blocking: the initialization returns at once and is polled, so a rank that never
  // comes ends it after the timeout instead of hanging it.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::string what = str_cat("NCCL's initialization of ", name());
  const ncclResult_t r = ncclCommInitRankConfig(&comms_->comms[0], nranks, uid, rank, &config);
  try {
    if (r != ncclSuccess && r != ncclInProgress) throw_error(what, " failed: ", ncclGetErrorString(r));
    poll(nullptr, what, [](bool* done) {
      *done = true;  // poll() itself waits while NCCL reports ncclInProgress
      return std::string();
    });
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> issuing(issue_mu_);
    abort(e.what());
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() = default;

std::string NcclCommunicator::broken() const {
  std::lock_guard<std::mutex> lock(broken_mu_);
  return broken_;
}

void NcclCommunicator::abort(const std::string& why) {
  // ncclCommAbort ends the communicator's kernels and frees it without waiting for the
  // other ranks (ncclCommDestroy would wait for the pending work).
  for (ncclComm_t& c : comms_->comms)
    if (c) {
      ncclCommAbort(c);
      c = nullptr;
    }
  std::lock_guard<std::mutex> lock(broken_mu_);
  if (broken_.empty()) broken_ = why;
}

void NcclCommunicator::poll(const RunContext* run, const std::string& what,
                            const std::function<std::string(bool*)>& done) {
  using Clock = std::chrono::steady_clock;
  const bool by_run = run && run->timeout.count() > 0;
  const bool limited = by_run || options_.timeout_seconds > 0;  // (else the peers' failures and deaths end it)
  const Clock::duration limit =
      by_run ? std::chrono::duration_cast<Clock::duration>(run->timeout)
             : std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_seconds));
  const Clock::time_point start = Clock::now(), deadline = limited ? start + limit : Clock::time_point::max();
  Clock::time_point next_peer_check = start;
  const bool warn = options_.stall_check_seconds > 0 && options_.stall_check_seconds < 1e9;
  const Clock::duration warn_every =
      warn ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.stall_check_seconds))
           : Clock::duration::zero();
  Clock::time_point next_warning = warn ? start + warn_every : Clock::time_point::max();
  for (int spin = 0;; ++spin) {
    bool in_progress = false;
    for (ncclComm_t c : comms_->comms) {
      if (!c) continue;
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(c, &state);
      if (q != ncclSuccess) state = q;
      if (state == ncclInProgress) {
        in_progress = true;
      } else if (state != ncclSuccess) {
        throw_error(what, ": NCCL reported an asynchronous error: ", ncclGetErrorString(state), " (",
                    ncclGetLastError(c), ")");
      }
    }
    // A cancelled run or a failed peer ends the wait even where the work is done: the run
    // fails anyway, and the next call would wait for that peer.
    if (run && run->cancellation && run->cancellation->cancelled())
      throw Cancelled(str_cat(what, ": cancelled: another part of the run failed"));
    const Clock::time_point now = Clock::now();
    if (options_.peer_failure && now >= next_peer_check) {  // (at the cancellation's pace)
      next_peer_check = now + kCancellationPollInterval;
      const std::string peer = options_.peer_failure();
      if (!peer.empty()) throw_error(what, ": abandoned: ", peer);
    }
    bool finished = false;
    const std::string error = done(&finished);
    if (!error.empty()) throw_error(what, ": ", error);
    if (finished && !in_progress) return;
    if (now >= deadline)
      throw_error("timed out after ", std::chrono::duration<double>(limit).count(), " s waiting for ", what,
                  " (", by_run ? "SessionOptions" : "NcclProcessOptions",
                  "::timeout_seconds): a rank failed, stalled or issued another collective");
    if (now >= next_warning) {
      logger::warn(what, " has waited ", static_cast<int64_t>(std::chrono::duration<double>(now - start).count()),
                   " s; no rank has failed, died or finished, so it goes on waiting",
                   limited ? str_cat(" (up to ", std::chrono::duration<double>(limit).count(), " s)")
                           : std::string(" (no time limit)"));
      next_warning = now + warn_every;
    }
    // Spin briefly (a collective often ends within microseconds), then sleep in short slices.
    if (spin < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string NcclCommunicator::name() const {
  if (nranks_ > 1) return str_cat("nccl(rank ", rank_, " of ", nranks_, ", ", device_list(devices_), ")");
  return "nccl(" + device_list(devices_) + ")";
}

void NcclCommunicator::issue(const CollectiveSignature& sig, std::vector<Participant>& all, const RunContext* run,
                             const std::string& where) {
  // One group at a time per communicator: NCCL communicators are not
  // thread-safe, and every GPU must see the collectives in the same order.
  std::lock_guard<std::mutex> issuing(issue_mu_);
  {
    const std::string why = broken();
    if (!why.empty()) throw_error(where, ": the communicator is unusable: ", why);
  }
  // Everything that may throw comes before the group starts.
  const ncclDataType_t dtype = sig.kind == CollectiveKind::kBarrier ? ncclFloat32 : nccl_dtype(sig.dtype);
  const ncclRedOp_t op = nccl_op(sig.op);
  // Order each communication stream after its compute stream's work so far.
  // (comm_stream() sets its device itself when it creates the stream.)
  std::vector<cudaStream_t> streams;
  for (Participant& p : all) {
    auto& c = cuda::context_for(devices_[static_cast<size_t>(p.local)].index);
    streams.push_back(comms_->own_stream ? comms_->own_stream : c.comm_stream());
    order_after(c, c.stream(), streams.back());
  }
  GroupGuard group;
  group.start();
  ncclResult_t r = ncclSuccess;
  for (size_t k = 0; k < all.size() && (r == ncclSuccess || r == ncclInProgress); ++k) {
    Participant& p = all[k];
    ncclComm_t comm = comms_->comms[static_cast<size_t>(p.local)];
    const void* in = p.input.defined() ? p.input.raw_data() : nullptr;
    void* out = p.output.defined() ? p.output.raw_data() : nullptr;
    const size_t count = static_cast<size_t>(sig.count);
    switch (sig.kind) {
      case CollectiveKind::kAllReduce:
        r = ncclAllReduce(in, out, count, dtype, op, comm, streams[k]);
        break;
      case CollectiveKind::kBroadcast:
        r = ncclBroadcast(in, out, count, dtype, sig.root, comm, streams[k]);
        break;
      case CollectiveKind::kAllGather:
        r = ncclAllGather(in, out, count, dtype, comm, streams[k]);
        break;
      case CollectiveKind::kReduceScatter:
        r = ncclReduceScatter(in, out, count / static_cast<size_t>(size()), dtype, op, comm, streams[k]);
        break;
      case CollectiveKind::kBarrier:
        break;  // the rendezvous is the barrier: it orders the hosts, not the GPUs' streams
    }
  }
  const ncclResult_t end = group.end();
  // From here an error leaves work of this call in flight: the communicator is aborted.
  try {
    for (ncclResult_t x : {r, end})
      if (x != ncclSuccess && x != ncclInProgress)
        throw_error(where, ": NCCL failed: ", ncclGetErrorString(x), " (", ncclGetLastError(comms_->comms[0]), ")");
    if (!across_processes_) {
      // (One process: a blocking communicator, no rank to wait for.)
    } else {
      // Across processes: wait until the work is done on the GPU (or NCCL fails, the run is
      // cancelled or times out, or a peer failed). One participant per process.
      auto& c = cuda::context_for(devices_[static_cast<size_t>(all.at(0).local)].index);
      cuda::DeviceGuard g(c.device());
      cuda::PooledEvent* e = c.events().acquire();
      struct Release {
        cuda::CudaContext& c;
        cuda::PooledEvent* e;
        ~Release() { c.events().release(e); }
      } release{c, e};
      // A non-blocking communicator may still be enqueuing the group's kernels
      // (ncclInProgress): the event goes on the stream after them.
      poll(run, str_cat(where, " to be enqueued"), [](bool* done) {
        *done = true;  // poll() itself waits while NCCL reports ncclInProgress
        return std::string();
      });
      SPIRE_CUDA_CHECK(cudaEventRecord(e->event, streams.at(0)));
      poll(run, str_cat(where, " to complete on every rank"), [&](bool* done) {
        const cudaError_t q = cudaEventQuery(e->event);
        *done = q == cudaSuccess;
        return q == cudaSuccess || q == cudaErrorNotReady ? std::string() : std::string(cudaGetErrorString(q));
      });
    }
  } catch (const std::exception& e) {
    abort(e.what());
    throw;
  }
  // Later compute work (readers of the outputs, and the frees of the inputs
  // and outputs, which the allocator orders on the compute stream) waits for
  // the communication.
  for (size_t k = 0; k < all.size(); ++k) {
    auto& c = cuda::context_for(devices_[static_cast<size_t>(all[k].local)].index);
    order_after(c, streams[k], c.stream());
  }
}

void NcclCommunicator::run(CollectiveKind kind, const CollectiveCall& call,
                           std::vector<Participant>& parts, ReduceOp op, int root) {
  const int n = static_cast<int>(devices_.size());
  auto where = [&] { return str_cat(collective_kind_name(kind), " '", call.name, "' on ", name()); };
  {
    const std::string why = broken();
    if (!why.empty()) throw_error(where(), ": the communicator is unusable: ", why);
  }
  std::string problem = participants_problem(*this, parts);
  if (!problem.empty()) throw_error(where(), ": ", problem);
  CollectiveSignature mine = local_signature(kind, call, op, root, size(), devices_, parts, &problem);
  if (!problem.empty()) throw_error(where(), ": ", problem);
  if (static_cast<int>(parts.size()) == n) {  // a group call: no rendezvous
    issue(mine, parts, call.run, where());
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto& slot = pending_[call.key];
  if (!slot) {
    slot = std::make_shared<Pending>();
    slot->sig = mine;
    slot->first = parts[0].local;
  }
  std::shared_ptr<Pending> pend = slot;
  const int np = static_cast<int>(parts.size());
  pend->arrived += np;
  // Leaves this call: closes the instance when everyone came, or keeps a
  // failed one (bounded) for participants that have not come yet.
  auto leave = [&] {
    pend->departed += np;
    auto it = pending_.find(call.key);
    if (it == pending_.end() || it->second != pend) return;
    if (pend->departed >= n) {
      pending_.erase(it);
    } else if (!pend->failure.empty() && pend->departed >= pend->arrived && !pend->in_failed_list) {
      pend->in_failed_list = true;
      pend->parts.clear();  // drop the tensors
      failed_.push_back(call.key);
      while (failed_.size() > 64) {
        auto old = pending_.find(failed_.front());
        if (old != pending_.end() && !old->second->failure.empty()) pending_.erase(old);
        failed_.pop_front();
      }
    }
  };
  if (pend->failure.empty()) {
    const std::string diff = signature_difference(mine, pend->sig, pend->first);
    if (!diff.empty())
      pend->failure = str_cat(where(), ": the participants disagree: participant ", parts[0].local, " (",
                              devices_[static_cast<size_t>(parts[0].local)].to_string(), ") ", diff);
  }
  if (!pend->failure.empty()) {
    pend->cv.notify_all();
    const std::string failure = pend->failure;
    leave();
    throw Error(failure);
  }
  pend->parts.insert(pend->parts.end(), parts.begin(), parts.end());
  if (static_cast<int>(pend->parts.size()) == n) {
    try {
      issue(pend->sig, pend->parts, call.run, where());
      pend->issued = true;
    } catch (const std::exception& e) {
      pend->failure = e.what();
    }
    pend->parts.clear();
    pend->cv.notify_all();
    const std::string failure = pend->failure;
    leave();
    if (!failure.empty()) throw Error(failure);
    return;
  }
  static const RunContext kNoRun{};
  try {
    wait_until(lock, pend->cv, call.run ? *call.run : kNoRun,
               [&] { return pend->issued || !pend->failure.empty(); },
               [&] { return str_cat(where(), ": ", pend->parts.size(), " of ", n, " participants arrived"); });
  } catch (...) {
    if (pend->failure.empty()) pend->failure = str_cat(where(), ": a participant gave up waiting");
    pend->cv.notify_all();
    leave();
    throw;
  }
  const std::string failure = pend->failure;
  leave();
  if (!failure.empty()) throw Error(failure);
}

}  // namespace spire::dist

// NCCL behind the Communicator interface (see nccl_communicator.h).
#include "dist/cuda/nccl_communicator.h"

#include <nccl.h>

#include <condition_variable>

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
  ~Comms() {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
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
  std::condition_variable cv;
};

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

NcclCommunicator::~NcclCommunicator() = default;

std::string NcclCommunicator::name() const {
  std::string s = "nccl(";
  for (size_t i = 0; i < devices_.size(); ++i) s += (i ? "," : "") + devices_[i].to_string();
  return s + ")";
}

void NcclCommunicator::issue(const CollectiveSignature& sig, std::vector<Participant>& all) {
  // Order each communication stream after its compute stream's work so far.
  for (Participant& p : all) {
    auto& c = cuda::context_for(devices_[static_cast<size_t>(p.local)].index);
    cuda::DeviceGuard g(c.device());
    cuda::PooledEvent* ready = c.events().acquire();
    SPIRE_CUDA_CHECK(cudaEventRecord(ready->event, c.stream()));
    SPIRE_CUDA_CHECK(cudaStreamWaitEvent(c.comm_stream(), ready->event, 0));
    c.events().release(ready);
  }
  SPIRE_NCCL_CHECK(ncclGroupStart());
  ncclResult_t r = ncclSuccess;
  for (Participant& p : all) {
    if (r != ncclSuccess) break;
    auto& c = cuda::context_for(devices_[static_cast<size_t>(p.local)].index);
    ncclComm_t comm = comms_->comms[static_cast<size_t>(p.local)];
    const void* in = p.input.defined() ? p.input.raw_data() : nullptr;
    void* out = p.output.defined() ? p.output.raw_data() : nullptr;
    const size_t count = static_cast<size_t>(sig.count);
    switch (sig.kind) {
      case CollectiveKind::kAllReduce:
        r = ncclAllReduce(in, out, count, nccl_dtype(sig.dtype), nccl_op(sig.op), comm, c.comm_stream());
        break;
      case CollectiveKind::kBroadcast:
        r = ncclBroadcast(in, out, count, nccl_dtype(sig.dtype), sig.root, comm, c.comm_stream());
        break;
      case CollectiveKind::kAllGather:
        r = ncclAllGather(in, out, count, nccl_dtype(sig.dtype), comm, c.comm_stream());
        break;
      case CollectiveKind::kReduceScatter:
        r = ncclReduceScatter(in, out, count / devices_.size(), nccl_dtype(sig.dtype), nccl_op(sig.op),
                              comm, c.comm_stream());
        break;
      case CollectiveKind::kBarrier:
        break;  // the rendezvous itself is the barrier within one process
    }
  }
  ncclResult_t end = ncclGroupEnd();
  SPIRE_NCCL_CHECK(r);
  SPIRE_NCCL_CHECK(end);
  // Later compute work waits for the communication; the blocks NCCL uses are
  // reused only after it finished.
  for (Participant& p : all) {
    auto& c = cuda::context_for(devices_[static_cast<size_t>(p.local)].index);
    cuda::DeviceGuard g(c.device());
    cuda::PooledEvent* done = c.events().acquire();
    SPIRE_CUDA_CHECK(cudaEventRecord(done->event, c.comm_stream()));
    SPIRE_CUDA_CHECK(cudaStreamWaitEvent(c.stream(), done->event, 0));
    c.events().release(done);
    if (p.input.defined()) p.input.record_stream(c.comm_stream());
    if (p.output.defined()) p.output.record_stream(c.comm_stream());
  }
}

void NcclCommunicator::run(CollectiveKind kind, const CollectiveCall& call,
                           std::vector<Participant>& parts, ReduceOp op, int root) {
  check_participants(*this, call, parts);
  const int n = static_cast<int>(devices_.size());
  auto where = [&] { return str_cat(collective_kind_name(kind), " '", call.name, "' on ", name()); };
  std::string problem;
  CollectiveSignature mine = local_signature(kind, op, root, n, devices_, parts, &problem);
  if (!problem.empty()) throw_error(where(), ": ", problem);
  if (static_cast<int>(parts.size()) == n) {  // a group call: no rendezvous
    issue(mine, parts);
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
  if (pend->failure.empty()) {
    const std::string diff = signature_difference(mine, pend->sig, pend->first);
    if (!diff.empty())
      pend->failure = str_cat(where(), ": the participants disagree: participant ", parts[0].local, " (",
                              devices_[static_cast<size_t>(parts[0].local)].to_string(), ") ", diff);
  }
  if (!pend->failure.empty()) {
    pend->cv.notify_all();
    throw Error(pend->failure);
  }
  pend->parts.insert(pend->parts.end(), parts.begin(), parts.end());
  if (static_cast<int>(pend->parts.size()) == n) {
    pending_.erase(call.key);
    try {
      issue(pend->sig, pend->parts);
      pend->issued = true;
    } catch (const std::exception& e) {
      pend->failure = e.what();
    }
    pend->cv.notify_all();
    if (!pend->failure.empty()) throw Error(pend->failure);
    return;
  }
  static const RunContext kNoRun{};
  try {
    wait_until(lock, pend->cv, call.run ? *call.run : kNoRun,
               [&] { return pend->issued || !pend->failure.empty(); },
               [&] { return str_cat(where(), ": ", pend->parts.size(), " of ", n, " participants arrived"); });
  } catch (...) {
    if (pending_.count(call.key) && pending_[call.key] == pend) pending_.erase(call.key);
    if (pend->failure.empty()) pend->failure = str_cat(where(), ": a participant gave up waiting");
    pend->cv.notify_all();
    throw;
  }
  if (!pend->failure.empty()) throw Error(pend->failure);
}

void NcclCommunicator::allreduce(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) {
  run(CollectiveKind::kAllReduce, call, parts, op, 0);
}
void NcclCommunicator::broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) {
  run(CollectiveKind::kBroadcast, call, parts, ReduceOp::kSum, root);
}
void NcclCommunicator::allgather(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(CollectiveKind::kAllGather, call, parts, ReduceOp::kSum, 0);
}
void NcclCommunicator::reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                                      ReduceOp op) {
  run(CollectiveKind::kReduceScatter, call, parts, op, 0);
}
void NcclCommunicator::barrier(const CollectiveCall& call, std::vector<Participant>& parts) {
  run(CollectiveKind::kBarrier, call, parts, ReduceOp::kSum, 0);
}

}  // namespace spire::dist

// NcclCommunicator: NCCL between the GPUs of one process (ncclCommInitAll),
// or one GPU per process across processes (ncclCommInitRank, the unique id
// handed to every rank by the caller, e.g. over MPI:
// dist/mpi/mpi_communicator.h's make_process_communicator), behind the
// Communicator interface. Built when SPIRE_CUDA finds NCCL.
//
// Each call's participants meet by key (as in Spire's ring, with the same
// validation: every participant fails with the first difference); the last
// one to arrive issues one NCCL group call (ncclGroupStart/End) for all
// local participants (one group at a time per communicator), the others wait
// for it with the run's cancellation and timeout. The work goes on each
// device's communication stream, ordered after its compute stream by a
// pooled event, and the compute stream waits for it before its later work
// (the outputs' readers, and the frees the caching allocator orders on that
// stream). Never run on a GPU in CI (compiled only).
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace spire::dist {

/// The unique id that names one NCCL communicator across processes
/// (ncclUniqueId's 128 bytes).
using NcclUniqueId = std::array<char, 128>;
/// A new unique id (ncclGetUniqueId); one process makes it and gives it to the others.
NcclUniqueId nccl_unique_id();

class NcclCommunicator final : public DispatchingCommunicator {
 public:
  /// One NCCL communicator per device (all CUDA devices of this process,
  /// each once). Throws spire::Error with NCCL's message on failure.
  explicit NcclCommunicator(std::vector<Device> devices);
  /// This process's one GPU `device` as rank `rank` of `nranks` processes
  /// that all pass the same `id` (ncclCommInitRank, which waits for every
  /// rank).
  NcclCommunicator(Device device, int rank, int nranks, const NcclUniqueId& id);
  ~NcclCommunicator() override;

  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }
  int rank() const override { return rank_; }
  int num_ranks() const override { return nranks_; }

 private:
  struct Pending;
  struct Comms;
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root) override;
  void issue(const CollectiveSignature& sig, std::vector<Participant>& all);

  std::vector<Device> devices_;
  int rank_ = 0, nranks_ = 1;
  std::unique_ptr<Comms> comms_;
  std::mutex issue_mu_;  // one NCCL group at a time
  std::mutex mu_;        // guards pending_, failed_ and the Pending entries
  std::map<CollectiveKey, std::shared_ptr<Pending>> pending_;
  std::deque<CollectiveKey> failed_;
};

}  // namespace spire::dist

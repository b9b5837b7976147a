// NcclCommunicator: NCCL between the GPUs of one process (ncclCommInitAll),
// behind the Communicator interface. Built when SPIRE_CUDA finds NCCL.
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

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace spire::dist {

class NcclCommunicator final : public Communicator {
 public:
  /// One NCCL communicator per device (all CUDA devices of this process,
  /// each once). Throws spire::Error with NCCL's message on failure.
  explicit NcclCommunicator(std::vector<Device> devices);
  ~NcclCommunicator() override;

  std::string name() const override;
  const std::vector<Device>& devices() const override { return devices_; }

  void allreduce(const CollectiveCall& call, std::vector<Participant>& parts, ReduceOp op) override;
  void broadcast(const CollectiveCall& call, std::vector<Participant>& parts, int root) override;
  void allgather(const CollectiveCall& call, std::vector<Participant>& parts) override;
  void reduce_scatter(const CollectiveCall& call, std::vector<Participant>& parts,
                      ReduceOp op) override;
  void barrier(const CollectiveCall& call, std::vector<Participant>& parts) override;

 private:
  struct Pending;
  struct Comms;
  void run(CollectiveKind kind, const CollectiveCall& call, std::vector<Participant>& parts,
           ReduceOp op, int root);
  void issue(const CollectiveSignature& sig, std::vector<Participant>& all);

  std::vector<Device> devices_;
  std::unique_ptr<Comms> comms_;
  std::mutex issue_mu_;  // one NCCL group at a time
  std::mutex mu_;        // guards pending_, failed_ and the Pending entries
  std::map<CollectiveKey, std::shared_ptr<Pending>> pending_;
  std::deque<CollectiveKey> failed_;
};

}  // namespace spire::dist
